"""A pooled call's dispatch: the body's own coroutine while nothing listens to
``tools/execute`` (``_dispatch.dispatch_now``), the ``dispatch`` phase as before once
something does; whether anything does is decided per call."""

from __future__ import annotations

from typing import Any

import anyio.lowlevel
import pytest
from _loop_helpers import data, new_agent, register, run

from agentloop_nb.app import App
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


async def test_pooled_calls_dispatched_after_a_tools_execute_listener_appears_go_through_it(
    app: App,
) -> None:
    # A pooled call's dispatch takes its straight path (the body's own coroutine) only while
    # nothing listens to tools/execute; whether anything does is decided per call.
    seen: list[tuple[str, str]] = []

    def on_execute(payload: Any, next: Any) -> Any:
        seen.append(("execute", payload.call_id))
        return next()

    @tool(concurrency_safe=True)
    async def listen() -> str:
        """Start listening."""
        app.ctx.on("tools/execute", on_execute)
        app.ctx.on("tools/settled", lambda p: seen.append(("settled", p.execution.call_id)))
        return "listening"

    @tool(concurrency_safe=True)
    async def later() -> str:
        """Answer."""
        await anyio.lowlevel.checkpoint()
        return "later"

    register(app, listen)
    register(app, later)
    script = combine(tool_call("c1", "listen", {}), tool_call("c2", "later", {}))
    agent, _ = new_agent(app, combine(script, tool_call("c3", "later", {})), text("done"))
    await run(agent)
    # c1 was already dispatched (its own settling is announced: the view is live); c2 and c3
    # overlap, each through the waterfall before it settles
    assert seen[0] == ("settled", "c1")
    assert sorted(seen[1:]) == [
        ("execute", "c2"),
        ("execute", "c3"),
        ("settled", "c2"),
        ("settled", "c3"),
    ]
    for call in ("c2", "c3"):
        assert seen.index(("execute", call)) < seen.index(("settled", call))
    assert [d["content"] for d in data(agent, "tool/result")] == ["listening", "later", "later"]
