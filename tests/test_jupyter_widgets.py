"""Widgets and their throttle, driven in-process (no kernel): ``SessionView``, ``ToolPoolView``,
``AgentView``, ``WidgetApproval``, ``Throttle``."""

from __future__ import annotations

import asyncio
import html
import itertools
import time
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import Any

import comm
import pytest
from _view_helpers import asking_view, scripted_agent, scripted_app

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.jupyter import (
    AgentView,
    SessionView,
    Throttle,
)
from agentloop_nb.jupyter.view import _liveturn, _throttle
from agentloop_nb.jupyter.view._sessionview import SEGMENT
from agentloop_nb.jupyter.view._throttle import Pacer
from agentloop_nb.llm import BlockAssembler
from agentloop_nb.session import SessionStore
from agentloop_nb.testing import HANG, ScriptedModel, combine, text, tool_call
from agentloop_nb.tools import tool


@pytest.fixture
def comm_messages(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Count every message widgets send to the front end, by message type."""
    counts: Counter[str] = Counter()
    original = comm.DummyComm.publish_msg

    def publish(self: Any, msg_type: str, *args: Any, **kwargs: Any) -> None:
        counts[msg_type] += 1
        original(self, msg_type, *args, **kwargs)

    monkeypatch.setattr(comm.DummyComm, "publish_msg", publish)
    yield counts


@pytest.fixture
def fresh_pacer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's render pacers start empty for this test (and come back after it)."""
    monkeypatch.setattr(_throttle, "_PACERS", weakref.WeakKeyDictionary())


def _chunk_event(session: Any, chunk: dict[str, Any]) -> None:
    session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})


@pytest.mark.anyio
async def test_session_view_coalesces_10000_chunks_into_bounded_updates_with_exact_text(
    comm_messages: Counter[str],
) -> None:
    ctx = Context()
    store = SessionStore(ctx)
    session = store.create("s")
    interval = 0.02
    view = SessionView(session, interval=interval)
    comm_messages.clear()
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    pieces = [f"t{i} " for i in range(10_000)]
    start = time.monotonic()
    for i, piece in enumerate(pieces):
        _chunk_event(session, {"type": "text-delta", "index": 0, "text": piece})
        if i % 50 == 0:
            await asyncio.sleep(0)  # let the loop run, as a real stream would
    _chunk_event(session, {"type": "block-end", "index": 0})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    await view.throttle.settled()
    elapsed = time.monotonic() - start

    renders_bound = elapsed / interval + 2
    assert view.throttle.renders <= renders_bound
    streamed = "".join(pieces)
    # one tail update per render; each filled segment adds its last value and the new tail
    # in the children; a few children updates for the turn's items and the finished answer
    segments = len(streamed) // SEGMENT + 1
    assert comm_messages["comm_msg"] <= renders_bound + 2 * segments + 6
    assert view.throttle.renders < 10_000 / 10
    assert [i.text for i in view.transcript.items if i.kind == "assistant"] == [streamed]
    assert "agentloop-turn-end" in view.turn_htmls[-1]
    assert streamed[-20:].strip() in view.turn_htmls[-1]


@pytest.mark.anyio
async def test_a_streaming_update_sends_only_the_growing_tail_not_the_whole_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes: list[int] = []
    original = comm.DummyComm.publish_msg

    def publish(self: Any, msg_type: str, *args: Any, **kwargs: Any) -> None:
        if msg_type == "comm_msg":
            sizes.append(len(repr(kwargs.get("data", args[0] if args else None))))
        original(self, msg_type, *args, **kwargs)

    monkeypatch.setattr(comm.DummyComm, "publish_msg", publish)
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    words = 3 * SEGMENT // 5
    for i in range(words):
        _chunk_event(session, {"type": "text-delta", "index": 0, "text": f"word{i} "})
        if i % 200 == 0:
            await view.throttle.settled()
    await view.throttle.settled()
    streamed = sum(len(f"word{i} ") for i in range(words))
    assert streamed > 5 * SEGMENT
    assert max(sizes) < SEGMENT + 500  # never the whole answer in one update
    text = view.turn_htmls[-1]
    assert "word0 " in text and f"word{words - 1} " in text and "agentloop-streaming" in text
    view.close()


