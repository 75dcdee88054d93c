"""Tool scheduling in a step: barriers, the rolling pool, ordered hooks and commits, argument
problems, additional contexts, ``tools/settled``, reclassification and ``finalize_content``."""

from __future__ import annotations

import enum
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _loop_helpers import (
    Probe,
    data,
    idle,
    new_agent,
    reasons,
    register,
    run,
    types,
    user_texts,
)
from pydantic import ValidationError

from agentloop_nb.app import App
from agentloop_nb.session import FrozenDict
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import (
    Accept,
    Deny,
    ToolResult,
    ToolSettledPayload,
    tool,
)

pytestmark = pytest.mark.anyio


def calls(*specs: tuple[str, str, str]) -> list[Any]:
    """``combine`` of ``tool_call(id, tool, {"key": key})`` for each (id, tool, key)."""
    return combine(*(tool_call(cid, name, {"key": key}) for cid, name, key in specs))


def ids(agent: Any, type: str) -> list[str]:
    return [d["call_id"] for d in data(agent, type)]


def positions(agent: Any) -> dict[str, int]:
    """``"call:<id>"`` / ``"result:<id>"`` → index in the log."""
    out: dict[str, int] = {}
    for i, e in enumerate(agent.session.events):
        if e.type in ("tool/call", "tool/result"):
            out[f"{e.type.split('/')[1]}:{e.data['call_id']}"] = i
    return out


async def test_each_call_logs_its_tool_call_and_result_with_turn_and_step(app: App) -> None:
    probe = Probe(auto=["a", "b"])
    register(app, probe.barrier)
    agent, _ = new_agent(app, calls(("c1", "barrier", "a"), ("c2", "barrier", "b")), text("ok"))
    await run(agent)
    (c1, c2) = data(agent, "tool/call")
    assert dict(c1) == {
        "turn": 1,
        "step": 1,
        "call_id": "c1",
        "name": "barrier",
        "arguments": '{"key": "a"}',
    }
    assert [d["content"] for d in data(agent, "tool/result")] == ["done:a", "done:b"]
    assert types(agent).count("tool/call") == 2 and c2["call_id"] == "c2"


async def test_parallel_safe_calls_run_as_a_rolling_pool_bounded_by_the_setting(
    app: App,
) -> None:
    probe = Probe()
    register(app, probe.probe)
    app.ctx.agent_loop.settings.max_parallel_tool_calls = 2
    script = calls(*((f"c{i}", "probe", f"k{i}") for i in range(1, 5)))
    agent, _ = new_agent(app, script, text("done"))
    agent.followup("go")
    await probe.wait_started("k1", "k2")
    assert not probe.is_started("k3")  # the pool is full until a body settles
    probe.release("k2")  # the second settling starts the third while the first still runs
    await probe.wait_started("k3")
    assert not probe.is_started("k4")
    probe.release("k1")
    await probe.wait_started("k4")
    probe.release("k3")
    probe.release("k4")
    await idle(agent)
    assert probe.peak == 2
    assert ids(agent, "tool/call") == ["c1", "c2", "c3", "c4"]
    assert ids(agent, "tool/result") == ["c1", "c2", "c3", "c4"]  # model order
    pos = positions(agent)
    assert pos["call:c3"] < pos["result:c1"]  # started calls log as they start


async def test_results_commit_in_model_order_even_when_bodies_finish_in_reverse(
    app: App,
) -> None:
    probe = Probe()
    register(app, probe.probe)
    agent, _ = new_agent(
        app, calls(("c1", "probe", "a"), ("c2", "probe", "b"), ("c3", "probe", "c")), text("ok")
    )
    agent.followup("go")
    await probe.wait_started("a", "b", "c")
    for key in ("c", "b", "a"):
        probe.release(key)
    await idle(agent)
    assert probe.log[:3] == ["start:a", "start:b", "start:c"]
    assert ids(agent, "tool/result") == ["c1", "c2", "c3"]
    assert [m.role for m in agent.session.derive_messages()][:5] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
    ]


