"""The compaction plugin through the public API with a scripted model: pressure at
`agent/pre-step` triggers one summary call and a durable replace; nothing happens below the
trigger; a tool call is never separated from its result; an overflow is repaired once per step;
`ctx.compaction.compact(agent)` forces it; the summary survives a resume. The invariant companion
is loaded throughout (a compaction between steps restarts its prefix check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _loop_helpers import (
    OPTIONS,
    WAIT,
    dangling_calls,
    data,
    events,
    make_app,
    new_agent,
    reasons,
    register,
    run,
    scripted,
)

from agentloop_nb import App, Message, ToolResultMessage, UserMessage, tool
from agentloop_nb.llm import BlockEnd, BlockStart, Finish, Stop, TextDelta, Usage, UsageChunk
from agentloop_nb.models import ModelTable
from agentloop_nb.plugins.compaction import SUMMARY_PREFIX, CompactionPlugin
from agentloop_nb.testing import ScriptedModel, error, text, tool_call

pytestmark = pytest.mark.anyio

CWE = "CONTEXT_WINDOW_EXCEEDED"


def answer(s: str, input_tokens: int) -> list[Any]:
    """A text answer reporting ``input_tokens`` as the request's size."""
    return [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text=s),
        BlockEnd(index=0),
        UsageChunk(usage=Usage(input_tokens=input_tokens, output_tokens=len(s))),
        Finish(reason=Stop()),
    ]


def texts(messages: Any) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m, ToolResultMessage):
            out.append(f"result:{m.content}")
        else:
            out.append("".join(getattr(b, "text", "") for b in m.content))
    return out


def is_summary(m: Message) -> bool:
    return isinstance(m, UserMessage) and m.text.startswith(SUMMARY_PREFIX)


@tool
def echo(word: str) -> str:
    """Echo a word."""
    return word


async def test_pressure_summarises_turns_before_the_kept_ones_with_one_call() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"context_window": 1000, "keep_recent_turns": 1})
    try:
        agent, model = new_agent(
            app, answer("A1", 100), answer("A2", 900), text("the gist"), answer("A3", 50)
        )
        await run(agent, "one")
        await run(agent, "two")
        assert not events(agent, "compaction/summary")
        await run(agent, "three")
        [event] = events(agent, "compaction/summary")
        assert event.surface_op == {"op": "replace", "start": 0, "end": 1}
        assert event.data["summary"] == "the gist"
        assert event.data["model"] == "m" and event.data["reason"] == "pressure"
        assert event.data["tokens_before"] >= 800
        assert event.data["tokens_after_estimate"] < event.data["tokens_before"]
        summary_call = model.requests[2]
        assert summary_call.tools == () and summary_call.session_id is None
        [prompt] = texts(summary_call.messages)
        assert "one" in prompt and "A1" in prompt and "two" not in prompt
        after = model.requests[3].messages
        assert is_summary(after[0]) and after[0].text.endswith("the gist")
        assert texts(after[1:]) == ["two", "A2", "three"]
        assert reasons(agent) == ["completed"] * 3
        assert is_summary(agent.session.derive_messages()[0])
    finally:
        await app.aclose()


async def test_below_the_trigger_nothing_is_summarised() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"context_window": 1000})
    try:
        agent, model = new_agent(app, answer("A1", 100), answer("A2", 700), answer("A3", 100))
        for prompt in ("one", "two", "three"):
            await run(agent, prompt)
        assert not events(agent, "compaction/summary")
        assert len(model.requests) == 3
    finally:
        await app.aclose()


async def test_the_window_comes_from_the_models_table_when_not_configured() -> None:
    app = make_app(models={"m": {"context_window": 1000}})
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 0, "trigger_ratio": 0.5})
    try:
        agent, _ = new_agent(app, answer("A1", 600), text("gist"), answer("A2", 10))
        await run(agent, "one")
        await run(agent, "two")
        [event] = events(agent, "compaction/summary")
        assert (event.data["start"], event.data["end"]) == (0, 1)
    finally:
        await app.aclose()


