"""A pool worker runs its bodies in one cancel scope (``WorkerScope``), not a scope per body:
a call cancelled alone is cancelled level-triggered, its shields are honoured, and the next
body its worker runs is not cancelled; the scope itself decides as ``AbortScope(strict=False)``
does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _loop_helpers import WAIT, Shielded, data, idle, make_app, new_agent, reasons, register

from agentloop_nb.app import App
from agentloop_nb.signals import AbortController, AbortError
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import ToolExecution, tool
from agentloop_nb.tools._dispatch import WorkerScope

pytestmark = pytest.mark.anyio


@pytest.fixture
async def app() -> AsyncIterator[App]:
    app = make_app()
    app.ctx.agent_loop.settings.max_parallel_tool_calls = 2
    yield app
    await app.aclose()


class Calls:
    """Parallel-safe tools for a two-worker pool: ``hang`` (awaits forever, catches its
    cancellation once and awaits again), ``hold`` (returns once ``after`` is set) and
    ``after`` (awaits a few times, then sets it). Records each body's task and what it saw."""

    def __init__(self, app: App) -> None:
        self.tasks: dict[str, Any] = {}
        self.seen: list[str] = []
        self.hanging = anyio.Event()
        self.done = anyio.Event()

        @tool(concurrency_safe=True)
        async def hang(execution: ToolExecution) -> str:
            """Wait forever; after a cancellation, try to wait again."""
            self.tasks[execution.call_id] = asyncio.current_task()
            self.hanging.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.seen.append("cancelled")
                try:
                    await anyio.lowlevel.checkpoint()
                except anyio.get_cancelled_exc_class():
                    self.seen.append("cancelled again")  # level-triggered
                    raise
            return "not cancelled"

        @tool(concurrency_safe=True)
        async def hold(execution: ToolExecution) -> str:
            """Return once ``after`` ran."""
            self.tasks[execution.call_id] = asyncio.current_task()
            await self.done.wait()
            return "held"

        @tool(concurrency_safe=True)
        async def after(execution: ToolExecution) -> str:
            """Await a few times (none may be cancelled), then release ``hold``."""
            self.tasks[execution.call_id] = asyncio.current_task()
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            self.done.set()
            return "after ran"

        register(app, hang, hold, after)


async def test_a_pooled_call_cancelled_alone_is_cancelled_level_triggered_and_its_worker_runs_the_next_call(
    app: App,
) -> None:
    calls = Calls(app)
    script = combine(
        tool_call("c1", "hang", {}), tool_call("c2", "hold", {}), tool_call("c3", "after", {})
    )
    agent, _ = new_agent(app, script, text("ok"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await calls.hanging.wait()
    assert agent.cancel_tool("c1") is True
    await idle(agent)
    # c2 holds the other worker until c3 ran: c3 ran in c1's worker, after its cancellation
    assert calls.tasks["c3"] is calls.tasks["c1"] and calls.tasks["c2"] is not calls.tasks["c1"]
    assert calls.seen == ["cancelled", "cancelled again"]
    results = {d["call_id"]: d for d in data(agent, "tool/result")}
    assert results["c1"]["error"]["code"] == "CANCELLED"
    assert (results["c2"]["content"], results["c3"]["content"]) == ("held", "after ran")
    assert reasons(agent) == ["completed"]


async def test_a_pooled_body_cancelled_in_a_shielded_section_finishes_it_then_is_cancelled(
    app: App,
) -> None:
    body = Shielded(safe=True)

    @tool(concurrency_safe=True)
    async def quick() -> str:
        """Return at once."""
        return "quick"

    register(app, body.tool, quick)
    script = combine(tool_call("c1", "shielded", {}), tool_call("c2", "quick", {}))
    agent, _ = new_agent(app, script, text("ok"))
    agent.followup("go")
    await body.cancel_inside(agent, "c1")
    results = {d["call_id"]: d for d in data(agent, "tool/result")}
    assert results["c1"]["error"]["code"] == "CANCELLED"
    assert results["c2"]["content"] == "quick"


async def _in_scope(scope: WorkerScope, signal: Any, body: Any) -> Any:
    scope.signal = signal
    with scope:
        return await body()


async def test_a_worker_scope_decides_each_body_as_a_non_strict_abort_scope() -> None:
    scope = WorkerScope()
    outcomes: list[Any] = []

    async def hangs() -> str:
        await anyio.sleep_forever()
        return "never"

    async def swallows_and_returns() -> str:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            return "kept"  # strict=False: a normal finish after the abort keeps its outcome
        return "never"

    async def turns_it_into_an_error() -> str:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise ValueError("mine") from None
        return "never"

    async def sleeps() -> str:
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        return "slept"

    async def worker(task_status: Any) -> None:
        scope.open()
        try:
            controllers = []
            task_status.started(controllers)
            for body in (hangs, swallows_and_returns, turns_it_into_an_error, sleeps):
                controller = AbortController()
                controllers.append(controller)
                try:
                    outcomes.append(await _in_scope(scope, controller.signal, body))
                except AbortError as exc:
                    outcomes.append(("AbortError", exc.reason, type(exc.__cause__).__name__))
        finally:
            scope.close()

    async with anyio.create_task_group() as tg:
        controllers = await tg.start(worker)
        for k in range(3):
            await anyio.wait_all_tasks_blocked()  # the worker waits in body k
            assert len(controllers) == k + 1
            controllers[k].abort(f"r{k}")
    assert outcomes == [
        ("AbortError", "r0", "NoneType"),
        "kept",
        ("AbortError", "r2", "ValueError"),
        "slept",  # the renewed scope: nothing of the earlier cancellations reaches it
    ]


async def test_a_worker_scope_refuses_an_aborted_signal_and_lets_an_outer_cancel_through() -> None:
    scope = WorkerScope()
    controller = AbortController()
    controller.abort("early")
    started, reached = anyio.Event(), []

    async def body() -> None:
        started.set()
        await anyio.sleep_forever()

    async def worker() -> None:
        scope.open()
        try:
            with pytest.raises(AbortError):
                await _in_scope(scope, controller.signal, body)
            await _in_scope(scope, AbortController().signal, body)
        finally:
            reached.append("closed")
            scope.close()

    with anyio.CancelScope() as outer:
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker)
            await started.wait()
            outer.cancel()  # not the body's signal: propagates through the worker's scope
    assert outer.cancelled_caught and reached == ["closed"]
