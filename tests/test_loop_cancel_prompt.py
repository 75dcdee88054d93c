"""Cancel is prompt: a cancelled turn ends ``aborted`` within 2 s even when a tool body ignores
the cancellation (an async body that swallows it or shields itself, a sync body blocked in its
thread), with that call's result ``ABORTED``; the agent is idle and usable at once. Disposal
keeps its own, longer grace period. The settings are the defaults unless a test says why."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread
import pytest
from _loop_helpers import (
    WAIT,
    Swallower,
    data,
    make_app,
    new_agent,
    reasons,
    register,
    run,
)

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.loop import Agent
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import Tool, ToolRuntime, tool

pytestmark = pytest.mark.anyio

PROMPT = 2.0  # seconds: the contract for a cancelled turn to end, whatever its tools do


@pytest.fixture
async def app() -> AsyncIterator[App]:
    app = make_app()
    yield app
    with anyio.fail_after(WAIT + 10):  # disposal keeps its (default 10 s) grace, never more
        await app.aclose()


class Logged(logging.Handler):
    """Sets ``seen`` once a record on ``agentloop_nb.tools`` contains ``text`` (the log line is
    the only sign a late result was dropped)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.seen = anyio.Event()
        self.logger = logging.getLogger("agentloop_nb.tools")

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()

    async def wait(self) -> None:
        try:
            with anyio.fail_after(WAIT):
                await self.seen.wait()
        finally:
            self.logger.removeHandler(self)

    def __enter__(self) -> Logged:
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)


async def cancel_promptly(agent: Agent, started: anyio.Event | threading.Event) -> float:
    """Start the agent's turn, cancel it once the tool body started; the seconds from the
    cancel until the agent is idle (fails beyond the 2 s contract)."""
    agent.followup("go")
    if isinstance(started, threading.Event):
        assert await anyio.to_thread.run_sync(started.wait, WAIT)
    else:
        with anyio.fail_after(WAIT):
            await started.wait()
    began = time.monotonic()
    agent.cancel()
    with anyio.fail_after(PROMPT):
        await agent.when_idle()
    return time.monotonic() - began


def results(agent: Agent) -> list[tuple[str, str | None]]:
    return [(d["call_id"], (d.get("error") or {}).get("code")) for d in data(agent, "tool/result")]


async def test_a_cancel_ends_the_turn_promptly_when_an_async_body_swallows_cancellation(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    assert app.ctx.tools.disposal_grace == 10.0  # the old wait a cancel used to take
    body = Swallower()
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "swallower", {})), text("again"))
    caplog.set_level(logging.WARNING, logger="agentloop_nb.tools")
    await cancel_promptly(agent, body.started)
    assert body.cancelled.is_set() and not body.finished
    assert reasons(agent) == ["aborted"] and agent.status == "idle"
    assert results(agent) == [("c1", "ABORTED")]
    assert body.cleaned == ["finally ran"]  # closed at its await: it holds nothing afterwards
    assert "abandoning tool body 'swallower'" in caplog.text
    assert "ctx.tools.cancel_grace" in caplog.text
    await run(agent, "next")  # usable for the next prompt
    assert reasons(agent) == ["aborted", "completed"]


async def test_a_cancel_ends_the_turn_promptly_when_an_async_body_shields_itself(
    app: App,
) -> None:
    release = anyio.Event()
    started = anyio.Event()

    @tool
    async def shielded() -> str:
        """Wait for the release, shielded from any cancellation."""
        started.set()
        with anyio.CancelScope(shield=True):
            await release.wait()
        return "released"

    register(app, shielded)
    agent, _ = new_agent(app, combine(tool_call("c1", "shielded", {})), text("again"))
    await cancel_promptly(agent, started)
    assert reasons(agent) == ["aborted"]
    assert results(agent) == [("c1", "ABORTED")]
    await run(agent, "next")
    assert reasons(agent) == ["aborted", "completed"]


class Blocked:
    """A sync tool blocked in its thread until the test releases it; it then returns a value
    (or raises, with ``fail``) that nobody is waiting for any more."""

    def __init__(self, *, fail: bool = False) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

        def blocked() -> str:
            """Block until released, whatever the signal says."""
            self.started.set()
            try:
                self.release.wait(WAIT)
                if fail:
                    raise ValueError("too late to matter")
                return "late value"
            finally:
                self.finished.set()

        self.tool: Tool = tool(blocked)


