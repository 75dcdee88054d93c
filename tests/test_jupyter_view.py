"""The view a notebook user lives in, driven in-process: per-cell turns, Markdown answers,
theme colours, the static transcript, the status line, the inbox panel, the follow-up box."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from _loop_helpers import finished_turns
from _view_helpers import scripted_agent, scripted_app

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.jupyter import AgentView, InboxView, PromptBox, SessionView
from agentloop_nb.loop import Reject
from agentloop_nb.session import SessionStore
from agentloop_nb.testing import HANG, ScriptedModel, text, tool_call
from agentloop_nb.tools import tool

HEX_OR_RGB = re.compile(r"#[0-9a-fA-F]{3,8}\b|rgba?\(|hsla?\(|:\s*(?:white|black)\b")


def _colours(html: str) -> list[str]:
    """Colours written out literally (a theme variable is the only allowed source)."""
    return HEX_OR_RGB.findall(html.replace("&#x27;", "'"))


@pytest.mark.anyio
async def test_a_cell_view_shows_its_own_turns_and_collapses_earlier_ones() -> None:
    app, _ = scripted_app([text("one"), text("two")])
    agent = scripted_agent(app)
    first = agent.followup("first prompt")
    cell1 = AgentView(agent, own=[first.id])
    await agent.when_idle()
    second = agent.followup("second prompt")
    cell2 = AgentView(agent, own=[second.id])
    everything = AgentView(agent)
    await agent.when_idle()
    for v in (cell1, cell2, everything):
        v.flush()
    assert "first prompt" in cell1.text and "second prompt" not in cell1.text
    assert "second prompt" in cell2.text and "first prompt" not in cell2.text
    assert "first prompt" not in cell2.session_view.html
    assert "first prompt" in everything.text and "second prompt" in everything.text
    toggle = cell2.session_view.earlier_toggle
    assert "1 earlier turn" in toggle.description and toggle.layout.display is None
    assert cell2.session_view.earlier.value == ""  # collapsed: nothing rendered
    toggle.value = True
    assert "first prompt" in cell2.session_view.earlier.value
    toggle.value = False
    assert cell2.session_view.earlier.value == ""
    assert cell1.session_view.earlier_toggle.layout.display == "none"  # nothing before it
    assert everything.session_view.earlier_toggle.layout.display == "none"
    for v in (cell1, cell2, everything):
        v.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_cell_view_marks_the_turns_started_elsewhere_between_its_own() -> None:
    app, _ = scripted_app([text("one"), text("two"), text("three"), text("four"), text("five")])
    agent = scripted_agent(app)
    mine = agent.followup("from this cell")
    cell = AgentView(agent, own=[mine.id])
    other = AgentView(agent, own=[])  # another cell's view: it sends the next two turns
    everything = AgentView(agent)
    await agent.when_idle()
    for prompt in ("from another cell", "from the panel"):
        other.prompt.submit(prompt)
        await agent.when_idle()
    cell.prompt.submit("back in this cell")
    await agent.when_idle()
    cell.prompt.submit("right after")  # no turn in between: no marker
    await agent.when_idle()
    for v in (cell, other, everything):
        await v.settled()
    sv = cell.session_view
    assert sv.shown_turns() == [1, 4, 5]
    assert sv.elsewhere_turns() == {4: [2, 3]}
    lines = cell.text.splitlines()
    assert lines.index("(2 turns started elsewhere)") == lines.index("[user] back in this cell") - 2
    assert "from another cell" not in cell.text
    marker = sv.elsewhere_marker(4)
    assert marker is not None and sv.elsewhere_marker(5) is None
    assert [w for w in sv.body.children if w is marker] == [marker]
    assert list(sv.body.children).index(marker) == 1  # between turn 1's box and turn 4's
    assert marker.toggle.description == "▸ 2 turns started elsewhere"
    assert marker.body.value == "" and marker.body.layout.display == "none"
    marker.toggle.value = True  # what a click does
    assert "from another cell" in marker.body.value and "from the panel" in marker.body.value
    assert marker.toggle.description.startswith("▾") and marker.body.layout.display is None
    marker.toggle.value = False
    assert marker.body.value == ""
    static = cell.static_html()
    assert "<summary>2 turns started elsewhere</summary>" in static
    assert static.index("from this cell") < static.index("from another cell")
    assert static.index("from the panel") < static.index("back in this cell")
    # the other cell's view shows 2 and 3 side by side; a view of every turn needs no marker
    assert other.session_view.elsewhere_turns() == {}
    assert everything.session_view.elsewhere_turns() == {} and "started elsewhere" not in (
        everything.text
    )
    for v in (cell, other, everything):
        v.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_follow_up_sent_from_a_cell_view_joins_that_view() -> None:
    app, _ = scripted_app([text("one"), text("two")])
    agent = scripted_agent(app)
    first = agent.followup("from the cell")
    view = AgentView(agent, own=[first.id])
    await agent.when_idle()
    view.prompt.submit("from the box")  # what Ctrl/Cmd+Enter does
    assert view.prompt.value == ""
    await agent.when_idle()
    view.flush()
    assert "from the cell" in view.text and "from the box" in view.text
    assert "assistant: two" in view.text
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_finished_answer_is_sanitised_markdown_and_a_streaming_one_plain_text() -> None:
    answer = (
        "**bold** and `code`\n\n- item\n\n<script>alert(1)</script> "
        "<img src=x onerror=alert(2)> [bad](javascript:alert(3)) [ok](https://example.org)"
    )
    store = SessionStore(Context())
    session = store.create("s")
    view = SessionView(session)
    session.append("turn/start", {"turn": 1})
    chunk = {"turn": 1, "step": 1}
    session.append(
        "assistant/chunk",
        {**chunk, "chunk": {"type": "block-start", "index": 0, "block_type": "text"}},
    )
    session.append(
        "assistant/chunk", {**chunk, "chunk": {"type": "text-delta", "index": 0, "text": answer}}
    )
    view.throttle.flush()
    streaming = view.html
    assert "agentloop-streaming" in streaming and "**bold**" in streaming
    assert "<script" not in streaming
    session.append(
        "assistant/message",
        {**chunk, "message": {"role": "assistant", "content": [{"type": "text", "text": answer}]}},
    )
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    view.throttle.flush()
    html = view.html
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html and "<li>" in html
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert 'href="javascript' not in html and 'href="https://example.org"' in html
    view.close()


@tool
def lookup(city: str) -> dict[str, Any]:
    """Weather for a city."""
    return {"city": city, "temperature": 21, "tags": ["sunny", "dry"]}


@pytest.mark.anyio
async def test_usage_shows_once_per_turn_and_tool_results_as_text() -> None:
    app, _ = scripted_app([tool_call("c1", "lookup", {"city": "Oslo"}), text("done")])
    app.ctx.tools.register(lookup)
    agent = scripted_agent(app)
    agent.followup("weather?")
    view = AgentView(agent)
    await agent.when_idle()
    view.flush()
    html = view.session_view.html
    assert html.count("agentloop-usage") == 1  # two steps, one usage line
    assert sum(line.startswith("(tokens in") for line in view.text.splitlines()) == 1
    assert "city: Oslo" in html and "temperature: 21" in html and "- sunny" in html
    assert "&quot;temperature&quot;" not in html  # the result is not a JSON dump
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_every_colour_comes_from_a_theme_variable() -> None:
    app, _ = scripted_app([tool_call("c1", "lookup", {"city": "Oslo"}), text("*done*"), HANG])
    app.ctx.tools.register(lookup)
    agent = scripted_agent(app)
    agent.followup("weather?")
    view = AgentView(agent, name="bob")
    await agent.when_idle()
    agent.followup("hang")
    agent.steer("steered")
    agent.inject("injected")
    await view.settled()
    view.flush()
    parts = [
        view.status.value,
        view.session_view.html,
        view.pool_view.table.value,
        view.static_html(),
    ]
    parts.extend(w.value for w in view.children if hasattr(w, "value") and isinstance(w.value, str))
    for part in parts:
        assert _colours(part) == [], part
    assert "var(--jp-" in view.static_html()
    agent.cancel("user")
    await agent.when_idle()
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_running_turn_shows_a_spinner_and_elapsed_time_top_and_bottom() -> None:
    app, _ = scripted_app([HANG])
    agent = scripted_agent(app)
    view = AgentView(agent)
    streaming = asyncio.Event()
    app.ctx.on(
        "session/event", lambda p: streaming.set() if p.event.type == "assistant/chunk" else None
    )
    began = time.time()
    agent.followup("hang")
    await streaming.wait()
    await view.settled()
    view.flush()
    assert "agentloop-spinner" in view.status.value
    # The clock is the browser's (tests/browser/test_view.py watches it tick): a negative
    # animation delay as old as the turn.
    found = re.search(
        r'running <span class="agentloop-clock" style="animation-delay:-([\d.]+)s"',
        view.status.value,
    )
    assert found, view.status.value
    assert 0 <= float(found[1]) <= time.time() - began + 0.01
    assert view.status_bottom.children == (view.status,)  # the same model, shown twice
    agent.cancel("user")
    await agent.when_idle()
    await view.settled()
    view.flush()
    assert "agentloop-spinner" not in view.status.value
    assert view.status_bottom.children == (view.status,)  # the same model, shown twice
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_an_error_shows_once_with_its_code_once() -> None:
    app = App()
    agent = scripted_agent(app, provider="nope")
    view = AgentView(agent)
    agent.followup("hi")
    await agent.when_idle()
    view.flush()
    everything = view.text + view.status.value + view.session_view.html
    assert "NO_ADAPTER: NO_ADAPTER" not in everything
    assert everything.count("no adapter is registered") == 2  # once in text, once in html
    assert view.text.count("NO_ADAPTER") == 2  # the error line, the turn end by its code
    assert "last turn: error NO_ADAPTER ·" in view.status.value
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_rejected_turn_shows_its_reason() -> None:
    app, _ = scripted_app([text("never")])
    app.ctx.on("agent/pre-step", lambda _p, _next: Reject(reason="over the daily budget"))
    agent = scripted_agent(app)
    view = AgentView(agent)
    agent.followup("hi")
    await agent.when_idle()
    view.flush()
    assert "ended: rejected: over the daily budget" in view.text
    assert "rejected: over the daily budget" in view.session_view.html
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_the_inbox_panel_lists_pending_messages_and_edits_and_removes_them() -> None:
    app, _ = scripted_app([HANG, text("after"), text("again")])
    agent = scripted_agent(app)
    panel = InboxView(agent)
    assert panel.layout.display == "none"  # nothing pending: hidden
    streaming = asyncio.Event()
    app.ctx.on(
        "session/event", lambda p: streaming.set() if p.event.type == "assistant/chunk" else None
    )
    agent.followup("running one")
    await streaming.wait()  # the step has claimed its input: what follows stays pending
    later = agent.followup("queued follow-up")
    context = agent.inject("some context")
    await panel.throttle.settled()
    panel.throttle.flush()
    assert [label for _, label, _ in panel.pending()] == ["follow-up", "inject"]
    assert set(panel.rows) == {later.id, context.id}
    assert panel.layout.display is None
    panel.edit(later.id)
    editor = panel.rows[later.id].children[0]
    assert editor.value == "queued follow-up"
    editor.value = "edited follow-up"
    panel.rows[later.id].children[1].click()  # Save
    assert [m.text for m in agent.inbox.next_turn] == ["edited follow-up"]
    assert agent.inbox.next_turn[0].id == later.id
    panel.rows[context.id].children[2].click()  # Remove
    assert agent.inbox.next_step == ()
    panel.throttle.flush()
    assert set(panel.rows) == {later.id}
    agent.cancel("user", keep_inbox=True)
    await agent.when_idle()
    agent.followup("wake")  # the kept follow-up is claimed first
    while agent.inbox.next_turn or agent.status == "running":
        await agent.when_idle()
    entered = [
        e.data["message"]["content"][0]["text"]
        for e in agent.session.events
        if e.type == "user/message"
    ]
    assert entered == ["running one", "edited follow-up", "wake"]
    panel.throttle.flush()
    assert panel.rows == {} and panel.layout.display == "none"
    panel.save(later.id, "too late")  # claimed meanwhile: shown, not raised
    assert "already taken" in panel.notice.value
    panel.close()
    await app.aclose()


@pytest.mark.anyio
async def test_the_follow_up_box_sends_on_ctrl_enter() -> None:
    app, _ = scripted_app([text("hello")])
    agent = scripted_agent(app)
    view = AgentView(agent)
    assert isinstance(view.prompt, PromptBox)
    view.prompt.value = "typed"
    view.prompt.submit()  # the front end sends {"event": "submit"} on Ctrl/Cmd+Enter
    await agent.when_idle()
    view.flush()
    assert "[user] typed" in view.text and view.prompt.value == ""
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_the_static_transcript_carries_the_conversation_and_hides_while_live() -> None:
    app, _ = scripted_app([text("the *answer*")])
    agent = scripted_agent(app)
    first = agent.followup("question")
    view = AgentView(agent, own=[first.id], name="bob")
    await agent.when_idle()
    view.flush()
    bundle = view.static_bundle()
    html = bundle["text/html"]
    assert "<em>answer</em>" in html and "question" in html and "bob" in html
    assert f'data-agentloop-view="{view.model_id}"' in html
    assert "[user] question" in bundle["text/plain"]
    # the live widget hides exactly its own static copy
    assert f'[data-agentloop-view="{view.model_id}"]{{display:none}}' in view.style_sheet.value
    view.close()
    await app.aclose()


@pytest.mark.anyio
async def test_a_pool_view_of_its_own_turn_keeps_its_calls_when_later_turns_call_tools() -> None:
    app, _ = scripted_app(
        [
            tool_call("c1", "lookup", {"city": "Oslo"}),
            text("one"),
            tool_call("c2", "lookup", {"city": "Rome"}),
            text("two"),
        ]
    )
    app.ctx.tools.register(lookup)
    agent = scripted_agent(app)
    first = agent.followup("first")
    mine = AgentView(agent, own=[first.id])
    await agent.when_idle()
    agent.followup("second")
    await agent.when_idle()
    latest = AgentView(agent)
    for v in (mine, latest):
        await v.settled()
        v.flush()
    assert "c1" in mine.pool_view.text and "c2" not in mine.pool_view.text
    assert "turn 1 step 1" in mine.pool_view.table.value
    assert "c2" in latest.pool_view.text and "turn 2 step 1" in latest.pool_view.table.value
    for v in (mine, latest):
        v.close()
    await app.aclose()


def test_a_long_history_renders_one_widget_per_finished_turn() -> None:
    session = finished_turns(SessionStore(Context()).create("s"), 30)
    view = SessionView(session)
    assert len(view.body.children) == 30
    # One HTML widget per finished turn, then its "fork from here" button.
    assert all(len(box.children) == 2 for box in view.body.children)
    assert all(
        box.children[1] is view.fork_button(n) for n, box in enumerate(view.body.children, 1)
    )
    assert "answer 30" in view.turn_htmls[-1] and "answer 1" in view.turn_htmls[0]
    view.close()


@pytest.mark.anyio
async def test_each_turn_shows_its_usage_with_cost_and_the_status_shows_the_budget() -> None:
    from agentloop_nb.plugins.budgets import BudgetPlugin

    app = App(models={"m": {"input": 1_000_000, "output": 2_000_000}})  # $1 / $2 per token
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel([text("abc"), text("de")]))
    app.ctx.plugin(BudgetPlugin)
    agent = scripted_agent(app)
    app.ctx.budgets.set(agent, max_tokens=1000, max_cost_usd=500.0)
    view = AgentView(agent)
    agent.followup("one")
    await agent.when_idle()
    agent.followup("two")
    await agent.when_idle()
    view.flush()
    costs = [f"{u.cost_usd:.4f}" for u in agent.usage_by_turn]
    assert costs == ["16.0000", "14.0000"]  # 10 in + 3 out, then 10 in + 2 out
    lines = [line for line in view.text.splitlines() if line.startswith("(tokens in")]
    assert lines == ["(tokens in 10, out 3, $16.0000)", "(tokens in 10, out 2, $14.0000)"]
    assert "$16.0000" in view.session_view.html
    status = view.status.value
    assert "budget: cost $30.0000/$500.00, tokens 25/1000" in status
    view.close()
    await app.aclose()


def test_a_compaction_summary_is_a_collapsible_marker_and_its_usage_counts() -> None:
    from types import SimpleNamespace

    from agentloop_nb.jupyter.fold import Transcript, item_html, item_text

    def event(type: str, **data: Any) -> Any:
        return SimpleNamespace(type=type, data=data, time=0.0)

    t = Transcript()
    t.feed_all(
        [
            event("turn/start", turn=1),
            event(
                "compaction/summary",
                start=0,
                end=5,
                summary="they talked about <b>Oslo</b>",
                tokens_before=900,
                tokens_after_estimate=120,
                model="m",
                message={},
                reason="pressure",
                usage={"input_tokens": 7, "output_tokens": 4},
            ),
            event("turn/end", turn=1, reason={"kind": "completed"}),
        ]
    )
    (marker,) = [i for i in t.items if i.kind == "compaction"]
    html = item_html(marker)
    assert html.startswith('<details class="agentloop-box agentloop-compaction')
    assert "messages 0–5 summarised, ~900 → ~120 tokens (pressure)" in html
    assert "&lt;b&gt;Oslo&lt;/b&gt;" in html  # the summary is escaped text
    assert (
        item_text(marker) == "(compacted: messages 0–5 summarised, ~900 → ~120 tokens (pressure))"
    )
    (usage,) = [i for i in t.items if i.kind == "usage"]
    assert usage.data["usage"] == {"input_tokens": 7, "output_tokens": 4}
    assert usage.data["cost_usd"] is None  # "m" has no price in the built-in table


@pytest.mark.anyio
async def test_the_inbox_panel_drops_a_follow_up_the_moment_its_turn_starts() -> None:
    app, _ = scripted_app([HANG, text("second")])
    agent = scripted_agent(app)
    panel = InboxView(agent, interval=60)  # a long interval: only the claim itself may render
    streaming = asyncio.Event()
    app.ctx.on(
        "session/event", lambda p: streaming.set() if p.event.type == "assistant/chunk" else None
    )
    agent.followup("running one")
    await streaming.wait()
    queued = agent.followup("queued follow-up")
    panel.throttle.flush()
    assert set(panel.rows) == {queued.id}
    rows_at_claim: list[set[str]] = []
    # Registered after the panel's own listener: it sees what the panel shows after the claim.
    app.ctx.on("agent/inbox/claimed", lambda p: rows_at_claim.append(set(panel.rows)))
    agent.cancel("user", keep_inbox=True)  # the next turn claims the queued follow-up
    await agent.when_idle()
    agent.followup("wake")
    while agent.inbox.next_turn or agent.status == "running":
        await agent.when_idle()
    assert rows_at_claim and queued.id not in rows_at_claim[0]
    panel.close()
    await app.aclose()
