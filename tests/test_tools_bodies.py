"""Sync tool bodies: they run in daemon threads, disposal waits for the ones that ignore the
signal up to ``ctx.tools.disposal_grace``, and one that never returns cannot keep ``aclose()``
or the process from ending."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest
from _loop_helpers import (
    WAIT,
    Swallower,
    data,
    is_type,
    make_app,
    new_agent,
    reasons,
    register,
    run,
    wait_for,
)

from agentloop_nb.context import Context
from agentloop_nb.messages import ToolCallBlock
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import Tool, ToolRuntime, tool

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


class Stubborn:
    """A sync tool whose body ignores the signal until the test releases it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

        def stubborn() -> str:
            """Block until released, whatever the signal says."""
            self.started.set()
            self.release.wait(WAIT)
            self.finished.set()
            return "late"

        self.tool: Tool = tool(stubborn)

    async def wait_started(self) -> None:
        assert await anyio.to_thread.run_sync(self.started.wait, WAIT)


async def test_sync_bodies_run_in_daemon_threads() -> None:
    ctx = Context()
    ctx.provide("tools", ToolRuntime(ctx))

    @tool
    def where() -> str:
        """Name the thread kind."""
        current = threading.current_thread()
        return f"daemon={current.daemon} main={current is threading.main_thread()}"

    ctx.tools.register(where)
    execution = ctx.tools.new_execution(ToolCallBlock(id="c1", name="where", arguments="{}"))
    assert (await ctx.tools.execute(execution)).content == "daemon=True main=False"


def test_disposal_grace_is_shared_by_views_and_must_not_be_negative() -> None:
    ctx = Context()
    ctx.provide("tools", ToolRuntime(ctx))
    assert ctx.tools.disposal_grace == 10.0
    ctx.child(name="c").tools.disposal_grace = 2.5
    assert ctx.tools.disposal_grace == 2.5
    with pytest.raises(ValueError, match="disposal_grace"):
        ctx.tools.disposal_grace = -1


async def test_disposal_waits_for_a_sync_body_that_ignores_the_signal() -> None:
    app = make_app()
    body = Stubborn()
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "stubborn", {})), text("never"))
    body_done_at_disposed: list[bool] = []
    app.ctx.on("agent/disposed", lambda p: body_done_at_disposed.append(body.finished.is_set()))
    agent.followup("go")
    await body.wait_started()
    async with anyio.create_task_group() as tg:
        tg.start_soon(app.ctx.agent_loop.dispose, agent)
        await wait_for(agent, is_type("turn/end"))
        await anyio.wait_all_tasks_blocked()
        assert body_done_at_disposed == []  # the turn is over; disposal still waits for the body
        body.release.set()
    assert body_done_at_disposed == [True]
    assert reasons(agent) == ["disposed"]
    assert data(agent, "tool/result")[0]["error"]["code"] == "ABORTED"
    await app.aclose()


async def test_disposal_also_waits_for_a_body_an_earlier_cancel_abandoned() -> None:
    app = make_app()
    body = Stubborn()
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "stubborn", {})), text("never"))
    agent.followup("go")
    await body.wait_started()
    agent.cancel()
    with anyio.fail_after(WAIT):
        await agent.when_idle()
    assert reasons(agent) == ["aborted"] and not body.finished.is_set()
    body_done_at_disposed: list[bool] = []
    app.ctx.on("agent/disposed", lambda p: body_done_at_disposed.append(body.finished.is_set()))
    async with anyio.create_task_group() as tg:
        tg.start_soon(app.ctx.agent_loop.dispose, agent)
        await anyio.wait_all_tasks_blocked()
        assert body_done_at_disposed == []
        body.release.set()
    assert body_done_at_disposed == [True]
    await app.aclose()


async def test_a_body_still_running_after_the_grace_period_is_abandoned_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    app.ctx.tools.disposal_grace = 0.05
    body = Stubborn()
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "stubborn", {})), text("never"))
    disposed: list[bool] = []
    app.ctx.on("agent/disposed", lambda p: disposed.append(body.finished.is_set()))
    caplog.set_level(logging.WARNING, logger="agentloop_nb.tools")
    agent.followup("go")
    await body.wait_started()
    try:
        with anyio.fail_after(WAIT):
            await app.aclose()
        assert disposed == [False]  # the agent left without the body
        assert "abandoning 1 tool body(ies)" in caplog.text and "stubborn" in caplog.text
    finally:
        body.release.set()