@pytest.mark.anyio
async def test_a_new_segment_of_a_streaming_answer_opens_one_widget(
    comm_messages: Counter[str],
) -> None:
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "start "})
    await view.throttle.settled()
    comm_messages.clear()
    for _ in range(4):  # four more full segments, one render each
        _chunk_event(session, {"type": "text-delta", "index": 0, "text": "x" * SEGMENT})
        await view.throttle.settled()
    # the segment's own model only (its layout and style are the view's shared ones), and
    # once, with the second segment, the box wrapping the segments
    assert comm_messages["comm_open"] == 4 + 1
    # per new segment: the filled one's last value and the box's children; the new one's
    # value and classes travel in its comm_open (no update right after opening). The second
    # segment: the first one's last value and its classes in one message, the box opening
    # with its children, the turn's children (the box in place of the lone segment)
    assert comm_messages["comm_msg"] == 2 * 4
    view.close()


@pytest.mark.anyio
async def test_a_new_streamed_item_and_its_turn_open_with_their_classes_in_one_message_each(
    comm_messages: Counter[str],
) -> None:
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    await view.throttle.settled()
    comm_messages.clear()
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "start "})
    await view.throttle.settled()
    opened = comm_messages["comm_open"]
    assert opened >= 3  # the turn's box, its start line, the stream's (lone) segment
    # at most the children of the new turn box and of the transcript body; nothing else:
    # every widget opened with its value and classes
    assert comm_messages["comm_msg"] <= 3
    assert "agentloop-streaming" in view.turn_htmls[-1]
    view.close()


def _user_event(session: Any, message_id: str, text: str, kind: str = "user") -> None:
    session.append(
        "user/message",
        {
            "message": {
                "id": message_id,
                "role": "user",
                "content": [{"type": "text", "text": text}],
                "source": {"kind": kind},
            }
        },
    )


@pytest.mark.anyio
async def test_a_new_turn_with_a_prompt_and_a_streamed_answer_opens_three_widgets(
    comm_messages: Counter[str],
) -> None:
    # What twenty views pay at once when twenty agents start a turn: the turn's box, one
    # widget for its start line and prompt (they never change), the answer's one segment
    # (no wrapper box while it fits in one); the box opens with its children, so the only
    # update is the transcript body's children.
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    await view.throttle.settled()
    comm_messages.clear()
    session.append("turn/start", {"turn": 1})
    _user_event(session, "m1", "tell me <everything>")
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "so it <begins>"})
    await view.throttle.settled()
    assert comm_messages["comm_open"] == 3
    assert comm_messages["comm_msg"] == 1
    turn = view.body.children[-1]
    assert len(turn.children) == 2
    head, answer = turn.children
    assert "agentloop-turn-start" in head.value and "tell me &lt;everything&gt;" in head.value
    assert set(answer._dom_classes) >= {"agentloop-assistant", "agentloop-streaming"}
    assert answer.value == "so it &lt;begins&gt;"
    html = view.turn_htmls[-1]
    assert html.index("turn 1") < html.index("tell me") < html.index("so it")
    comm_messages.clear()
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": " and goes on"})
    await view.throttle.settled()
    assert dict(comm_messages) == {"comm_msg": 1}  # the answer's text, nothing else
    assert answer.value == "so it &lt;begins&gt; and goes on"
    view.close()


