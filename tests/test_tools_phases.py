"""``ToolRuntime`` phases added on top of the pipeline: ``tools/settled`` and
``finalize_content``, driven through the runtime without a loop."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop_nb.context import Context
from agentloop_nb.messages import ToolCallBlock
from agentloop_nb.tools import (
    BLOCKED,
    DENIED,
    TOOL_ERROR,
    Accept,
    Block,
    Deny,
    Tool,
    ToolResult,
    ToolRuntime,
    ToolSettledPayload,
    tool,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def root() -> Context:
    ctx = Context()
    ctx.provide("tools", ToolRuntime(ctx))
    return ctx


def call(name: str, args: Any = None, call_id: str = "c1") -> ToolCallBlock:
    return ToolCallBlock(id=call_id, name=name, arguments=json.dumps(args or {}))


async def execute(ctx: Context, name: str, args: Any = None) -> ToolResult:
    return await ctx.tools.execute(ctx.tools.new_execution(call(name, args)))


def code(result: ToolResult) -> str | None:
    return None if result.error is None else result.error.code


# -- tools/settled -------------------------------------------------------------------------


async def test_settled_carries_the_body_result_before_post_execute_changes_it(
    root: Context,
) -> None:
    @tool
    async def answer() -> str:
        """Answer."""
        return "42"

    root.tools.register(answer)
    events: list[str] = []
    root.on("tools/settled", lambda p: events.append(f"settled:{p.result.content}"))
    root.on("tools/post-execute", lambda p, next: Accept(content="forty-two"))
    root.on("tools/result", lambda p: events.append(f"result:{p.result.content}"))
    result = await execute(root, "answer")
    assert events == ["settled:42", "result:forty-two"]
    assert result.content == "forty-two"


async def test_settled_fires_once_for_a_refused_call(root: Context) -> None:
    root.tools.register(tool(lambda: "never", name="guarded"))
    root.tools.guard(lambda execution: "not today")
    seen: list[ToolSettledPayload] = []
    root.on("tools/settled", seen.append)
    result = await execute(root, "guarded")
    assert code(result) == DENIED
    assert len(seen) == 1 and seen[0].result == result
    assert seen[0].execution.name == "guarded"


async def test_a_raising_settled_listener_does_not_change_the_call(root: Context) -> None:
    root.tools.register(tool(lambda: "fine", name="plain"))

    def broken(payload: ToolSettledPayload) -> None:
        raise RuntimeError("view bug")

    reports: list[Any] = []
    root.on("internal/error", reports.append)
    root.on("tools/settled", broken)
    assert (await execute(root, "plain")).content == "fine"
    assert len(reports) == 1


# -- finalize_content ----------------------------------------------------------------------


def shorten(result: ToolResult) -> str:
    return result.content[:5] + "..."


async def test_finalize_content_replaces_the_content_the_model_sees(root: Context) -> None:
    @tool(finalize_content=shorten)
    def long_text() -> str:
        """A long text."""
        return "abcdefghij"

    root.tools.register(long_text)
    seen: list[str] = []
    root.on("tools/result", lambda p: seen.append(p.result.content))
    result = await execute(root, "long_text")
    assert result.content == "abcde..." and not result.is_error
    assert seen == ["abcde..."]


async def test_finalize_content_sees_the_post_execute_result_and_keeps_its_contexts(
    root: Context,
) -> None:
    received: list[ToolResult] = []

    def finalize(result: ToolResult) -> str:
        received.append(result)
        return "final"

    definition = Tool(
        "raw",
        "A hand-written tool.",
        {"type": "object", "properties": {}},
        lambda args, execution: "body",
        finalize_content=finalize,
    )
    root.tools.register(definition)
    root.on(
        "tools/post-execute",
        lambda p, next: Accept(content="accepted", additional_contexts=("note",)),
    )
    result = await execute(root, "raw")
    assert [r.content for r in received] == ["accepted"]
    assert result.content == "final" and result.additional_contexts == ("note",)


async def test_async_finalize_content_is_awaited(root: Context) -> None:
    async def finalize(result: ToolResult) -> str:
        return f"[{result.content}]"

    root.tools.register(tool(name="x", finalize_content=finalize)(lambda: "x"))
    assert (await execute(root, "x")).content == "[x]"


@pytest.mark.parametrize(
    ("finalize", "problem"),
    [
        (lambda result: 1 / 0, "ZeroDivisionError: division by zero"),
        (lambda result: 42, "TypeError: finalize_content returned int, not str"),
    ],
)
async def test_a_failing_or_non_str_finalize_content_is_a_tool_error(
    root: Context, finalize: Any, problem: str
) -> None:
    root.tools.register(tool(name="ok", finalize_content=finalize)(lambda: "fine"))
    result = await execute(root, "ok")
    assert code(result) == TOOL_ERROR
    assert result.content == f"Error: tool 'ok' failed to finalize its content: {problem}"
    assert result.call_id == "c1"


async def test_error_results_are_not_finalized(root: Context) -> None:
    calls: list[ToolResult] = []

    def finalize(result: ToolResult) -> str:
        calls.append(result)
        return "finalized"

    def fail() -> str:
        raise RuntimeError("boom")

    root.tools.register(tool(name="fails", finalize_content=finalize)(fail))
    root.tools.register(tool(name="blocked", finalize_content=finalize)(lambda: "x"))
    root.tools.register(tool(name="denied", finalize_content=finalize)(lambda: "x"))
    root.on(
        "tools/post-execute",
        lambda p, next: Block("withheld") if p.execution.name == "blocked" else next(),
    )
    root.on(
        "tools/pre-execute",
        lambda e, next: Deny("no") if e.name == "denied" else next(),
    )
    assert code(await execute(root, "fails")) == TOOL_ERROR
    assert code(await execute(root, "blocked")) == BLOCKED
    assert code(await execute(root, "denied")) == DENIED
    assert calls == []


async def test_settle_now_settles_only_what_needs_no_await(root: Context) -> None:
    from agentloop_nb.tools._settle import settle_now

    root.tools.register(tool(name="plain")(lambda: "x"))
    root.tools.register(tool(name="final", finalize_content=shorten)(lambda: "x"))
    heard: list[str] = []
    root.on("tools/result", lambda p: heard.append(p.execution.name))
    ok = ToolResult(content="abcdefgh", call_id="c1")
    failed = ToolResult(content="Error: no", is_error=True, call_id="c1")
    plain = root.tools.new_execution(call("plain"))
    final = root.tools.new_execution(call("final"))
    # nothing to await: tools/result emitted, the very result returned
    assert settle_now(plain, ok) is ok
    assert settle_now(final, failed) is failed  # error results are not finalized
    assert heard == ["plain", "final"]
    # a finalizer to run, or a post-execute listener: nothing done, settle() decides
    assert settle_now(final, ok) is None
    root.on("tools/post-execute", lambda p, next: next())
    assert settle_now(plain, ok) is None
    assert heard == ["plain", "final"]
    assert (await root.tools.post_execute(final, ok)).content == "abcde..."


def test_admit_now_admits_only_what_needs_no_await(root: Context) -> None:
    from agentloop_nb.signals import AbortController
    from agentloop_nb.tools._admit import PENDING, admit_now
    from agentloop_nb.tools._runtime import registry_of

    @tool
    def add(a: int) -> str:
        """Add."""
        return str(a)

    root.tools.register(add)
    registry = registry_of(root.tools)
    settled: list[str | None] = []
    root.on("tools/settled", lambda p: settled.append(code(p.result)))
    assert admit_now(root.tools.new_execution(call("add", {"a": 1})), registry) is None
    unknown = admit_now(root.tools.new_execution(call("nope")), registry)
    invalid = admit_now(root.tools.new_execution(call("add", {"a": "x"})), registry)
    stopped = AbortController()
    stopped.abort("stop")
    late = root.tools.new_execution(call("add", {"a": 1}), signal=stopped.signal)
    assert [code(r) for r in (unknown, invalid, admit_now(late, registry))] == [
        "UNKNOWN_TOOL",
        "INVALID_ARGS",
        "ABORTED",
    ]
    assert settled == ["UNKNOWN_TOOL", "INVALID_ARGS", "ABORTED"]  # refusals are announced
    # a guard or a pre-execute listener to await: nothing done, admit() decides
    dispose = root.tools.guard(lambda execution: None)
    assert admit_now(root.tools.new_execution(call("nope")), registry) is PENDING
    dispose()
    root.on("tools/pre-execute", lambda e, next: next())
    assert admit_now(root.tools.new_execution(call("nope")), registry) is PENDING
    assert len(settled) == 3


def test_finalize_content_must_be_callable() -> None:
    with pytest.raises(ValueError, match="finalize_content must be callable"):
        Tool("t", "", {"type": "object"}, lambda a, e: "x", finalize_content="nope")  # type: ignore[arg-type]


# -- classification ------------------------------------------------------------------------


def test_execution_mode_asks_a_callable_concurrency_safe_again_each_time(root: Context) -> None:
    answers = iter([True, False])
    root.tools.register(tool(name="flip", concurrency_safe=lambda args: next(answers))(lambda: ""))
    block = call("flip")
    assert root.tools.execution_mode(block) == "parallel"
    assert root.tools.execution_mode(root.tools.new_execution(block)) == "exclusive"
