"""``ToolRuntime``: registry, visibility, guards, execution modes and the call pipeline."""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import pytest

from agentloop_nb.context import Context
from agentloop_nb.messages import ToolCallBlock
from agentloop_nb.signals import AbortController
from agentloop_nb.tools import (
    ABORTED,
    BLOCKED,
    DENIED,
    INVALID_ARGS,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
    Accept,
    Allow,
    ApproveEdited,
    Ask,
    Block,
    Deny,
    PostExecutePayload,
    Tool,
    ToolExecution,
    ToolResult,
    ToolResultPayload,
    ToolRuntime,
    tool,
)


class FakeAgent:
    """What the runtime needs from an agent: identity and a ``ctx`` scoped to it."""

    def __init__(self, root: Context, agent_id: str) -> None:
        self.id = agent_id
        self.ctx = root.child(name=agent_id, agent=self)

    def __repr__(self) -> str:
        return f"<FakeAgent {self.id}>"


T = TypeVar("T")


async def abort_once(
    controller: AbortController,
    run: Callable[[], Awaitable[T]],
    ready: Callable[[], Awaitable[Any]],
) -> T:
    """Run ``run()`` in a task, abort ``controller`` once ``ready()`` returns, return the result."""
    results: list[T] = []
    async with anyio.create_task_group() as tg:

        async def go() -> None:
            results.append(await run())

        tg.start_soon(go)
        await ready()
        controller.abort("user")
    return results[0]


@pytest.fixture
def root() -> Context:
    ctx = Context()
    ctx.provide("tools", ToolRuntime(ctx))
    return ctx


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


def call(name: str, args: Any = "", call_id: str = "c1") -> ToolCallBlock:
    raw = args if isinstance(args, str) else json.dumps(args)
    return ToolCallBlock(id=call_id, name=name, arguments=raw)


async def execute(ctx: Context, name: str, args: Any = "", **kw: Any) -> ToolResult:
    execution = ctx.tools.new_execution(call(name, args), **kw)
    return await ctx.tools.execute(execution)


def code(result: ToolResult) -> str | None:
    return None if result.error is None else result.error.code


# -- registry ------------------------------------------------------------------------------


def test_registering_a_plain_function_wraps_it_with_tool(root: Context) -> None:
    def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    root.tools.register(shout)
    found = root.tools.lookup("shout")
    assert isinstance(found, Tool) and found.description == "Shout."
    assert root.tools.schemas() == [found.schema()]


def test_duplicate_name_in_the_same_scope_is_refused_by_name(root: Context) -> None:
    root.tools.register(echo)
    with pytest.raises(ValueError, match="'echo' is already registered"):
        root.tools.register(echo)
    agent = FakeAgent(root, "a")
    agent.ctx.tools.register(echo)  # shadowing the global one is allowed
    with pytest.raises(ValueError, match="'echo' is already registered for agent 'a'"):
        agent.ctx.tools.register(echo)


@pytest.mark.anyio
async def test_agent_scoped_tool_shadows_the_global_for_that_agent_only(root: Context) -> None:
    root.tools.register(echo)
    a, b = FakeAgent(root, "a"), FakeAgent(root, "b")

    @tool(name="echo", description="A's echo.")
    def echo_a(text: str) -> str:
        return f"A:{text}"

    a.ctx.tools.register(echo_a)
    assert root.tools.lookup("echo", a) is echo_a
    assert root.tools.lookup("echo", b) is echo
    assert root.tools.lookup("echo") is echo
    assert a.ctx.tools.lookup("echo") is echo_a  # the view defaults to its agent
    assert (await execute(root, "echo", {"text": "x"}, agent=a)).content == "A:x"
    assert (await execute(root, "echo", {"text": "x"}, agent=b)).content == "x"