@pytest.mark.anyio
async def test_settled_items_in_a_row_share_a_widget_and_one_after_a_stream_gets_its_own(
    comm_messages: Counter[str],
) -> None:
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    await view.throttle.settled()
    turn = view.body.children[-1]
    (head,) = turn.children
    _user_event(session, "m1", "first")
    await view.throttle.settled()
    assert turn.children == (head,)  # the run grew: same widget, sent again
    assert "turn 1" in head.value and "first" in head.value
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "answer"})
    await view.throttle.settled()
    comm_messages.clear()
    _user_event(session, "m2", "steering", kind="steer")
    await view.throttle.settled()
    assert comm_messages["comm_open"] == 1  # the steer's own widget; the head is not resent
    assert len(turn.children) == 3 and turn.children[0] is head
    assert "steering" in turn.children[2].value and "steering" not in head.value
    html = view.turn_htmls[-1]
    assert html.index("first") < html.index("answer") < html.index("steering")
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    await view.throttle.settled()
    assert head not in turn.children  # sealed: one widget for the whole turn
    assert "first" in view.turn_htmls[-1] and "steering" in view.turn_htmls[-1]
    view.close()


@pytest.mark.anyio
async def test_a_second_turn_shows_its_prompt_and_answer_in_the_first_turns_widgets(
    comm_messages: Counter[str],
) -> None:
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    _user_event(session, "m1", "first question")
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "first answer"})
    await view.throttle.settled()
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    await view.throttle.settled()
    comm_messages.clear()
    session.append("turn/start", {"turn": 2})
    _user_event(session, "m2", "second question")
    session.append(
        "assistant/chunk",
        {"turn": 2, "step": 1, "chunk": {"type": "block-start", "index": 0, "block_type": "text"}},
    )
    session.append(
        "assistant/chunk",
        {
            "turn": 2,
            "step": 1,
            "chunk": {"type": "text-delta", "index": 0, "text": "second answer"},
        },
    )
    await view.throttle.settled()
    # the new turn's box is the one new model; its prompt and its answer each take a widget
    # the first turn no longer shows (a new value and classes: one message each), and the
    # transcript body lists the new box
    assert comm_messages["comm_open"] == 1
    assert comm_messages["comm_msg"] == 3
    first, second = view.turn_htmls
    assert "first question" in first and "first answer" in first
    assert "second" not in first
    assert second.index("turn 2") < second.index("second question") < second.index("second answer")
    assert "first" not in second
    head, answer = view.body.children[-1].children
    assert "agentloop-streaming" in answer._dom_classes and answer.value == "second answer"
    assert head._dom_classes == ("agentloop-item",)
    view.close()


@pytest.mark.anyio
async def test_a_finished_answer_replaces_its_lone_segment_in_place_in_one_message(
    comm_messages: Counter[str],
) -> None:
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "**done**"})
    await view.throttle.settled()
    turn = view.body.children[-1]
    children = turn.children
    comm_messages.clear()
    _chunk_event(session, {"type": "block-end", "index": 0})
    await view.throttle.settled()
    assert dict(comm_messages) == {"comm_msg": 1}  # its Markdown and classes, in place
    assert turn.children == children
    answer = children[-1]
    assert answer._dom_classes == ("agentloop-item",)
    assert "<strong>done</strong>" in answer.value and "agentloop-streaming" not in answer.value
    view.close()


@pytest.mark.anyio
async def test_a_lone_segment_moves_into_a_wrapper_when_the_second_one_opens() -> None:
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "reasoning"})
    _chunk_event(session, {"type": "reasoning-delta", "index": 0, "text": "a" * (SEGMENT - 1)})
    await view.throttle.settled()
    turn = view.body.children[-1]
    lone = turn.children[-1]
    assert "agentloop-reasoning" in lone._dom_classes
    _chunk_event(session, {"type": "reasoning-delta", "index": 0, "text": "bc"})
    await view.throttle.settled()
    box = turn.children[-1]
    assert box is not lone and "agentloop-reasoning" in box._dom_classes
    assert box.children[0] is lone and lone._dom_classes == ("agentloop-segment",)
    assert [w.value for w in box.children] == ["a" * (SEGMENT - 1) + "b", "c"]
    view.close()


