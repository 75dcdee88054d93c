"""What a turn does once, done without repeated work (docs/architecture.md "Turn, session 16"),
with the same events, hooks and flushes: the turn end skips its shield only while its flushes
cannot suspend (nobody listens to ``session/flush``), and a listener that appears on the way
is still awaited, under the shield; the package's cancel scopes are anyio's own."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _loop_helpers import new_agent, reasons, run

from agentloop_nb.app import App
from agentloop_nb.signals import cancel_scope
from agentloop_nb.testing import text

pytestmark = pytest.mark.anyio


async def test_a_flush_listener_added_at_turn_end_is_awaited_by_the_second_flush() -> None:
    # Nobody listens to session/flush when the turn ends, so the first flush cannot suspend;
    # a turn/end listener then starts listening: the second flush must dispatch to it.
    app = App(None)
    try:
        agent, _ = new_agent(app, text("one"), text("two"))
        flushed: list[int] = []

        async def on_flush(payload: Any) -> None:
            await anyio.lowlevel.checkpoint()  # a listener that suspends
            flushed.append(len(payload.session.events))

        def on_event(payload: Any) -> None:
            if payload.event.type == "turn/end" and not flushed:
                app.ctx.on("session/flush", on_flush)

        app.ctx.on("session/event", on_event)
        await run(agent)
        assert flushed == [len(agent.session.events)]  # after turn/end, once
        await run(agent, "again")  # from the start now: both flushes reach it
        assert len(flushed) == 3 and flushed[-1] == len(agent.session.events)
        assert reasons(agent) == ["completed", "completed"]
    finally:
        await app.aclose()


async def test_session_flush_waits_says_whether_a_flush_would_dispatch() -> None:
    app = App(None)
    try:
        agent, _ = new_agent(app, text("one"))
        assert not agent.session.flush_waits()

        async def on_flush(payload: Any) -> None:
            return None

        dispose = app.ctx.on("session/flush", on_flush)
        assert agent.session.flush_waits()
        dispose()
        assert not agent.session.flush_waits()
    finally:
        await app.aclose()


async def test_the_package_cancel_scope_is_anyios_own_with_its_shield() -> None:
    made = anyio.CancelScope(shield=True)
    scope = cancel_scope(shield=True)
    assert type(scope) is type(made) and scope.shield and not cancel_scope().shield
    with cancel_scope() as outer:
        with cancel_scope(shield=True):
            outer.cancel()
            await anyio.lowlevel.checkpoint()  # shielded: not cancelled here
        await anyio.lowlevel.checkpoint()  # cancelled here
        pytest.fail("the outer scope was cancelled")
    assert outer.cancelled_caught