def test_schema_order_is_registration_order_and_shadows_keep_the_global_position(
    root: Context,
) -> None:
    root.tools.register(echo)
    root.tools.register(add)
    agent = FakeAgent(root, "a")

    @tool
    def local_only() -> str:
        return ""

    agent.ctx.tools.register(local_only)
    agent.ctx.tools.register(Tool("echo", "scoped", {"type": "object"}, lambda a, e: ""))
    assert [s["name"] for s in root.tools.schemas()] == ["echo", "add"]
    schemas = root.tools.schemas(agent)
    assert [s["name"] for s in schemas] == ["echo", "add", "local_only"]
    assert schemas[0]["description"] == "scoped"
    assert agent.ctx.tools.schemas() == schemas
    assert [d.name for d in agent.ctx.tools.definitions()] == ["echo", "add", "local_only"]


def test_disposer_unregisters_and_the_name_can_be_registered_again(root: Context) -> None:
    dispose = root.tools.register(echo)
    dispose()
    assert root.tools.lookup("echo") is None
    assert root.tools.schemas() == []
    root.tools.register(echo)
    assert root.tools.lookup("echo") is echo


def test_disposing_the_owning_scope_unregisters_its_tools(root: Context) -> None:
    agent = FakeAgent(root, "a")
    agent.ctx.tools.register(echo)

    def plugin(ctx: Context, config: Any) -> None:
        ctx.tools.register(add)

    fiber = root.plugin(plugin)
    assert root.tools.lookup("add") is add
    fiber.dispose()
    assert root.tools.lookup("add") is None
    assert root.tools.lookup("echo", agent) is echo
    agent.ctx.fiber.dispose()
    assert root.tools.lookup("echo", agent) is None


def test_runtime_used_directly_registers_globally(root: Context) -> None:
    runtime = ToolRuntime(root)
    dispose = runtime.register(echo)
    assert runtime.lookup("echo") is echo
    dispose()
    assert runtime.definitions() == []


# -- execution modes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("safe", "arguments", "mode"),
    [
        (True, "{}", "parallel"),
        (False, "{}", "exclusive"),
        (lambda args: args.get("ro") is True, '{"ro": true}', "parallel"),
        (lambda args: args.get("ro") is True, '{"ro": false}', "exclusive"),
        (lambda args: 1, "{}", "exclusive"),  # truthy is not True
        (lambda args: 1 / 0, "{}", "exclusive"),  # raising
        (True, "not json", "exclusive"),
        (True, "[1]", "exclusive"),
        (True, "", "parallel"),  # empty counts as {}
    ],
)
def test_execution_mode_is_parallel_only_for_an_exact_true(
    root: Context, safe: Any, arguments: str, mode: str
) -> None:
    root.tools.register(Tool("t", "", {"type": "object"}, lambda a, e: "", concurrency_safe=safe))
    assert root.tools.execution_mode(call("t", arguments)) == mode
    execution = root.tools.new_execution(call("t", arguments))
    assert root.tools.execution_mode(execution) == mode


def test_execution_mode_of_an_unknown_tool_is_exclusive(root: Context) -> None:
    assert root.tools.execution_mode(call("nope", "{}")) == "exclusive"


def test_execution_mode_uses_the_agents_own_definition(root: Context) -> None:
    root.tools.register(Tool("t", "", {"type": "object"}, lambda a, e: ""))
    agent = FakeAgent(root, "a")
    agent.ctx.tools.register(
        Tool("t", "", {"type": "object"}, lambda a, e: "", concurrency_safe=True)
    )
    assert root.tools.execution_mode(call("t"), agent) == "parallel"
    assert root.tools.execution_mode(call("t")) == "exclusive"


# -- pre-execute -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_unknown_tool_result_lists_available_tools(root: Context) -> None:
    root.tools.register(echo)
    root.tools.register(add)
    result = await execute(root, "ech", "{}")
    assert code(result) == UNKNOWN_TOOL and result.is_error
    assert result.content == "Error: unknown tool 'ech'; available tools: echo, add"


@pytest.mark.anyio
async def test_unknown_tool_with_no_tools_says_so(root: Context) -> None:
    result = await execute(root, "x")
    assert result.content == "Error: unknown tool 'x'; no tools are available"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"text": ', "arguments are not valid JSON"),
        ('["x"]', "arguments must be a JSON object, got list"),
        ('"x"', "arguments must be a JSON object, got str"),
        ("", "text: Field required"),  # empty string counts as {}
    ],
)
async def test_bad_arguments_are_invalid_args_naming_the_problem(
    root: Context, arguments: str, problem: str
) -> None:
    ran: list[str] = []
    root.tools.register(echo)

    def hook(execution: ToolExecution, nxt: Any) -> Any:
        ran.append("hook")
        return nxt()

    root.on("tools/pre-execute", hook)
    result = await execute(root, "echo", arguments)
    assert code(result) == INVALID_ARGS
    assert result.content.startswith("Error: invalid arguments for tool 'echo': ")
    assert problem in result.content
    assert ran == []  # refused before any hook


