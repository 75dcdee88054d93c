"""A pooled tool call leaves no reference cycle behind: what it allocates (its execution,
controller, driven body, context copy, result) is freed by reference counting when the call is
over, not left for the cyclic garbage collector (whose collections every pooled call would pay
for; benchmarks/README.md "Pool (session 12)")."""

from __future__ import annotations

import gc

import anyio
import anyio.lowlevel
import pytest
from _loop_helpers import idle, new_agent, register

from agentloop_nb.app import App
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import ToolExecution, tool

pytestmark = pytest.mark.anyio


@tool(concurrency_safe=True)
async def nap(i: int) -> str:
    """Yield once (the body suspends, as every real pooled body does)."""
    await anyio.lowlevel.checkpoint()
    return "ok"


@tool(concurrency_safe=True, timeout=30.0)
async def timed(execution: ToolExecution) -> str:
    """Suspend under a timeout (its timer watched too), then return."""
    await anyio.lowlevel.checkpoint()
    return "ok" if not execution.signal.aborted else "aborted"


async def _cyclic_garbage(calls: int, name: str) -> int:
    """Objects the cyclic GC finds unreachable after a turn of ``calls`` pooled calls (the
    automatic collector off during the turn, so none is collected behind our back)."""
    app = App({"max_parallel_tool_calls": 4})
    register(app, nap, timed)
    script = combine(
        *(tool_call(f"c{i}", name, {"i": i} if name == "nap" else {}) for i in range(calls))
    )
    agent, _ = new_agent(app, script, text("done"))
    gc.collect()
    gc.disable()
    try:
        agent.followup("go")
        await idle(agent)
        found = gc.collect()
    finally:
        gc.enable()
    results = [e for e in agent.session.events if e.type == "tool/result"]
    assert len(results) == calls and not any(e.data["is_error"] for e in results)
    await app.aclose()
    return found


@pytest.mark.parametrize("name", ["nap", "timed"])
async def test_a_pooled_call_leaves_no_cyclic_garbage(name: str) -> None:
    few = await _cyclic_garbage(8, name)
    many = await _cyclic_garbage(48, name)
    # 40 more calls: before, each left ~16 objects in cycles (its driven body through a bound
    # method of itself; its execution, result and argument model through the step)
    assert many - few < 40, (few, many)