async def test_an_exclusive_call_is_a_barrier_between_parallel_groups(app: App) -> None:
    probe = Probe()
    register(app, probe.probe, probe.barrier)
    script = calls(
        ("c1", "probe", "p1"), ("c2", "probe", "p2"), ("c3", "barrier", "x"), ("c4", "probe", "p3")
    )
    agent, _ = new_agent(app, script, text("ok"))
    agent.followup("go")
    await probe.wait_started("p1", "p2")
    assert not probe.is_started("x")
    probe.release("p1")
    probe.release("p2")
    await probe.wait_started("x")
    assert not probe.is_started("p3") and probe.active == 1
    probe.release("x")
    await probe.wait_started("p3")
    probe.release("p3")
    await idle(agent)
    assert probe.log == [
        "start:p1",
        "start:p2",
        "end:p1",
        "end:p2",
        "start:x",
        "end:x",
        "start:p3",
        "end:p3",
    ]


async def test_a_cap_of_one_runs_parallel_safe_calls_fully_serially(app: App) -> None:
    probe = Probe(auto=["a", "b", "c"])
    register(app, probe.probe)
    app.ctx.agent_loop.settings.max_parallel_tool_calls = 1
    agent, _ = new_agent(
        app, calls(("c1", "probe", "a"), ("c2", "probe", "b"), ("c3", "probe", "c")), text("ok")
    )
    await run(agent)
    assert probe.peak == 1
    assert probe.log == ["start:a", "end:a", "start:b", "end:b", "start:c", "end:c"]


async def test_the_cap_is_read_live_at_the_start_of_each_group(app: App) -> None:
    probe = Probe()
    register(app, probe.probe, probe.barrier)
    settings = app.ctx.agent_loop.settings
    settings.max_parallel_tool_calls = 2
    script = calls(
        ("c1", "probe", "p1"),
        ("c2", "probe", "p2"),
        ("c3", "probe", "p3"),
        ("c4", "barrier", "x"),
        ("c5", "probe", "q1"),
        ("c6", "probe", "q2"),
        ("c7", "probe", "q3"),
    )
    agent, _ = new_agent(app, script, text("ok"))
    agent.followup("go")
    await probe.wait_started("p1", "p2")
    settings.max_parallel_tool_calls = 3  # applies to the next group, not this one
    probe.release("p1")
    await probe.wait_started("p3")
    assert probe.peak == 2
    probe.release("p2")
    probe.release("p3")
    await probe.wait_started("x")
    probe.release("x")
    await probe.wait_started("q1", "q2", "q3")
    assert probe.active == 3
    for key in ("q1", "q2", "q3"):
        probe.release(key)
    await idle(agent)
    assert reasons(agent) == ["completed"]


@pytest.mark.parametrize("bad", [0, -1, "many", 1.5])
async def test_setting_a_cap_that_is_not_a_positive_int_is_refused_at_the_write(
    app: App, bad: Any
) -> None:
    settings = app.ctx.agent_loop.settings
    with pytest.raises(ValidationError, match="max_parallel_tool_calls"):
        settings.max_parallel_tool_calls = bad
    assert settings.max_parallel_tool_calls == 10


async def test_pre_and_post_execute_run_in_model_order_while_bodies_overlap(app: App) -> None:
    probe = Probe()
    register(app, probe.probe)
    order: list[str] = []

    async def pre(execution: Any, next: Any) -> Any:
        order.append(f"pre:{execution.call_id}")
        return await next()

    async def post(payload: Any, next: Any) -> Any:
        order.append(f"post:{payload.execution.call_id}")
        return await next()

    app.ctx.on("tools/pre-execute", pre)
    app.ctx.on("tools/post-execute", post)
    app.ctx.on("tools/result", lambda p: order.append(f"result:{p.execution.call_id}"))
    agent, _ = new_agent(
        app, calls(("c1", "probe", "a"), ("c2", "probe", "b"), ("c3", "probe", "c")), text("ok")
    )
    agent.followup("go")
    await probe.wait_started("a", "b", "c")  # all three bodies overlap
    probe.release("c")
    probe.release("b")
    probe.release("a")
    await idle(agent)
    assert [o for o in order if o.startswith("pre")] == ["pre:c1", "pre:c2", "pre:c3"]
    assert [o for o in order if not o.startswith("pre")] == [
        "post:c1",
        "result:c1",
        "post:c2",
        "result:c2",
        "post:c3",
        "result:c3",
    ]