@pytest.mark.anyio
async def test_pre_execute_deny_is_denied_with_reason_and_info(root: Context) -> None:
    bodies: list[str] = []

    @tool
    def rm(path: str) -> str:
        bodies.append(path)
        return "removed"

    root.tools.register(rm)

    def policy(execution: ToolExecution, nxt: Any) -> Any:
        if execution.args and execution.args["path"].startswith("/"):
            return Deny(reason="absolute paths are off limits", info={"rule": "abs"})
        return nxt()

    root.on("tools/pre-execute", policy)
    result = await execute(root, "rm", {"path": "/etc"})
    assert code(result) == DENIED
    assert result.content == "Error: tool call denied: absolute paths are off limits"
    assert result.meta == {"rule": "abs"}
    assert (await execute(root, "rm", {"path": "tmp"})).content == "removed"
    assert bodies == ["tmp"]


@pytest.mark.anyio
async def test_pre_execute_listener_answer_must_be_a_decision(root: Context) -> None:
    root.tools.register(echo)
    root.on("tools/pre-execute", lambda e, nxt: "yes")
    with pytest.raises(TypeError, match="tools/pre-execute"):
        await execute(root, "echo", {"text": "x"})


@pytest.mark.anyio
async def test_pre_execute_listener_exception_propagates(root: Context) -> None:
    root.tools.register(echo)

    def broken(execution: ToolExecution, nxt: Any) -> Any:
        raise RuntimeError("plugin bug")

    root.on("tools/pre-execute", broken)
    with pytest.raises(RuntimeError, match="plugin bug"):
        await execute(root, "echo", {"text": "x"})


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("verdict", "content"),
    [
        ("no echo on Fridays", "Error: tool call denied: no echo on Fridays"),
        (Deny(reason="nope"), "Error: tool call denied: nope"),
    ],
)
async def test_guard_reason_or_deny_denies(root: Context, verdict: Any, content: str) -> None:
    root.tools.register(echo)
    root.tools.guard(lambda execution: verdict if execution.name == "echo" else None)
    result = await execute(root, "echo", {"text": "x"})
    assert (code(result), result.content) == (DENIED, content)


@pytest.mark.anyio
async def test_guards_are_monotonic_allow_from_hook_cannot_override(root: Context) -> None:
    root.tools.register(echo)
    root.on("tools/pre-execute", lambda e, nxt: Allow())  # short-circuits the chain
    root.tools.guard(lambda e: "guarded")
    root.tools.guard(lambda e: None)
    assert code(await execute(root, "echo", {"text": "x"})) == DENIED


@pytest.mark.anyio
async def test_async_guard_passing_and_disposed_guard_no_longer_denies(root: Context) -> None:
    root.tools.register(echo)

    async def allow_all(execution: ToolExecution) -> None:
        return None

    root.tools.guard(allow_all)
    dispose = root.tools.guard(lambda e: "blocked")
    assert code(await execute(root, "echo", {"text": "x"})) == DENIED
    dispose()
    assert (await execute(root, "echo", {"text": "x"})).content == "x"


@pytest.mark.anyio
async def test_raising_guard_fails_closed(root: Context) -> None:
    root.tools.register(echo)

    def broken(execution: ToolExecution) -> None:
        raise KeyError("cfg")

    root.tools.guard(broken)
    result = await execute(root, "echo", {"text": "x"})
    assert code(result) == DENIED and "guard failed (KeyError" in result.content


@pytest.mark.anyio
async def test_agent_scoped_guard_applies_to_that_agent_only(root: Context) -> None:
    root.tools.register(echo)
    a, b = FakeAgent(root, "a"), FakeAgent(root, "b")
    a.ctx.tools.guard(lambda e: "not for a")
    assert code(await execute(root, "echo", {"text": "x"}, agent=a)) == DENIED
    assert (await execute(root, "echo", {"text": "x"}, agent=b)).content == "x"