async def test_a_models_table_provided_on_the_agents_own_context_sets_its_window() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 0, "trigger_ratio": 0.5})
    try:
        agent, _ = new_agent(app, answer("A1", 600), text("gist"), answer("A2", 10))
        agent.ctx.provide("models", ModelTable({"m": {"context_window": 1000}}))
        assert app.ctx.compaction.window(agent) == 1000
        await run(agent, "one")
        await run(agent, "two")
        [event] = events(agent, "compaction/summary")
        assert (event.data["start"], event.data["end"]) == (0, 1)
    finally:
        await app.aclose()


async def test_a_models_table_provided_after_steps_without_a_window_is_used_at_the_next() -> None:
    # The listener remembers per agent that its steps pass with no window; a table provided
    # later (the services' generation moves) must still be read before the next step.
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 0, "trigger_ratio": 0.5})
    try:
        agent, _ = new_agent(
            app, answer("A1", 600), answer("A2", 600), text("gist"), answer("A3", 10)
        )
        await run(agent, "one")
        await run(agent, "two")
        assert not events(agent, "compaction/summary")
        agent.ctx.provide("models", ModelTable({"m": {"context_window": 1000}}))
        await run(agent, "three")
        [event] = events(agent, "compaction/summary")
        assert (event.data["start"], event.data["end"]) == (0, 3)
    finally:
        await app.aclose()