@pytest.mark.anyio
async def test_a_streaming_render_escapes_only_what_arrived_since_the_last_render(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    escaped: list[int] = []

    def counting(text: str, quote: bool = True) -> str:
        escaped.append(len(text))
        return html.escape(text, quote)

    monkeypatch.setattr(_liveturn, "escape", counting)
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    pieces = [f"<w{i}> & " for i in range(SEGMENT // 4)]  # about two segments and a half
    for i, piece in enumerate(pieces):
        _chunk_event(session, {"type": "text-delta", "index": 0, "text": piece})
        if i % 20 == 0:
            await view.throttle.settled()
    await view.throttle.settled()
    streamed = "".join(pieces)
    assert view.throttle.renders > 100
    # every character escaped about once (a new segment's first text once more), where
    # escaping each render's whole last segment would be about a hundred times the text
    assert sum(escaped) < 2 * len(streamed)
    box = view.body.children[-1].children[-1]
    assert "".join(w.value for w in box.children) == html.escape(streamed)
    view.close()


@pytest.mark.anyio
async def test_a_streaming_render_never_reads_the_whole_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole: list[int] = []
    original = BlockAssembler.streamed_text

    def counted(self: BlockAssembler) -> str | None:
        whole.append(1)
        return original(self)

    monkeypatch.setattr(BlockAssembler, "streamed_text", counted)
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    text = ""
    for i in range(40):  # about four segments, a render after each piece
        piece = f"{i} " + "y" * (SEGMENT // 10)
        _chunk_event(session, {"type": "text-delta", "index": 0, "text": piece})
        text += piece
        await view.throttle.settled()
    assert not whole  # each render read the segments not final yet, never the whole text
    box = view.body.children[-1].children[-1]
    assert len(box.children) == len(text) // SEGMENT + 1
    assert "".join(w.value for w in box.children) == text
    view.close()


@pytest.mark.anyio
async def test_a_widget_kept_for_reuse_holds_no_stale_text(
    comm_messages: Counter[str],
) -> None:
    session = SessionStore(Context()).create("s")
    view = SessionView(session, interval=0)
    session.append("turn/start", {"turn": 1})
    _user_event(session, "m1", "a secret question")
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "a secret answer"})
    await view.throttle.settled()
    live = list(view.body.children[-1].children)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    await view.throttle.settled()
    kept = [w for w, _ in view._spare.kept]
    assert kept and set(kept) <= set(live)  # the live turn's widgets, shown nowhere now
    assert all(w not in view.body.children[-1].children for w in kept)
    assert [w.value for w in kept] == [""] * len(kept)
    assert "a secret answer" in view.turn_htmls[-1]  # the sealed turn shows it
    comm_messages.clear()
    session.append("turn/start", {"turn": 2})
    _user_event(session, "m2", "next")
    await view.throttle.settled()
    (head,) = view.body.children[-1].children
    assert head in kept and "next" in head.value and "secret" not in head.value
    assert comm_messages["comm_open"] == 1  # the new turn's box; its run reuses a kept widget
    view.close()


@pytest.mark.anyio
async def test_throttle_renders_at_most_once_per_interval_and_always_trails() -> None:
    seen: list[int] = []
    state = {"n": 0}
    throttle = Throttle(lambda: seen.append(state["n"]), interval=0.05)
    for n in range(1, 101):
        state["n"] = n
        throttle.poke()
    await throttle.settled()
    assert seen == [100]  # a synchronous burst collapses into one render of the final state
    state["n"] = 101
    throttle.poke()
    assert throttle.pending
    await throttle.settled()
    assert seen == [100, 101]
    throttle.close()
    throttle.poke()
    assert not throttle.pending


@pytest.mark.anyio
async def test_throttle_poke_after_schedules_one_later_render_until_closed() -> None:
    rendered = asyncio.Event()
    seen: list[str] = []

    def render() -> None:
        seen.append("r")
        rendered.set()

    throttle = Throttle(render, interval=0)
    throttle.poke_after(0)
    throttle.poke_after(0)  # one is scheduled already: no second one
    assert not throttle.pending  # nothing changed yet: the poke comes later
    await asyncio.wait_for(rendered.wait(), 5)
    await throttle.settled()
    assert seen == ["r"]
    throttle.poke_after(60)
    throttle.close()  # drops the scheduled poke (it would otherwise hold a timer for 60 s)
    throttle.poke_after(0)  # closed: nothing is scheduled
    assert not throttle.pending and seen == ["r"]


@pytest.mark.anyio
async def test_views_due_together_render_in_turns_with_the_loop_running_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every render fills its pacer slot (as twenty real views' comm sends would): the loop
    # gets back between any two renders, so a shell message never waits for all of them.
    monkeypatch.setattr(_throttle, "SLOT", 0.0)
    loop = asyncio.get_running_loop()
    order: list[str] = []
    done = False

    def tick() -> None:  # one per loop iteration
        order.append("loop")
        if not done:
            loop.call_soon(tick)

    throttles = [Throttle(lambda i=i: order.append(f"render {i}"), interval=0) for i in range(20)]
    loop.call_soon(tick)
    for t in throttles:
        t.poke()
    for t in throttles:
        await t.settled()
    done = True
    renders = [e for e in order if e != "loop"]
    assert renders == [f"render {i}" for i in range(20)]  # each once, in the order they came due
    assert not [(a, b) for a, b in itertools.pairwise(order) if a != "loop" and b != "loop"]


@pytest.mark.anyio
@pytest.mark.usefixtures("fresh_pacer")
async def test_cheap_renders_due_together_share_one_pacer_slot() -> None:
    loop = asyncio.get_running_loop()
    seen: list[int] = []
    throttles = [Throttle(lambda i=i: seen.append(i), interval=0) for i in range(5)]
    for t in throttles:
        t.poke()
    for t in throttles:
        await t.settled()
    assert seen == list(range(5))
    assert Pacer.of(loop).slots == 1


@pytest.mark.anyio
@pytest.mark.usefixtures("fresh_pacer")
async def test_renders_past_the_pacers_rate_wait_for_it_and_none_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_throttle, "BURST", 3)
    monkeypatch.setattr(_throttle, "RATE", 1e-6)  # no token comes back during the test
    loop = asyncio.get_running_loop()
    seen: list[int] = []
    throttles = [Throttle(lambda i=i: seen.append(i), interval=0) for i in range(5)]
    for t in throttles:
        t.poke()
    await throttles[2].settled()
    assert seen == [0, 1, 2]  # the bucket's three; the others wait in the queue
    assert len(Pacer.of(loop)) == 2 and throttles[3].pending and throttles[4].pending
    for t in throttles[3:]:
        t.flush()  # what a test or a teardown does; the pacer never drops them
    assert seen == [0, 1, 2, 3, 4] and len(Pacer.of(loop)) == 0


@pytest.mark.anyio
@pytest.mark.usefixtures("fresh_pacer")
async def test_a_queued_render_flushed_or_closed_leaves_the_pacer() -> None:
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    flushed = Throttle(lambda: seen.append("flushed"), interval=0)
    closed = Throttle(lambda: seen.append("closed"), interval=0)
    flushed.poke()
    closed.poke()
    assert len(Pacer.of(loop)) == 2  # both due, waiting for the pacer's slot
    flushed.flush()
    closed.close()
    assert seen == ["flushed"] and len(Pacer.of(loop)) == 0
    await flushed.settled()
    await closed.settled()
    assert seen == ["flushed"]  # rendered once, by the flush; the closed one never


def test_throttle_without_a_running_loop_renders_at_once() -> None:
    seen: list[str] = []
    throttle = Throttle(lambda: seen.append("r"))
    throttle.poke()
    throttle.poke()
    assert seen == ["r", "r"]


@pytest.mark.anyio
async def test_session_view_renders_history_of_a_finished_agent_on_construction() -> None:
    app, _ = scripted_app([text("hello <world> & co")])
    agent = scripted_agent(app)
    agent.followup("hi <b>")
    await agent.when_idle()
    view = SessionView(agent.session)
    html = view.turn_htmls[0]
    assert "agentloop-user" in html and "hi &lt;b&gt;" in html
    assert "agentloop-assistant" in html and "hello &lt;world&gt; &amp; co" in html
    assert "<world>" not in html and "<b>" not in html.replace("<b>user</b>", "")
    assert "agentloop-turn-end agentloop-turn-end-completed" in html
    assert "assistant: hello <world> & co" in repr(view)
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_transcript_shows_reasoning_retries_errors_usage_and_interruptions() -> None:
    ctx = Context()
    session = SessionStore(ctx).create("s")
    view = SessionView(session)
    session.append("turn/start", {"turn": 1})
    session.append(
        "user/message",
        {
            "message": {
                "id": "m1",
                "role": "user",
                "content": [{"type": "text", "text": "go"}],
                "source": {"kind": "inject"},
            }
        },
    )
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "reasoning"})
    _chunk_event(session, {"type": "reasoning-delta", "index": 0, "text": "think"})
    session.append(
        "assistant/attempt",
        {
            "turn": 1,
            "step": 1,
            "chunks": [],
            "failure": {"kind": "error", "code": "RATE_LIMIT", "message": "slow down"},
        },
    )
    session.append("llm/retry", {"code": "RATE_LIMIT", "attempt": 1, "delay": 0.5})
    _chunk_event(session, {"type": "block-start", "index": 0, "block_type": "text"})
    _chunk_event(session, {"type": "text-delta", "index": 0, "text": "half"})
    session.append(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "interrupted": True,
            "message": {"role": "assistant", "content": [{"type": "text", "text": "half"}]},
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    )
    session.append(
        "turn/end", {"turn": 1, "reason": {"kind": "aborted", "cause": {"kind": "user"}}}
    )
    view.throttle.flush()
    html = view.turn_htmls[-1]
    for css in (
        "agentloop-source-inject",
        "agentloop-reasoning",
        "agentloop-error",
        "agentloop-retry",
        "agentloop-usage",
        "agentloop-interrupted",
        "agentloop-turn-end-aborted",
    ):
        assert css in html, css
    assert "<details" in html and "think" in html
    lines = view.text.splitlines()
    assert "[user/inject] go" in lines
    assert "! request error RATE_LIMIT: slow down" in lines
    assert "assistant: half [interrupted]" in lines
    assert lines[-1] == "── turn 1 ended: aborted (user) ──"