class Approver:
    def __init__(self, answer: Any = True, error: Exception | None = None) -> None:
        self.answer = answer
        self.error = error
        self.asked: list[tuple[str, str | None]] = []

    async def request(self, execution: ToolExecution, reason: str | None) -> Any:
        self.asked.append((execution.name, reason))
        if self.error is not None:
            raise self.error
        return self.answer


@pytest.mark.anyio
async def test_ask_proceeds_when_the_approval_service_says_yes(root: Context) -> None:
    root.tools.register(echo)
    approver = Approver(True)
    root.provide("approval", approver)
    root.on("tools/pre-execute", lambda e, nxt: Ask(reason="writes to disk"))
    assert (await execute(root, "echo", {"text": "x"})).content == "x"
    assert approver.asked == [("echo", "writes to disk")]


@pytest.mark.anyio
async def test_an_approval_with_edited_arguments_runs_the_call_with_them(root: Context) -> None:
    seen: list[Any] = []

    @tool
    def shout(text: str, execution: ToolExecution) -> str:
        """Shout."""
        seen.append((execution.edited_from, execution.args, execution.arguments))
        return text.upper()

    root.tools.register(shout)
    root.provide("approval", Approver(ApproveEdited(args={"text": "edited"})))
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    assert (await execute(root, "shout", {"text": "proposed"})).content == "EDITED"
    assert seen == [({"text": "proposed"}, {"text": "edited"}, '{"text": "edited"}')]


@pytest.mark.anyio
async def test_edited_arguments_that_fail_the_schema_are_invalid_and_nothing_runs(
    root: Context,
) -> None:
    ran: list[int] = []
    root.tools.register(add)
    root.on("tools/execute", lambda e, nxt: ran.append(1) or nxt())
    root.provide("approval", Approver(ApproveEdited(args={"a": "not a number"})))
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    result = await execute(root, "add", {"a": 1})
    assert code(result) == INVALID_ARGS and ran == []
    assert "edited at approval are invalid for tool 'add'" in result.content


@pytest.mark.anyio
@pytest.mark.parametrize("answer", [False, None, "yes", 1])
async def test_ask_denies_unless_the_answer_is_exactly_true(root: Context, answer: Any) -> None:
    root.tools.register(echo)
    root.provide("approval", Approver(answer))
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    result = await execute(root, "echo", {"text": "x"})
    assert (code(result), result.content) == (
        DENIED,
        "Error: tool call denied: the approver declined",
    )


@pytest.mark.anyio
async def test_an_approval_service_answering_deny_is_quoted_with_its_reason(
    root: Context,
) -> None:
    root.tools.register(echo)
    root.provide("approval", Approver(Deny("no one answered within 5 s", {"approval": "timeout"})))
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    result = await execute(root, "echo", {"text": "x"})
    assert code(result) == DENIED and "no one answered within 5 s" in result.content
    assert "declined" not in result.content and result.meta == {"approval": "timeout"}


@pytest.mark.anyio
async def test_ask_without_an_approval_service_is_denied(root: Context) -> None:
    root.tools.register(echo)
    root.on("tools/pre-execute", lambda e, nxt: Ask(reason="risky"))
    result = await execute(root, "echo", {"text": "x"})
    assert code(result) == DENIED
    assert "approval required (risky) but no one could approve it" in result.content


@pytest.mark.anyio
async def test_ask_with_a_failing_approval_service_is_denied(root: Context) -> None:
    root.tools.register(echo)
    root.provide("approval", Approver(error=ConnectionError("front end gone")))
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    result = await execute(root, "echo", {"text": "x"})
    assert code(result) == DENIED
    assert "no one could approve it (approval service failed: ConnectionError: front end gone)" in (
        result.content
    )