SCRIPT = """
import asyncio
import logging
import threading
import time

from agentloop_nb.app import App
from agentloop_nb.loop import AgentOptions
from agentloop_nb.testing import ScriptedModel, combine, text, tool_call
from agentloop_nb.tools import tool

started = threading.Event()


@tool
def sleeper() -> str:
    \"\"\"Sleep a minute, ignoring the signal.\"\"\"
    started.set()
    time.sleep(60)
    return "woke"


async def main() -> None:
    app = App()
    app.ctx.tools.disposal_grace = 0.5
    script = [combine(tool_call("c1", "sleeper", {})), text("never")]
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel(script))
    app.ctx.tools.register(sleeper)
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="scripted", model="m"))
    agent.followup("go")
    while not started.is_set():  # polling is fine in a throwaway script
        await asyncio.sleep(0.01)
    await app.aclose()
    print("closed", flush=True)


logging.basicConfig(level=logging.WARNING)
asyncio.run(main())
"""


def test_a_sync_body_that_never_returns_keeps_neither_aclose_nor_the_process_alive() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,  # the body sleeps 60 s: only an exit that does not wait for it gets here
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed"
    assert "abandoning 1 tool body(ies)" in done.stderr and "sleeper" in done.stderr


# -- async bodies: driven in the calling task --------------------------------------------------

_marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="caller")


def _execution(ctx: Context, name: str) -> Any:
    return ctx.tools.new_execution(ToolCallBlock(id="c1", name=name, arguments="{}"))


async def test_an_async_body_runs_in_the_calling_task_with_its_own_context_variables() -> None:
    ctx = Context()
    ctx.provide("tools", ToolRuntime(ctx))
    seen: list[Any] = []

    @tool
    async def probe() -> str:
        """Report the task and change a context variable."""
        seen.append(asyncio.current_task())
        _marker.set("body")
        await anyio.lowlevel.checkpoint()  # a suspension: still the same task afterwards
        seen.append(asyncio.current_task())
        return _marker.get()

    ctx.tools.register(probe)
    result = await ctx.tools.execute(_execution(ctx, "probe"))
    assert result.content == "body"
    assert seen == [asyncio.current_task()] * 2
    assert _marker.get() == "caller"  # the body's change stayed in its own copy


async def test_a_cancelled_error_from_a_future_someone_else_cancelled_is_a_tool_error() -> None:
    ctx = Context()
    ctx.provide("tools", ToolRuntime(ctx))
    waiting = anyio.Event()
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @tool
    async def victim() -> str:
        """Await a future another party cancels."""
        waiting.set()
        await future
        return "never"

    ctx.tools.register(victim)
    async with anyio.create_task_group() as tg:
        results: list[Any] = []

        async def call() -> None:
            results.append(await ctx.tools.execute(_execution(ctx, "victim")))

        tg.start_soon(call)
        await waiting.wait()
        future.cancel()  # not a cancellation of the call: the body just sees an error
    assert results[0].error.code == "TOOL_ERROR"
    assert "CancelledError" in results[0].error.message


async def cancel_while_running(app: Any, body: Tool, started: anyio.Event, then: str) -> Any:
    """Run ``body`` as the agent's one tool call, cancel the turn once it started, and return
    the agent after the turn ended (``then`` is the model's answer to a later turn)."""
    register(app, body)
    agent, _ = new_agent(app, combine(tool_call("c1", body.name, {})), text(then))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await started.wait()
    agent.cancel()
    with anyio.fail_after(WAIT):
        await agent.when_idle()
    return agent


async def test_a_body_still_ignoring_its_cancellation_after_the_grace_is_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    app.ctx.tools.disposal_grace = 0.05
    body = Swallower("stubborn_async")
    caplog.set_level(logging.WARNING, logger="agentloop_nb.tools")
    agent = await cancel_while_running(app, body.tool, body.started, "never")
    assert reasons(agent) == ["aborted"]
    assert data(agent, "tool/result")[0]["error"]["code"] == "ABORTED"
    assert body.cleaned == ["finally ran"]  # closed at its await, where its own scopes live
    assert "abandoning tool body 'stubborn_async'" in caplog.text
    assert "closed at its await" in caplog.text
    await app.aclose()