@pytest.mark.anyio
async def test_tool_pool_view_shows_parallel_calls_running_together_on_a_timeline() -> None:
    started: list[str] = []
    both_running = asyncio.Event()
    release = asyncio.Event()

    @tool(concurrency_safe=True)
    async def wait(tag: str) -> str:
        """Wait for the test to release it."""
        started.append(tag)
        if len(started) == 2:
            both_running.set()
        await release.wait()
        return f"ok {tag}"

    app, _ = scripted_app(
        [
            combine(tool_call("c1", "wait", {"tag": "a"}), tool_call("c2", "wait", {"tag": "b"})),
            text("done"),
        ]
    )
    app.ctx.tools.register(wait)
    agent = scripted_agent(app)
    view = AgentView(agent)
    agent.followup("go")
    await both_running.wait()
    view.flush()
    table = view.pool_view.table.value
    assert table.count("agentloop-pool-running") == 2
    assert table.count('class="agentloop-bar agentloop-bar-running"') == 2
    assert "running" in view.pool_view.text
    release.set()
    await agent.when_idle()
    await view.settled()
    table = view.pool_view.table.value
    assert table.count("agentloop-pool-done") == 2
    assert 'data-call-id="c1"' in table and 'data-call-id="c2"' in table
    assert "agentloop-status-idle" in view.status.value
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_ask_shows_approve_deny_buttons_and_approve_runs_the_tool() -> None:
    @tool
    def danger(x: int) -> str:
        """Needs approval."""
        return f"ran {x}"

    asking = await asking_view(
        [tool_call("c1", "danger", {"x": 1}), tool_call("c2", "danger", {"x": 2}), text("done")],
        danger,
    )
    app, agent, view, asked = asking.app, asking.agent, asking.view, asking.asked
    await view.pool_view.throttle.settled()
    assert "awaiting approval" in view.pool_view.table.value
    buttons = view.pool_view.approval_buttons("c1")
    assert buttons is not None
    approve, _deny = buttons
    asked.clear()
    approve.click()
    await asked.wait()  # the second call asks in turn
    view.pool_view.approval_buttons("c2")[1].click()  # type: ignore[index]
    await agent.when_idle()
    results = {e.data["call_id"]: e.data for e in agent.session.events if e.type == "tool/result"}
    assert results["c1"]["content"] == "ran 1" and not results["c1"]["is_error"]
    assert results["c2"]["error"]["code"] == "DENIED"
    assert results["c2"]["content"] == "Error: tool call denied: denied by the user (risky)"
    assert results["c2"]["meta"] == {"approval": "denied"}
    assert view.pool_view.approval_buttons("c2") is None
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_agent_view_controls_follow_up_steer_inject_and_cancel() -> None:
    app, model = scripted_app([HANG, text("after"), text("more")])
    agent = scripted_agent(app)
    view = AgentView(agent)
    streaming = asyncio.Event()
    app.ctx.on(
        "session/event", lambda p: streaming.set() if p.event.type == "assistant/chunk" else None
    )
    view.send_button.click()
    assert "type a message first" in view.notice.value
    view.prompt.value = "first"
    view.send_button.click()
    assert agent.status == "running" and view.prompt.value == ""
    view.prompt.value = "context"
    view.inject_button.click()
    assert [m.source["kind"] for m in agent.inbox.next_step] == ["inject"]
    await streaming.wait()  # cancel a turn that is streaming
    view.cancel_button.click()
    await agent.when_idle()
    assert agent.inbox.next_step == ()
    view.prompt.value = "again"
    view.send_button.click()
    view.prompt.value = "steered"
    view.steer_button.click()
    await agent.when_idle()
    await view.settled()
    text_ = view.text
    assert "── turn 1 ended: aborted (user) ──" in text_
    assert "assistant: partial [interrupted]" in text_
    assert "[user/steer] steered" in text_ and "assistant: after" in text_
    assert "agentloop-status-idle" in view.status.value
    assert len(model.requests) == 2
    view.cancel_button.click()
    assert "nothing to cancel" in view.notice.value
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_view_of_a_resumed_session_renders_history_without_rerunning(tmp_path: Any) -> None:
    app, _ = scripted_app([text("remembered")])
    app2 = None
    try:
        app = App(persistence_root=tmp_path)
        model = ScriptedModel([text("remembered")])
        app.ctx.llm.register_adapter(["scripted"], model)
        agent = scripted_agent(app)
        agent.followup("remember this")
        await agent.when_idle()
        sid = agent.session.id
        await app.aclose()
        app2 = App(persistence_root=tmp_path)
        model2 = ScriptedModel([])
        app2.ctx.llm.register_adapter(["scripted"], model2)
        handle = await app2.ctx.agents.resume(resume_session_id=sid)
        view = AgentView(handle.agent)
        assert "assistant: remembered" in view.text
        assert "[user] remember this" in view.text
        assert model2.requests == []
        view.close()
    finally:
        await app.aclose()
        if app2 is not None:
            await app2.aclose()