@pytest.mark.anyio
async def test_ask_resolves_the_approval_service_through_the_agents_ctx(root: Context) -> None:
    root.tools.register(echo)
    agent = FakeAgent(root, "a")
    approver = Approver(True)
    agent.ctx.provide("approval", approver)
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    assert (await execute(root, "echo", {"text": "x"}, agent=agent)).content == "x"
    assert code(await execute(root, "echo", {"text": "x"})) == DENIED
    assert approver.asked == [("echo", None)]


@pytest.mark.anyio
async def test_guard_denial_spares_the_approver(root: Context) -> None:
    root.tools.register(echo)
    approver = Approver(True)
    root.provide("approval", approver)
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    root.tools.guard(lambda e: "policy")
    assert code(await execute(root, "echo", {"text": "x"})) == DENIED
    assert approver.asked == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("approver", "answer"),
    [
        (Approver(True), "approved"),
        (Approver(ApproveEdited(args={"text": "edited"})), "edited"),
        (Approver(False), "denied"),
        (Approver(Deny("no one answered", {"approval": "timeout"})), "denied"),
        (Approver(error=ConnectionError("front end gone")), "failed"),
    ],
)
async def test_the_executions_approval_observer_hears_the_question_then_the_answer(
    root: Context, approver: Approver, answer: str
) -> None:
    heard: list[tuple[str, str | None]] = []

    class Recording:
        async def request(self, execution: ToolExecution, reason: str | None) -> Any:
            heard.append(("(service asked)", reason))
            return await approver.request(execution, reason)

    root.tools.register(echo)
    root.provide("approval", Recording())
    root.on("tools/pre-execute", lambda e, nxt: Ask(reason="risky"))
    execution = root.tools.new_execution(call("echo", {"text": "x"}))
    execution.on_approval = lambda state, reason: heard.append((state, reason))
    await root.tools.execute(execution)
    assert heard == [("asked", "risky"), ("(service asked)", "risky"), (answer, None)]


@pytest.mark.anyio
async def test_a_call_never_put_to_the_approver_tells_its_observer_nothing(
    root: Context,
) -> None:
    heard: list[Any] = []
    root.tools.register(echo)
    root.provide("approval", Approver(True))
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    root.tools.guard(lambda e: "policy")  # denied before anyone is asked
    execution = root.tools.new_execution(call("echo", {"text": "x"}))
    execution.on_approval = lambda *a: heard.append(a)
    assert code(await root.tools.execute(execution)) == DENIED and heard == []


@pytest.mark.anyio
async def test_abort_while_waiting_for_approval_is_aborted(root: Context) -> None:
    root.tools.register(echo)
    asked = anyio.Event()

    class Hanging:
        async def request(self, execution: ToolExecution, reason: str | None) -> bool:
            asked.set()
            await anyio.sleep_forever()
            return True

    root.provide("approval", Hanging())
    root.on("tools/pre-execute", lambda e, nxt: Ask())
    controller = AbortController()
    execution = root.tools.new_execution(call("echo", {"text": "x"}), signal=controller.signal)
    heard: list[Any] = []
    execution.on_approval = lambda *a: heard.append(a)
    result = await abort_once(controller, lambda: root.tools.pre_execute(execution), asked.wait)
    assert result is not None and code(result) == ABORTED
    assert heard == [("asked", None), ("aborted", None)]


# -- dispatch --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_raising_body_is_a_tool_error_with_type_and_message(root: Context) -> None:
    @tool
    async def explode() -> str:
        raise ValueError("disk full")

    root.tools.register(explode)
    result = await execute(root, "explode")
    assert code(result) == TOOL_ERROR
    assert result.content == "Error: tool 'explode' failed: ValueError: disk full"


@pytest.mark.anyio
async def test_body_exceeding_its_timeout_is_tool_timeout(root: Context) -> None:
    cancelled = anyio.Event()

    @tool(timeout=0.05)
    async def slow() -> str:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    root.tools.register(slow)
    result = await execute(root, "slow")
    assert code(result) == TOOL_TIMEOUT
    assert result.content == "Error: tool 'slow' timed out after 0.05 s"
    assert cancelled.is_set()