async def test_a_cancel_ends_the_turn_promptly_while_a_sync_body_blocks_and_drops_its_late_result(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    body = Blocked()
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "blocked", {})), text("again"))
    caplog.set_level(logging.INFO, logger="agentloop_nb.tools")
    with Logged("late result is dropped") as dropped:
        try:
            await cancel_promptly(agent, body.started)
            assert not body.finished.is_set()  # abandoned in its thread, still running
            assert reasons(agent) == ["aborted"] and results(agent) == [("c1", "ABORTED")]
            await run(agent, "next")  # usable while the abandoned body still runs
            assert reasons(agent) == ["aborted", "completed"]
        finally:
            body.release.set()
        await dropped.wait()
    assert "tool body 'blocked' returned a value" in caplog.text
    assert "late value" not in caplog.text  # dropped, not shown
    assert results(agent) == [("c1", "ABORTED")]  # the log never gets a second result


async def test_the_late_exception_of_an_abandoned_sync_body_is_dropped_with_a_log_line(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    body = Blocked(fail=True)
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "blocked", {})), text("never"))
    caplog.set_level(logging.INFO, logger="agentloop_nb.tools")
    with Logged("late result is dropped") as dropped:
        try:
            await cancel_promptly(agent, body.started)
        finally:
            body.release.set()
        await dropped.wait()
    assert "raised ValueError: too late to matter" in caplog.text
    assert results(agent) == [("c1", "ABORTED")]


async def test_cancelling_one_stubborn_call_is_prompt_and_the_turn_goes_on(app: App) -> None:
    body = Swallower()
    register(app, body.tool)
    agent, _ = new_agent(app, combine(tool_call("c1", "swallower", {})), text("after"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await body.started.wait()
    assert agent.cancel_tool("c1")
    with anyio.fail_after(PROMPT):
        await agent.when_idle()
    assert results(agent) == [("c1", "CANCELLED")]
    assert reasons(agent) == ["completed"]  # the model saw the result and answered


async def test_a_timeout_of_a_body_that_swallows_cancellation_takes_the_cancel_grace(
    app: App,
) -> None:
    app.ctx.tools.cancel_grace = 0.05  # the timeout's own anyio scope lands first: still short
    body = Swallower()
    register(app, tool(name="slow", timeout=0.01)(body.tool.fn))
    agent, _ = new_agent(app, tool_call("c1", "slow", {}), text("after"))
    agent.followup("go")
    with anyio.fail_after(PROMPT):
        await agent.when_idle()
    assert results(agent) == [("c1", "TOOL_TIMEOUT")]
    assert reasons(agent) == ["completed"]


async def test_disposal_keeps_its_longer_grace_for_a_body_that_ignores_cancellation() -> None:
    app = make_app()
    app.ctx.tools.cancel_grace = 0.01
    body = Swallower()
    register(app, body.tool)
    agent, _ = new_agent(app, tool_call("c1", "swallower", {}), text("never"))
    agent.followup("go")
    with anyio.fail_after(WAIT):
        await body.started.wait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(app.aclose)
        with anyio.fail_after(WAIT):
            await body.cancelled.wait()
        await anyio.sleep(0.2)  # twenty cancel graces pass: a disposal is still waiting
        assert body.cleaned == []
        body.release.set()
    assert body.finished and body.cleaned == ["finally ran"]  # it ended on its own
    assert reasons(agent) == ["disposed"]
    assert data(agent, "tool/result")[0]["content"] == "late"


def test_cancel_grace_is_shared_by_views_and_must_not_be_negative() -> None:
    ctx = Context()
    ctx.provide("tools", ToolRuntime(ctx))
    assert ctx.tools.cancel_grace == 1.0
    ctx.child(name="c").tools.cancel_grace = 0.25
    assert ctx.tools.cancel_grace == 0.25
    with pytest.raises(ValueError, match="cancel_grace must be a number of seconds >= 0"):
        ctx.tools.cancel_grace = -1