async def test_unparsable_or_invalid_arguments_reach_no_tool_body(app: App) -> None:
    ran: list[Any] = []

    @tool(concurrency_safe=True)
    def echo(text: str) -> str:
        """Echo."""
        ran.append(text)
        return text

    @tool
    def ping() -> str:
        """No arguments."""
        ran.append("ping")
        return "pong"

    register(app, echo, ping)
    script = combine(
        tool_call("c1", "echo", "{not json"),
        tool_call("c2", "echo", {"txt": 1}),
        tool_call("c3", "echo", "[1, 2]"),
        tool_call("c4", "ping", ""),
    )
    agent, model = new_agent(app, script, text("ok"))
    await run(agent)
    results = data(agent, "tool/result")
    assert [r["error"]["code"] for r in results[:3]] == ["INVALID_ARGS"] * 3
    assert all(r["is_error"] and "echo" in r["content"] for r in results[:3])
    assert "JSON" in results[0]["content"]
    assert (results[3]["content"], results[3]["is_error"]) == ("pong", False)
    assert ran == ["ping"]  # an empty string counts as {}
    assert reasons(agent) == ["completed"] and len(model.requests) == 2


async def test_unknown_tool_and_denied_calls_become_error_results(app: App) -> None:
    probe = Probe(auto=["x"])
    register(app, probe.barrier)

    async def deny(execution: Any, next: Any) -> Any:
        return Deny(reason="not today") if execution.call_id == "c2" else await next()

    app.ctx.on("tools/pre-execute", deny)
    script = combine(tool_call("c1", "nope", {}), tool_call("c2", "barrier", {"key": "x"}))
    agent, _ = new_agent(app, script, text("ok"))
    await run(agent)
    codes = [r["error"]["code"] for r in data(agent, "tool/result")]
    assert codes == ["UNKNOWN_TOOL", "DENIED"] and probe.log == []
    assert reasons(agent) == ["completed"]


async def test_additional_contexts_enter_the_next_step_in_model_call_order(app: App) -> None:
    probe = Probe()
    register(app, probe.probe)

    async def annotate(payload: Any, next: Any) -> Any:
        return Accept(additional_contexts=(f"note:{payload.execution.call_id}",))

    app.ctx.on("tools/post-execute", annotate)
    agent, model = new_agent(app, calls(("c1", "probe", "a"), ("c2", "probe", "b")), text("ok"))
    agent.followup("go")
    await probe.wait_started("a", "b")
    probe.release("b")
    probe.release("a")
    await idle(agent)
    assert user_texts(agent) == ["go", "note:c1", "note:c2"]
    sources = [d["message"]["source"] for d in data(agent, "user/message")][1:]
    assert [s["call_id"] for s in sources] == ["c1", "c2"]
    assert agent.inbox.next_step == ()
    assert [m.role for m in model.requests[1].messages][-2:] == ["user", "user"]


async def test_a_raising_tools_listener_stops_dispatch_and_ends_the_turn_error(
    app: App,
) -> None:
    probe = Probe(auto=["a", "b"])
    register(app, probe.barrier)

    async def explode(execution: Any, next: Any) -> Any:
        if execution.call_id == "c1":
            raise RuntimeError("policy bug")
        return await next()

    app.ctx.on("tools/pre-execute", explode)
    agent, model = new_agent(
        app, calls(("c1", "barrier", "a"), ("c2", "barrier", "b")), text("never")
    )
    await run(agent)
    reason = data(agent, "turn/end")[0]["reason"]
    assert reason["kind"] == "error" and "policy bug" in reason["message"]
    assert probe.log == []  # no body ran after the failure
    assert sorted(ids(agent, "tool/call")) == sorted(ids(agent, "tool/result")) == ["c1", "c2"]
    assert len(model.requests) == 1
    assert types(agent)[-2:] == ["step/end", "turn/end"]