@pytest.mark.anyio
async def test_abort_during_an_async_body_cancels_it_and_is_aborted(root: Context) -> None:
    started, cancelled = anyio.Event(), anyio.Event()

    @tool
    async def wait_forever() -> str:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    root.tools.register(wait_forever)
    controller = AbortController()
    result = await abort_once(
        controller, lambda: execute(root, "wait_forever", signal=controller.signal), started.wait
    )
    assert cancelled.is_set()
    assert code(result) == ABORTED
    assert result.content == "Error: tool call aborted while running (reason: user)"


@pytest.mark.anyio
async def test_body_raising_abort_error_from_its_signal_is_aborted(root: Context) -> None:
    @tool
    async def checks(execution: ToolExecution) -> str:
        controller.abort("stop")
        execution.signal.throw_if_aborted()
        return "never"

    controller = AbortController()
    root.tools.register(checks)
    assert code(await execute(root, "checks", signal=controller.signal)) == ABORTED


@pytest.mark.anyio
async def test_already_aborted_signal_skips_the_body(root: Context) -> None:
    ran: list[int] = []

    @tool
    def body() -> str:
        ran.append(1)
        return ""

    root.tools.register(body)
    controller = AbortController()
    controller.abort("user")
    result = await execute(root, "body", signal=controller.signal)
    assert code(result) == ABORTED and ran == []


@pytest.mark.anyio
async def test_sync_body_runs_off_the_loop_thread(root: Context) -> None:
    threads: list[int] = []

    @tool
    def where() -> str:
        threads.append(threading.get_ident())
        return "ok"

    root.tools.register(where)
    assert (await execute(root, "where")).content == "ok"
    assert threads and threads[0] != threading.get_ident()


@pytest.mark.anyio
async def test_abort_abandons_a_blocked_sync_body(root: Context) -> None:
    entered, release, finished = threading.Event(), threading.Event(), threading.Event()

    @tool
    def blocking() -> str:
        entered.set()
        release.wait(30)
        finished.set()
        return "late"

    root.tools.register(blocking)
    controller = AbortController()
    result = await abort_once(
        controller,
        lambda: execute(root, "blocking", signal=controller.signal),
        lambda: anyio.to_thread.run_sync(entered.wait),
    )
    assert code(result) == ABORTED
    assert not finished.is_set()  # abandoned, still running
    release.set()
    await anyio.to_thread.run_sync(finished.wait)


@pytest.mark.anyio
async def test_tools_execute_waterfall_wraps_the_body(root: Context) -> None:
    root.tools.register(echo)
    order: list[str] = []

    async def around(execution: ToolExecution, nxt: Any) -> ToolResult:
        order.append(f"before {execution.name}")
        result = await nxt()
        order.append(f"after {result.content}")
        return result.model_copy(update={"content": f"[{result.content}]"})

    root.on("tools/execute", around)
    assert (await execute(root, "echo", {"text": "x"})).content == "[x]"
    assert order == ["before echo", "after x"]


@pytest.mark.anyio
async def test_tools_execute_listener_can_short_circuit_the_body(root: Context) -> None:
    ran: list[int] = []

    @tool
    def real() -> str:
        ran.append(1)
        return "real"

    root.tools.register(real)
    root.on("tools/execute", lambda e, nxt: ToolResult(content="replayed"))
    result = await execute(root, "real")
    assert (result.content, result.call_id, ran) == ("replayed", "c1", [])


@pytest.mark.anyio
async def test_tools_execute_listener_must_answer_a_tool_result(root: Context) -> None:
    root.tools.register(echo)
    root.on("tools/execute", lambda e, nxt: "text")
    with pytest.raises(TypeError, match="expected a ToolResult"):
        await execute(root, "echo", {"text": "x"})


# -- post-execute and tools/result -----------------------------------------------------------


@pytest.mark.anyio
async def test_accept_replaces_content_and_attaches_additional_contexts(root: Context) -> None:
    @tool
    def read() -> ToolResult:
        return ToolResult(content="secret=1", additional_contexts=("from body",))

    root.tools.register(read)

    def redact(payload: PostExecutePayload, nxt: Any) -> Accept:
        assert payload.result.content == "secret=1"
        return Accept(content="secret=***", additional_contexts=("file was redacted",))

    root.on("tools/post-execute", redact)
    result = await execute(root, "read")
    assert result.content == "secret=***" and not result.is_error
    assert result.additional_contexts == ("from body", "file was redacted")