async def test_a_body_that_awaits_while_being_closed_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    app.ctx.tools.disposal_grace = 0.05
    body = Swallower("clingy", await_when_closed=True)
    caplog.set_level(logging.WARNING, logger="agentloop_nb.tools")
    agent = await cancel_while_running(app, body.tool, body.started, "after")
    assert reasons(agent) == ["aborted"]
    assert "ignored GeneratorExit too; dropped" in caplog.text
    await run(agent, "again")  # the agent is usable at once
    assert reasons(agent) == ["aborted", "completed"]
    body.release.set()
    await app.aclose()
    assert body.cleaned == []  # dropped: it never resumes


class Shielded:
    """An async tool that shields itself from cancellation until released."""

    def __init__(self, name: str = "shielded", timeout: float | None = None) -> None:
        self.started = anyio.Event()
        self.release = anyio.Event()
        self.cleaned: list[str] = []

        async def body() -> str:
            """Wait for the release, shielded from any cancellation."""
            self.started.set()
            try:
                with anyio.CancelScope(shield=True):
                    await self.release.wait()
                return "released"
            finally:
                self.cleaned.append("finally ran")

        body.__name__ = name
        self.tool: Tool = tool(name=name, timeout=timeout)(body)


async def test_a_shielded_body_past_the_grace_after_a_cancel_is_closed_and_the_turn_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = make_app()
    app.ctx.tools.disposal_grace = 0.05
    body = Shielded()
    caplog.set_level(logging.WARNING, logger="agentloop_nb.tools")
    agent = await cancel_while_running(app, body.tool, body.started, "never")
    assert reasons(agent) == ["aborted"]
    assert data(agent, "tool/result")[0]["error"]["code"] == "ABORTED"
    assert body.cleaned == ["finally ran"]
    assert "abandoning tool body 'shielded'" in caplog.text
    await run(agent, "again")
    assert reasons(agent) == ["aborted", "completed"]
    await app.aclose()


async def test_a_shielded_body_past_its_timeout_and_the_grace_is_a_timeout() -> None:
    app = make_app()
    app.ctx.tools.disposal_grace = 0.05
    body = Shielded("slow_shielded", timeout=0.01)
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "slow_shielded", {})), text("after"))
    await run(agent)
    assert data(agent, "tool/result")[0]["error"]["code"] == "TOOL_TIMEOUT"
    assert reasons(agent) == ["completed"]
    assert body.cleaned == ["finally ran"]
    await app.aclose()


async def test_aclose_returns_while_a_shielded_body_holds_on() -> None:
    app = make_app()
    app.ctx.tools.disposal_grace = 0.05
    body = Shielded()
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "shielded", {})), text("never"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await body.started.wait()
        await app.aclose()
    assert reasons(agent) == ["disposed"]
    assert body.cleaned == ["finally ran"]


async def test_a_body_that_shields_its_cleanup_after_a_cancel_keeps_its_outcome() -> None:
    """After the cancellation reached it, the body awaits more (shielded) before it returns:
    within the grace, its own outcome is the call's."""
    app = make_app()
    started, release, cleanup = anyio.Event(), anyio.Event(), anyio.Event()
    reached: list[str] = []

    @tool
    async def tidy() -> str:
        """On cancellation, finish the cleanup (shielded), then say so."""
        started.set()
        try:
            await release.wait()
            return "released"
        except asyncio.CancelledError:
            reached.append("cancelled")
            with anyio.CancelScope(shield=True):
                await cleanup.wait()
            return "cleaned up"

    register(app, tidy)
    agent, _ = new_agent(app, combine(tool_call("c1", "tidy", {})), text("never"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await started.wait()
    agent.cancel()
    with anyio.fail_after(WAIT):
        while not reached:  # the cancellation is delivered at the body's await
            await anyio.lowlevel.checkpoint()
    cleanup.set()
    with anyio.fail_after(WAIT):
        await agent.when_idle()
    assert data(agent, "tool/result")[0]["content"] == "cleaned up"
    assert reasons(agent) == ["aborted"]
    await app.aclose()