async def test_tools_registered_on_an_agent_scope_are_visible_to_that_agent_only(
    app: App,
) -> None:
    probe = Probe(auto=["k"])
    agent, model = new_agent(app, tool_call("c1", "barrier", {"key": "k"}), text("ok"))
    other = app.ctx.agent_loop.create("b", agent.options)
    agent.ctx.tools.register(probe.barrier)
    assert [s["name"] for s in app.ctx.tools.schemas(agent)] == ["barrier"]
    assert app.ctx.tools.schemas(other) == []
    await run(agent)
    assert [t["name"] for t in model.requests[0].tools] == ["barrier"]
    assert probe.log == ["start:k", "end:k"]


async def test_a_failing_dispatch_in_a_pool_drains_started_calls_and_starts_no_more(
    app: App,
) -> None:
    probe = Probe()
    register(app, probe.probe)
    app.ctx.agent_loop.settings.max_parallel_tool_calls = 2

    failed = anyio.Event()

    async def broken(execution: Any, next: Any) -> Any:
        if execution.call_id == "c2":
            failed.set()
            raise RuntimeError("executor bug")
        return await next()

    app.ctx.on("tools/execute", broken)
    script = calls(*((f"c{i}", "probe", f"k{i}") for i in range(1, 5)))
    agent, model = new_agent(app, script, text("never"))
    agent.followup("go")
    await probe.wait_started("k1")
    with anyio.fail_after(5):
        await failed.wait()
    probe.release("k1")  # only now can a pool slot free up: the failure must stop the launcher
    await idle(agent)
    assert probe.log == ["start:k1", "end:k1"]  # k1 drained; k3, k4 never started
    reason = data(agent, "turn/end")[0]["reason"]
    assert reason["kind"] == "error" and "executor bug" in reason["message"]
    assert ids(agent, "tool/result") == ["c1", "c2", "c3", "c4"]
    assert data(agent, "tool/result")[0]["content"] == "done:k1"
    assert len(model.requests) == 1


# -- tools/settled, reclassification, finalize_content --------------------------------------


async def test_a_call_settling_first_announces_itself_while_an_earlier_call_still_runs(
    app: App,
) -> None:
    probe = Probe(auto=["fast"])
    register(app, probe.probe)
    agent, _ = new_agent(app, calls(("c1", "probe", "slow"), ("c2", "probe", "fast")), text("ok"))
    seen: list[tuple[str, str, bool, int]] = []

    def on_settled(payload: ToolSettledPayload) -> None:
        results = len(data(agent, "tool/result"))
        seen.append((payload.execution.call_id, payload.result.content, probe.active > 0, results))
        probe.release("slow")  # only now: a settled that waited for c1 would hang the turn

    app.ctx.on("tools/settled", on_settled)
    await run(agent, "go")
    assert seen[0] == ("c2", "done:fast", True, 0)  # c1's body runs, nothing committed yet
    assert [s[0] for s in seen] == ["c2", "c1"]
    assert ids(agent, "tool/result") == ["c1", "c2"]  # the commit stays in model order


async def test_refused_calls_are_announced_settled_with_their_error(app: App) -> None:
    agent, _ = new_agent(app, combine(tool_call("c1", "missing", {})), text("ok"))
    seen: list[str | None] = []
    app.ctx.on("tools/settled", lambda p: seen.append(p.result.error and p.result.error.code))
    await run(agent)
    assert seen == ["UNKNOWN_TOOL"]