@pytest.mark.anyio
async def test_default_accept_keeps_the_result(root: Context) -> None:
    root.tools.register(echo)
    root.on("tools/post-execute", lambda p, nxt: nxt())
    assert (await execute(root, "echo", {"text": "x"})) == ToolResult(content="x", call_id="c1")


@pytest.mark.anyio
async def test_block_turns_the_result_into_an_error_carrying_the_feedback(root: Context) -> None:
    root.tools.register(echo)
    root.on("tools/post-execute", lambda p, nxt: Block(feedback="output contained a key"))
    result = await execute(root, "echo", {"text": "sk-123"})
    assert result.is_error and code(result) == BLOCKED
    assert result.content == "Error: output contained a key"
    assert "sk-123" not in result.content


@pytest.mark.anyio
async def test_post_execute_listener_answer_must_be_accept_or_block(root: Context) -> None:
    root.tools.register(echo)
    root.on("tools/post-execute", lambda p, nxt: Allow())
    with pytest.raises(TypeError, match="tools/post-execute"):
        await execute(root, "echo", {"text": "x"})


@pytest.mark.anyio
async def test_tools_result_observes_the_final_result_of_every_call(root: Context) -> None:
    root.tools.register(echo)
    seen: list[tuple[str, str]] = []

    def observe(payload: ToolResultPayload) -> None:
        seen.append((payload.execution.name, payload.result.content))

    root.on("tools/result", observe)
    root.on("tools/post-execute", lambda p, nxt: Accept(content=p.result.content + "!"))
    await execute(root, "echo", {"text": "x"})
    await execute(root, "missing")
    assert seen == [
        ("echo", "x!"),
        ("missing", "Error: unknown tool 'missing'; available tools: echo!"),
    ]


@pytest.mark.anyio
async def test_hooks_dispatch_through_the_agents_ctx(root: Context) -> None:
    root.tools.register(echo)
    a, b = FakeAgent(root, "a"), FakeAgent(root, "b")
    seen: list[str] = []
    root.on("tools/result", lambda p: seen.append(f"root:{p.execution.agent.id}"))
    a.ctx.on("tools/result", lambda p: seen.append(f"a:{p.execution.agent.id}"))
    b.ctx.on("tools/pre-execute", lambda e, nxt: Deny(reason="b's policy"))
    assert (await execute(root, "echo", {"text": "x"}, agent=a)).content == "x"
    assert code(await execute(root, "echo", {"text": "x"}, agent=b)) == DENIED
    assert seen == ["root:a", "a:a", "root:b"]


@pytest.mark.anyio
async def test_phases_can_be_driven_separately(root: Context) -> None:
    root.tools.register(add)
    agent = FakeAgent(root, "a")
    execution = root.tools.new_execution(
        call("add", {"a": 2, "b": 3}, call_id="k"), agent=agent, turn=4, step=2
    )
    assert (execution.call_id, execution.turn, execution.step) == ("k", 4, 2)
    assert execution.args == {"a": 2, "b": 3} and execution.tool is add
    assert execution.agent is agent and execution.ctx is agent.ctx
    assert await root.tools.pre_execute(execution) is None
    result = await root.tools.dispatch(execution)
    assert (result.content, result.call_id) == ("5", "k")
    assert await root.tools.post_execute(execution, result) == result


def test_an_execution_built_in_one_call_is_the_constructed_one(root: Context) -> None:
    from agentloop_nb.tools._decisions import new_execution

    signal = AbortController().signal
    fields: dict[str, Any] = {
        "call_id": "c1",
        "name": "echo",
        "arguments": '{"x": 1}',
        "args": {"x": 1},
        "tool": None,
        "agent": None,
        "signal": signal,
        "turn": 2,
        "step": 3,
        "ctx": root,
        "args_error": "why",
    }
    built, constructed = new_execution(**fields), ToolExecution(**fields)
    assert type(built) is ToolExecution
    for name in ToolExecution.__slots__:  # every slot set, to the constructor's value
        assert getattr(built, name) == getattr(constructed, name), name
    assert repr(built) == repr(constructed)
