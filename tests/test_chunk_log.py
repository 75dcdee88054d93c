"""A streamed response is logged coalesced and announced live: views see every chunk as it
streams (``session/chunk``), the log holds the same content in fewer ``assistant/chunk``
events, each with one ``chunk`` (a text block's deltas joined, a tool-call block once, when it
ends), and everything rebuilt from the log (the message, a view, a replay, crash repair)
matches what was shown live."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from _log_state import derived_state
from _loop_helpers import (
    WAIT,
    chunk_text,
    events,
    logged_chunks,
    make_app,
    new_agent,
    run,
    wait_for,
)

from agentloop_nb.app import App
from agentloop_nb.jupyter.fold import SessionFeed, Transcript
from agentloop_nb.llm import (
    CHUNK_ADAPTER,
    BlockEnd,
    BlockStart,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    assemble,
)
from agentloop_nb.messages import AssistantMessage
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.session._chunklog import MAX_HELD
from agentloop_nb.testing import combine, hang_after, text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


@tool
def noop(q: int = 0) -> str:
    """Do nothing."""
    return "ok"


@pytest.fixture
async def app() -> Any:
    app = make_app()
    app.ctx.tools.register(noop)
    yield app
    await app.aclose()


def _logged(agent: Any) -> list[Any]:
    """Every logged chunk, typed, in log order."""
    return [CHUNK_ADAPTER.validate_python(json.loads(json.dumps(c))) for c in logged_chunks(agent)]


def _items(transcript: Transcript) -> list[Any]:
    # A live view times a call's end at its settling (``tools/settled``, not logged): the one
    # difference a log cannot hold, and not about chunks.
    live_only = ("settled", "ended")
    return [
        (i.kind, i.turn, {k: v for k, v in i.data.items() if k not in live_only}, i.text)
        for i in transcript.items
    ]


async def test_a_tool_call_block_is_logged_once_when_it_ends_and_text_deltas_joined(
    app: App,
) -> None:
    agent, _ = new_agent(app, tool_call("c1", "noop", {"q": 1}, text="let me see"), text("ok"))
    await run(agent)
    block = {"type": "tool-call", "id": "c1", "name": "noop", "arguments": '{"q": 1}'}
    assert logged_chunks(agent, step=1) == [
        {"type": "block-start", "index": 0, "block_type": "text"},
        {"type": "text-delta", "index": 0, "text": "let me see"},  # ten deltas streamed
        {"type": "block-end", "index": 0},
        {"type": "block-end", "index": 1, "block": block},  # four chunks streamed
        # usage and finish: the message that follows implies them (log version 3)
    ]
    step = [e.type for e in agent.session.events if e.data.get("step") == 1]
    assert step == [
        "step/start",
        *["assistant/chunk"] * 4,
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
    ]


async def test_the_message_event_shares_the_chunk_events_frozen_blocks_and_usage(
    app: App,
) -> None:
    # What the chunk log froze of a tool-call block is the very value the
    # ``assistant/message`` holds again (one frozen copy in the log), and the data is what
    # the dump gives; the usage and the finish the message implies are not logged as chunks.
    stream = combine(tool_call("a", "noop", {"q": 1}), tool_call("b", "noop", {"q": 2}, text="x"))
    agent, _ = new_agent(app, stream, stream, text("end"))
    await run(agent)
    for step in (1, 2):
        chunks = logged_chunks(agent, step=step)
        (message,) = [e for e in events(agent, "assistant/message") if e.data["step"] == step]
        calls = [c["block"] for c in chunks if c["type"] == "block-end" and "block" in c]
        content = message.data["message"]["content"]
        assert [b for b in content if b["type"] == "tool-call"] == calls
        assert all(any(b is c for b in content) for c in calls)
        assert not [c for c in chunks if c["type"] in ("usage", "finish")]
        typed, usage_model, _ = assemble(stream)
        assert json.loads(json.dumps(message.data["message"])) == typed.model_dump(mode="json")
        usage = usage_model.model_dump(mode="json", exclude_none=True)  # type: ignore[union-attr]
        assert message.data["usage"] == usage


async def test_live_listeners_see_every_chunk_as_it_streams(app: App) -> None:
    stream = tool_call("c1", "noop", {"q": 1}, text="let me see")
    agent, _ = new_agent(app, stream, text("ok"))
    seen: list[tuple[int, int, Any]] = []
    logged_before: list[int] = []

    def on_chunk(payload: Any) -> None:
        seen.append((payload.turn, payload.step, payload.chunk))
        logged_before.append(len(payload.session.events))

    app.ctx.on("session/chunk", on_chunk)
    await run(agent)
    first = [c for t, s, c in seen if (t, s) == (1, 1)]
    assert first == [c.model_dump(mode="json", exclude_none=True) for c in stream]
    # Announced before the log holds them: the response is logged after its last chunk.
    logged = [e for e in events(agent, "assistant/chunk") if e.data["step"] == 1]
    assert max(logged_before[: len(first)]) <= logged[0].seq


@pytest.mark.parametrize(
    "stream",
    [
        text("héllo world"),
        combine(tool_call("a", "noop", {"q": 1}), tool_call("b", "noop", {"q": 2}, text="x")),
        [
            BlockStart(index=0, block_type="reasoning"),
            ReasoningDelta(index=0, text="think"),
            ReasoningDelta(index=0, text="ing"),
            BlockEnd(index=0),
            ToolCallDelta(index=1, id="c", name="noop", arguments_delta='{"q"'),
            ToolCallDelta(index=1, id="c", name="noop", arguments_delta=": 3}"),
            BlockEnd(index=1),
            TextDelta(index=2, text="done"),
            *text("")[-2:],
        ],
    ],
    ids=["text", "two-calls", "implicit-blocks"],
)
async def test_the_logged_chunks_assemble_into_the_logged_message(
    app: App, stream: list[Any]
) -> None:
    agent, _ = new_agent(app, stream, text("end"), text("end"))
    await run(agent)
    first = events(agent, "assistant/message")[0]
    sources = [agent.session.events[s] for s in first.source_event_seqs]
    assert {e.type for e in sources} == {"assistant/chunk"}
    chunks = [
        CHUNK_ADAPTER.validate_python(json.loads(json.dumps(e.data["chunk"]))) for e in sources
    ]
    message, _, _ = assemble(chunks)
    assert message == AssistantMessage.model_validate(first.data["message"])
    assert message == assemble(stream)[0]


async def test_a_long_stream_is_logged_every_max_held_chunks(app: App) -> None:
    answer = "x" * (2 * MAX_HELD + 10)
    agent, _ = new_agent(app, text(answer))
    await run(agent)
    deltas = [c["text"] for c in logged_chunks(agent) if c["type"] == "text-delta"]
    # Held chunks are logged every MAX_HELD (the first batch also held the block start),
    # then the rest when the response closes.
    assert [len(d) for d in deltas] == [MAX_HELD - 1, MAX_HELD, 11]
    assert assemble(_logged(agent))[0].content[0].text == answer  # type: ignore[union-attr]


async def test_a_view_built_from_the_log_equals_the_live_view(app: App) -> None:
    stream = combine(tool_call("a", "noop", {"q": 1}, text="first"), tool_call("b", "noop", {}))
    agent, _ = new_agent(app, stream, text("all done"))
    live = SessionFeed(agent.session, agent.ctx)
    await run(agent)
    rebuilt = Transcript()
    rebuilt.feed_all(agent.session.events)
    assert _items(rebuilt) == _items(live.transcript)
    assert rebuilt.text() == live.transcript.text()
    assert "tool noop" in rebuilt.text() and "all done" in rebuilt.text()
    live.close()


async def test_a_slow_stream_is_logged_while_it_hangs_and_a_late_view_shows_it(
    app: App,
) -> None:
    partial = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="so far "),
        TextDelta(index=0, text="so good"),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=1, id="c", name="noop", arguments_delta="{"),
    ]
    agent, _ = new_agent(app, hang_after(partial))
    agent.followup("hi")
    # Held chunks become durable within FLUSH_AFTER though the stream never ends.
    await wait_for(agent, chunk_text("so far so good"))
    # The open tool-call block stays held: it is logged once, when it ends.
    assert [c["type"] for c in logged_chunks(agent)] == ["block-start", "text-delta"]
    late = SessionFeed(agent.session, agent.ctx)  # opened mid-stream
    assert "so far so good" in late.transcript.text()
    assert late.transcript.items[-1].kind == "tool"  # the held call, as streamed so far
    agent.cancel("user")
    with anyio.fail_after(WAIT):
        await agent.when_idle()
    rebuilt = Transcript()
    rebuilt.feed_all(agent.session.events)
    # The cut call was logged as streamed when the response closed: shown dropped in both.
    assert _items(rebuilt) == _items(late.transcript)
    assert "[dropped]" in rebuilt.text() and "so far so good [interrupted]" in rebuilt.text()
    late.close()


async def test_a_crash_mid_stream_keeps_the_logged_text_and_repair_closes_the_turn(
    tmp_path: Path,
) -> None:
    root = tmp_path / "live"
    app = make_app(persistence=JsonlPersistence(root))
    partial = [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="half a thought")]
    agent, _ = new_agent(app, hang_after(partial))
    agent.followup("hi")
    await wait_for(agent, chunk_text("half a thought"))
    await agent.session.flush()  # durable: what a kill -9 now leaves on disk
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    name = f"{agent.session.id}.jsonl"
    shutil.copy(root / name, crashed / name)
    agent.cancel("user")
    await app.aclose()
    state = derived_state(crashed, agent.session.id)
    assert [t for t, _ in state["repaired"]] == ["step/end", "turn/end"]
    assert state["messages"][-1]["role"] == "user"  # the cut answer never reached the model
    assert "assistant: half a thought" in state["text"]
    assert state["text"].endswith("── turn 1 ended: interrupted ──")


async def test_the_flush_barrier_logs_what_streamed_so_far(app: App) -> None:
    partial = [BlockStart(index=0, block_type="text"), TextDelta(index=0, text="abc")]
    agent, _ = new_agent(app, hang_after(partial))
    announced = anyio.Event()
    app.ctx.on("session/chunk", lambda p: announced.set() if p.chunk.get("text") == "abc" else None)
    agent.followup("hi")
    with anyio.fail_after(WAIT):
        await announced.wait()
    await agent.session.flush()
    assert any(chunk_text("abc")(e) for e in agent.session.events)
    agent.cancel("user")
    with anyio.fail_after(WAIT):
        await agent.when_idle()


class _Log:
    """The slice of a session a ``ChunkLog`` writes to: the appended data, in order."""

    state = "published"

    def __init__(self) -> None:
        self.appended: list[Any] = []

    def append(self, type: str, data: Any = None) -> Any:
        self.appended.append((type, data))

        class _Event:
            seq = len(self.appended) - 1

        return _Event()

    def announce_chunk(self, log: Any, chunk: Any) -> None:
        raise AssertionError("nobody listens to session/chunk here")

    def close_chunks(self, log: Any) -> None:
        pass


@pytest.mark.parametrize("ending", ["never", "unresolved", "resolved"])
def test_tool_parts_held_unfrozen_are_logged_and_shown_as_added_ones(ending: str) -> None:
    # ``add_tool_part`` defers freezing a tool-call block's parts; whatever it then logs or
    # shows (held(), close(), an end with nothing to resolve) equals what ``add`` of the
    # frozen parts gives.
    from agentloop_nb.session import freeze_json
    from agentloop_nb.session._chunklog import ChunkLog

    def freeze(chunk: Any) -> Any:
        return freeze_json(chunk.model_dump(mode="json", exclude_none=True), label="chunk")

    parts = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="hi"),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=1, id="c", name="noop", arguments_delta="{"),
        ToolCallDelta(index=1, id="c", name=None, arguments_delta="}"),
    ]
    if ending != "never":
        parts.append(BlockEnd(index=1))
    block = {"type": "tool-call", "id": "c", "name": "noop", "arguments": "{}"}
    resolved = freeze_json(block, label="block") if ending == "resolved" else None
    seen = []
    for deferred in (False, True):
        owner = _Log()
        log = ChunkLog(owner, 1, 1, lambda index: resolved)
        for chunk in parts:
            is_tool_part = chunk.type == "tool-call-delta" or (
                chunk.type == "block-start" and chunk.block_type == "tool-call"
            )
            if deferred and is_tool_part:
                log.add_tool_part(chunk.type, chunk.index, chunk, freeze)
            elif deferred and chunk.type == "block-end":
                assert log.end_tool_block(chunk.index, chunk, freeze)
            else:
                log.add(freeze(chunk))
        held = log.held()
        log.close()
        seen.append((held, owner.appended))
    assert seen[0] == seen[1]
    assert [type(c).__name__ for c in seen[1][0]] == ["FrozenDict"] * len(seen[1][0])
    logged = [data["chunk"]["type"] for _, data in seen[1][1]]
    expected = {
        "never": ["block-start", "text-delta", "block-start", "tool-call-delta", "tool-call-delta"],
        "unresolved": [
            "block-start",
            "text-delta",
            "block-start",
            "tool-call-delta",
            "tool-call-delta",
            "block-end",
        ],
        "resolved": ["block-start", "text-delta", "block-end"],
    }[ending]
    assert logged == expected


def test_an_end_is_left_to_add_unless_it_ends_a_held_tool_block_nobody_watches() -> None:
    # ``end_tool_block`` only takes the end of a tool-call block held unfrozen and unwatched;
    # anything else is answered ``False`` untouched (the caller then ``add``s it frozen).
    from agentloop_nb.session import freeze_json
    from agentloop_nb.session._chunklog import ChunkLog

    def freeze(chunk: Any) -> Any:
        raise AssertionError("an end left to add is not frozen here")

    owner = _Log()
    log = ChunkLog(owner, 1, 1, lambda index: None)
    log.add(freeze_json({"type": "block-start", "index": 0, "block_type": "text"}, label="c"))
    assert not log.end_tool_block(0, BlockEnd(index=0), freeze)  # a text block's end
    assert not log.end_tool_block(3, BlockEnd(index=3), freeze)  # a block never started
    assert log.held() == [{"type": "block-start", "index": 0, "block_type": "text"}]

    class _Watched(_Log):
        def announce_chunk(self, log: Any, chunk: Any) -> None:
            pass

    watched = ChunkLog(_Watched(), 1, 1, lambda index: None, listened={"session/chunk"})
    start = BlockStart(index=1, block_type="tool-call")
    watched.add_tool_part(start.type, 1, start, lambda c: freeze_json(c.model_dump(), label="c"))
    assert not watched.end_tool_block(1, BlockEnd(index=1), freeze)  # watched: add announces


def test_a_held_response_is_bounded_by_the_timer_of_the_loop_it_streams_in() -> None:
    # The chunk log keeps the last flusher it found (one lookup fewer per response); a response
    # held in another event loop must still be timed by that loop's own flusher.
    import asyncio

    from agentloop_nb.session import freeze_json
    from agentloop_nb.session._chunklog import ChunkLog

    seen: list[Any] = []

    async def hold() -> None:
        log = ChunkLog(_Log(), 1, 1, lambda index: None)
        log.add(freeze_json({"type": "text-delta", "index": 0, "text": "x"}, label="chunk"))
        flusher = log._flusher
        assert flusher is not None and flusher.loop is asyncio.get_running_loop()
        assert log in flusher.waiting and flusher.timer is not None
        seen.append(flusher)
        log.close()

    asyncio.run(hold())
    asyncio.run(hold())
    assert seen[0] is not seen[1]