async def test_a_pooled_call_reclassified_exclusive_waits_for_running_calls_and_runs_alone(
    app: App,
) -> None:
    asked_again = anyio.Event()
    asks: dict[str, int] = {}
    order: list[str] = []

    def safe_until_asked_twice(args: dict[str, Any]) -> bool:
        asks[args["key"]] = asks.get(args["key"], 0) + 1
        if args["key"] == "c" and asks["c"] > 1:  # right before "c" starts: not safe any more
            asked_again.set()
            return False
        return True

    @tool(concurrency_safe=safe_until_asked_twice)
    async def step(key: str) -> str:
        """Record the body's span; "a" lasts until "c" was asked again."""
        order.append(f"start:{key}")
        if key == "a":
            await asked_again.wait()
        for _ in range(5):  # give a wrongly overlapping call every chance to start
            await anyio.lowlevel.checkpoint()
        order.append(f"end:{key}")
        return key

    register(app, step)
    app.ctx.agent_loop.settings.max_parallel_tool_calls = 2
    script = calls(
        ("c1", "step", "a"), ("c2", "step", "b"), ("c3", "step", "c"), ("c4", "step", "d")
    )
    agent, _ = new_agent(app, script, text("ok"))
    await run(agent, "go")
    assert order.index("end:a") < order.index("start:c")  # waited for the running call
    c_span = order[order.index("start:c") : order.index("end:c") + 1]
    assert c_span == ["start:c", "end:c"]  # and ran alone
    assert order.index("end:c") < order.index("start:d")
    assert ids(agent, "tool/result") == ["c1", "c2", "c3", "c4"]
    assert asks["c"] == 2 and asks["d"] == 2  # classified at grouping and right before start


async def test_finalize_content_runs_after_post_execute_in_model_order(app: App) -> None:
    probe_order: list[str] = []
    finalized: list[tuple[str, str]] = []

    def finalize(result: ToolResult) -> str:
        finalized.append((result.call_id, result.content))
        return result.content.upper()

    @tool(concurrency_safe=True, finalize_content=finalize)
    async def word(key: str) -> str:
        """Return the key once the other call has finished (the second one finishes first)."""
        if key == "first":
            await wait_for_settled.wait()
        probe_order.append(key)
        return key

    wait_for_settled = anyio.Event()
    register(app, word)
    app.ctx.on("tools/settled", lambda p: wait_for_settled.set())
    app.ctx.on("tools/post-execute", lambda p, next: Accept(content=f"<{p.result.content}>"))
    results: list[str] = []
    app.ctx.on("tools/result", lambda p: results.append(p.result.content))
    agent, _ = new_agent(app, calls(("c1", "word", "first"), ("c2", "word", "second")), text("ok"))
    await run(agent, "go")
    assert probe_order == ["second", "first"]
    assert finalized == [("c1", "<first>"), ("c2", "<second>")]  # model order, post-execute seen
    assert results == ["<FIRST>", "<SECOND>"]
    assert [d["content"] for d in data(agent, "tool/result")] == ["<FIRST>", "<SECOND>"]


async def test_pooled_calls_are_finalized_and_observed_without_a_post_execute_listener(
    app: App,
) -> None:
    # The pool settles a call without a coroutine when nothing is to be awaited; a finalizer
    # still runs (in model order) and tools/result still hears every final result.
    @tool(concurrency_safe=True, finalize_content=lambda result: result.content.upper())
    async def word(key: str) -> str:
        """Return the key after a checkpoint."""
        await anyio.lowlevel.checkpoint()
        return key

    @tool(concurrency_safe=True)
    async def plain(key: str) -> str:
        """Return the key."""
        return key

    register(app, word, plain)
    heard: list[str] = []
    app.ctx.on("tools/result", lambda p: heard.append(p.result.content))
    script = calls(("c1", "word", "a"), ("c2", "plain", "b"), ("c3", "word", "c"))
    agent, _ = new_agent(app, script, text("ok"))
    await run(agent, "go")
    assert [d["content"] for d in data(agent, "tool/result")] == ["A", "b", "C"]
    assert heard == ["A", "b", "C"]


