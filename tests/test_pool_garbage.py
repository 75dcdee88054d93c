"""A pooled tool call leaves no reference cycle behind: what it allocates (its execution,
controller, driven body, context copy, result) is freed by reference counting when the call is
over, not left for the cyclic garbage collector (whose collections every pooled call would pay
for; benchmarks/README.md "Pool (session 12)")."""

from __future__ import annotations

import gc
from collections import Counter

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


# what one pooled call allocates and, before, left in reference cycles (its driven body
# through a bound method of itself; its execution, result and argument model through the step)
CALL_GRAPH = {"ToolExecution", "ToolResult", "_Driven", "nap_arguments", "timed_arguments"}


async def _cyclic_garbage(calls: int, name: str) -> Counter[str]:
    """What the cyclic GC finds unreachable after a turn of ``calls`` pooled calls, by type
    (the automatic collector off during the turn, so none is collected behind our back)."""
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
        gc.set_debug(gc.DEBUG_SAVEALL)  # keep what it finds in gc.garbage, to be read
        gc.collect()
        found = Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    results = [e for e in agent.session.events if e.type == "tool/result"]
    assert len(results) == calls and not any(e.data["is_error"] for e in results)
    await app.aclose()
    return found


@pytest.mark.parametrize("name", ["nap", "timed"])
async def test_a_pooled_call_leaves_no_cyclic_garbage(name: str) -> None:
    found = await _cyclic_garbage(40, name)
    assert {kind: n for kind, n in found.items() if kind in CALL_GRAPH} == {}