class _Windowed:
    """An adapter that streams through ``model`` and reports a context window of 1000."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.asked: list[str] = []

    def stream(self, options: Any) -> Any:
        return self.model.stream(options)

    async def context_window(self, model: str) -> int:
        self.asked.append(model)
        return 1000


async def test_an_adapter_that_reports_a_window_registered_after_steps_is_asked_next_step() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 0, "trigger_ratio": 0.5})
    try:
        model = ScriptedModel(
            [answer("A1", 600), answer("A2", 600), text("gist"), answer("A3", 10)]
        )
        first = app.ctx.llm.register_adapter(["scripted"], model)
        agent = app.ctx.agent_loop.create("a", OPTIONS)
        await run(agent, "one")
        await run(agent, "two")
        assert not events(agent, "compaction/summary")
        first()
        windowed = _Windowed(model)
        app.ctx.llm.register_adapter(["scripted"], windowed)
        await run(agent, "three")
        assert windowed.asked == ["m"]
        [event] = events(agent, "compaction/summary")
        assert (event.data["start"], event.data["end"]) == (0, 3)
    finally:
        await app.aclose()


async def test_a_route_changed_by_a_request_listener_is_seen_by_the_next_steps_check() -> None:
    # The route is the last request header's: once a listener sends the step to a model the
    # table knows, the next step's check uses that model's window.
    app = make_app(models={"big": {"context_window": 1000}})
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 0, "trigger_ratio": 0.5})
    try:
        agent, model = new_agent(
            app, answer("A1", 600), answer("A2", 600), text("gist"), answer("A3", 10)
        )
        await run(agent, "one")
        assert not events(agent, "compaction/summary")

        async def reroute(payload: Any, next: Any) -> Any:
            config = await next()
            return config.model_copy(update={"model": "big"})

        app.ctx.on("agent/request", reroute)
        await run(agent, "two")  # checked against "m" (no window), sent to "big"
        assert not events(agent, "compaction/summary")
        await run(agent, "three")
        [event] = events(agent, "compaction/summary")
        assert (event.data["start"], event.data["end"]) == (0, 3)
        assert model.requests[-1].model == "big"
    finally:
        await app.aclose()


async def test_a_compaction_between_steps_keeps_the_running_turn_and_the_invariants() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"context_window": 1000, "keep_recent_turns": 0})
    try:
        register(app, echo)
        big_call = tool_call("c1", "echo", {"word": "hey"})
        big_call[-2] = UsageChunk(usage=Usage(input_tokens=950, output_tokens=3))
        agent, model = new_agent(app, answer("A1", 10), big_call, text("gist"), answer("done", 20))
        await run(agent, "one")
        await run(agent, "two")
        assert reasons(agent) == ["completed", "completed"]  # no INVARIANT error
        [event] = data(agent, "compaction/summary")
        assert (event["start"], event["end"], event["turn"], event["step"]) == (0, 1, 2, 2)
        last = model.requests[-1].messages
        assert is_summary(last[0])
        assert texts(last[1:]) == ["two", "", "result:hey"]
        assert dangling_calls(last) == []
    finally:
        await app.aclose()


async def test_overflow_is_repaired_without_splitting_a_call_from_its_result() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin)
    try:
        register(app, echo)
        agent, model = new_agent(
            app,
            tool_call("c1", "echo", {"word": "a"}),
            tool_call("c2", "echo", {"word": "b"}),
            error(CWE, "request (6056 tokens) exceeds the available context size (4096 tokens)"),
            text("gist"),
            text("done"),
        )
        await run(agent, "go")
        assert reasons(agent) == ["completed"]
        [event] = data(agent, "compaction/summary")
        assert event["reason"] == "overflow" and (event["start"], event["end"]) == (0, 2)
        retried = model.requests[4].messages
        assert is_summary(retried[0])
        assert dangling_calls(retried) == []
        assert [type(m).__name__ for m in retried] == [
            "UserMessage",
            "AssistantMessage",
            "ToolResultMessage",
        ]
    finally:
        await app.aclose()


async def test_overflow_repair_runs_once_per_step_then_the_failure_stands() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin)
    try:
        agent, model = new_agent(
            app, text("A1"), error(CWE, "too long"), text("gist"), error(CWE, "still too long")
        )
        await run(agent, "one")
        await run(agent, "two")
        assert reasons(agent) == ["completed", "error"]
        assert data(agent, "turn/end")[-1]["reason"]["code"] == CWE
        assert len(events(agent, "compaction/summary")) == 1
        assert len(model.requests) == 4
    finally:
        await app.aclose()


async def test_forced_compaction_summarises_completed_turns_while_idle() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 1})
    try:
        agent, model = new_agent(app, text("A1"), text("A2"), text("gist"), text("A3"))
        assert await app.ctx.compaction.compact(agent) is None  # nothing to summarise yet
        await run(agent, "one")
        await run(agent, "two")
        with anyio.fail_after(WAIT):
            event = await app.ctx.compaction.compact(agent)
        assert event is not None and event.data["reason"] == "forced"
        assert (event.data["start"], event.data["end"]) == (0, 1)
        await run(agent, "three")
        assert texts(model.requests[3].messages)[1:] == ["two", "A2", "three"]
    finally:
        await app.aclose()


async def test_a_failed_summary_under_pressure_lets_the_step_run_uncompacted() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"context_window": 1000, "keep_recent_turns": 0})
    try:
        agent, _ = new_agent(app, answer("A1", 950), error("SERVER", "boom"), text("A2"))
        await run(agent, "one")
        await run(agent, "two")
        assert reasons(agent) == ["completed", "completed"]
        assert not events(agent, "compaction/summary")
    finally:
        await app.aclose()


async def test_the_summary_survives_a_resume(tmp_path: Path) -> None:
    app = App(persistence_root=tmp_path, invariants=True)
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 0})
    try:
        scripted(app, text("A1"), text("gist"))
        handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
        await run(handle.agent, "one")
        with anyio.fail_after(WAIT):
            await app.ctx.compaction.compact(handle.agent)
        before = handle.agent.session.derive_messages()
        await handle.dispose()
    finally:
        await app.aclose()
    app2 = App(persistence_root=tmp_path, invariants=True)
    try:
        model = ScriptedModel([text("A2")])
        app2.ctx.llm.register_adapter(["scripted"], model)
        with anyio.fail_after(WAIT):
            handle = await app2.ctx.agents.resume(resume_session_id="s1")
        assert handle.agent.session.derive_messages() == before
        await run(handle.agent, "two")
        assert is_summary(model.requests[0].messages[0])
        assert reasons(handle.agent) == ["completed", "completed"]
    finally:
        await app2.aclose()


# -- %agent compact NAME ------------------------------------------------------------------------


async def test_agent_compact_magic_forces_a_compaction(
    shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentloop_nb.jupyter._state import state

    ctx = shell.user_ns["ctx"]
    ctx.llm.register_adapter(["scripted"], ScriptedModel([text("A1"), text("gist")]))
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    agent = shell.user_ns["a"]
    await run(agent, "one")
    shell.run_line_magic("agent", "compact a")  # the App applies the plugin by default
    with anyio.fail_after(WAIT):
        await state().drain()
    [event] = events(agent, "compaction/summary")
    assert event.data["reason"] == "forced"
    assert "a: summarised messages 0..1" in capsys.readouterr().out
    shell.run_line_magic("agent", "compact a")  # only the summary is left
    with anyio.fail_after(WAIT):
        await state().drain()
    assert "a: nothing to compact" in capsys.readouterr().out


async def test_agent_compact_magic_says_how_to_turn_compaction_on_when_it_is_off(
    shell: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import agentloop_nb.jupyter as J

    J.configure(persistence_root=tmp_path / "off", compaction=False)
    shell.run_line_magic("reload_ext", "agentloop_nb.jupyter")
    shell.run_line_magic("agent", "create a --provider offline --model demo")
    shell.run_line_magic("agent", "compact a")
    assert "compaction is not enabled" in capsys.readouterr().err


async def test_applying_the_plugin_again_replaces_the_earlier_one() -> None:
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"context_window": 100_000})
    app.ctx.plugin(CompactionPlugin, {"context_window": 1000, "keep_recent_turns": 0})
    try:
        agent, model = new_agent(app, answer("A1", 900), text("gist"), answer("A2", 10))
        await run(agent, "one")
        await run(agent, "two")
        assert app.ctx.compaction.config.context_window == 1000
        assert len(events(agent, "compaction/summary")) == 1  # one listener acted, not two
        assert len(model.requests) == 3
    finally:
        await app.aclose()


async def test_the_summary_call_counts_in_the_agent_usage() -> None:
    app = make_app(models={"m": {"input": 1.0, "output": 1.0}})
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 0})
    try:
        agent, _ = new_agent(app, answer("A1", 100), text("gist"))
        await run(agent, "one")
        before = agent.usage
        with anyio.fail_after(WAIT):
            event = await app.ctx.compaction.compact(agent)
        assert event is not None and event.data["usage"] == {
            "input_tokens": 10,
            "output_tokens": 4,
        }
        assert agent.usage.input_tokens == before.input_tokens + 10
        assert agent.usage.output_tokens == before.output_tokens + 4
    finally:
        await app.aclose()


async def test_a_new_header_naming_the_same_route_keeps_a_passing_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The verdict "no window" is read from the route; a request header that changes something
    # else (the first one, or one with a new tool) leaves it standing, no lookup again.
    app = make_app()
    try:
        agent, _ = new_agent(app, text("A1"), text("A2"), text("A3"))
        plugin = app.ctx.compaction
        looked: list[Any] = []
        lookup = plugin._lookup
        monkeypatch.setattr(plugin, "_lookup", lambda a: looked.append(a) or lookup(a))
        await run(agent, "one")  # no header yet: looked up once
        await run(agent, "two")  # the first header, naming the options' route
        app.ctx.tools.register(echo)
        await run(agent, "three")  # a changed header (a new tool), the same route
        assert [e.data["reason"] for e in events(agent, "request/header")] == ["initial", "change"]
        assert looked == [agent]
    finally:
        await app.aclose()


async def test_a_standing_passing_verdict_skips_the_pre_step_listener_until_something_changes() -> (
    None
):
    # While a step passes for the reasons the last one did, the bus steps over compaction's
    # ``agent/pre-step`` listener (its ``passes`` test); once a window is known (here: a
    # ``models`` table naming one) the listener runs again and compacts under pressure.
    app = make_app()
    app.ctx.plugin(CompactionPlugin, {"keep_recent_turns": 0, "trigger_ratio": 0.5})
    try:
        agent, _ = new_agent(
            app, answer("A1", 600), answer("A2", 600), text("gist"), answer("A3", 10)
        )
        called: list[int] = []
        [lst] = app.ctx._bus.listeners["agent/pre-step"]
        listener = lst.fn
        lst.fn = lambda payload, next: called.append(payload.turn) or listener(payload, next)
        await run(agent, "one")  # no verdict yet: the listener runs
        await run(agent, "two")  # the verdict stands: stepped over
        assert called == [1]
        agent.ctx.provide("models", ModelTable({"m": {"context_window": 1000}}))
        await run(agent, "three")
        assert called == [1, 3]
        [event] = events(agent, "compaction/summary")
        assert (event.data["start"], event.data["end"]) == (0, 3)
    finally:
        await app.aclose()