async def test_a_failing_finalize_content_is_a_tool_error_result(app: App) -> None:
    def finalize(result: ToolResult) -> str:
        raise ValueError("cannot shorten")

    @tool(finalize_content=finalize)
    def long_text() -> str:
        """Return a long text."""
        return "x" * 100

    register(app, long_text)
    agent, _ = new_agent(app, combine(tool_call("c1", "long_text", {})), text("ok"))
    await run(agent)
    (result,) = data(agent, "tool/result")
    assert result["is_error"] and result["error"]["code"] == "TOOL_ERROR"
    assert "ValueError: cannot shorten" in result["content"]
    assert reasons(agent) == ["completed"]


async def test_hook_listeners_a_tool_body_registers_apply_from_the_next_dispatch_on(
    app: App,
) -> None:
    # Unobserved hooks take a straight path; whether one is observed is decided at each
    # dispatch, so listeners added mid-step are not missed until some later step.
    seen: list[tuple[str, Any]] = []

    def post(payload: Any, next: Any) -> Any:
        seen.append(("tools/post-execute", payload.execution.call_id))
        return next()

    def request(payload: Any, next: Any) -> Any:
        seen.append(("agent/request", payload.step))
        return next()

    def pre_step(payload: Any, next: Any) -> Any:
        seen.append(("agent/pre-step", payload.step))
        return next()

    @tool
    async def listen() -> str:
        """Start listening."""
        app.ctx.on("tools/post-execute", post)
        app.ctx.on("agent/request", request)
        app.ctx.on("agent/pre-step", pre_step)
        return "listening"

    register(app, listen)
    agent, _ = new_agent(app, tool_call("c1", "listen", {}), text("done"))
    await run(agent)
    assert seen == [
        ("tools/post-execute", "c1"),
        ("agent/pre-step", 2),
        ("agent/request", 2),
    ]
    assert [d["content"] for d in data(agent, "tool/result")] == ["listening"]


async def test_logged_call_and_result_data_is_frozen_plain_json_whatever_the_result_holds(
    app: App,
) -> None:
    class Colour(enum.StrEnum):
        RED = "red"

    @tool
    def plain() -> str:
        """A plain text result."""
        return "ok"

    @tool
    def subclass() -> str:
        """A str subclass (an enum member) as the result."""
        return Colour.RED

    @tool
    def with_meta() -> ToolResult:
        """A result carrying meta."""
        return ToolResult(content="m", meta={"rows": [1, 2]})

    register(app, plain, subclass, with_meta)
    agent, _ = new_agent(
        app,
        combine(
            tool_call("c1", "plain", {}),
            tool_call("c2", "subclass", {}),
            tool_call("c3", "with_meta", {}),
            tool_call("c4", "nope", {}),
        ),
        text("ok"),
    )
    await run(agent)
    events = [e for e in agent.session.events if e.type in ("tool/call", "tool/result")]
    assert all(isinstance(e.data, FrozenDict) for e in events)
    results = {d["call_id"]: d for d in data(agent, "tool/result")}
    assert results["c1"]["content"] == "ok"
    # the enum member is logged as the plain str it stands for
    assert type(results["c2"]["content"]) is str and results["c2"]["content"] == "red"
    assert results["c3"]["meta"] == {"rows": (1, 2)}
    assert isinstance(results["c3"]["meta"], FrozenDict)
    assert results["c4"]["error"]["code"] == "UNKNOWN_TOOL"
    assert isinstance(results["c4"]["error"], FrozenDict)
    with pytest.raises(TypeError):
        results["c4"]["error"]["code"] = "X"


async def test_a_tool_registered_by_an_earlier_call_of_the_step_is_found_by_a_later_call(
    app: App,
) -> None:
    @tool
    def late() -> str:
        """Registered while the step runs."""
        return "late ran"

    @tool
    def enable() -> str:
        """Register ``late``."""
        app.ctx.tools.register(late)
        return "enabled"

    register(app, enable)
    agent, _ = new_agent(
        app, combine(tool_call("c1", "enable", {}), tool_call("c2", "late", {})), text("ok")
    )
    await run(agent)
    assert [d["content"] for d in data(agent, "tool/result")] == ["enabled", "late ran"]
