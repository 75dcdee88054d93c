"""Dask tool engine: ``@tool(executor="dask")`` bodies run in worker processes of a
``distributed`` cluster; cancel, a killed worker and scope disposal.

Starting a cluster on two shared cores is slow: one cluster serves the module (through the
plugin's ``address``) and one test lets the plugin start (and close) its own."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from _loop_helpers import OPTIONS, data, make_app, scripted, wait_for

from agentloop_nb.app import App
from agentloop_nb.jupyter import ToolPoolView
from agentloop_nb.testing import text, tool_call
from agentloop_nb.tools import ToolExecution, tool

distributed = pytest.importorskip("distributed")

from agentloop_nb.plugins.dask import DaskToolsPlugin  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@tool(executor="dask")
def where(x: int) -> dict[str, int]:
    """Report the process the body ran in and double ``x``."""
    return {"pid": os.getpid(), "doubled": 2 * x}


@tool(executor="dask")
def nap(seconds: float) -> str:
    """Sleep in the worker."""
    time.sleep(seconds)
    return "woke"


@tool(executor="dask")
def crash() -> str:
    """Kill the worker process running this body."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    cluster = distributed.LocalCluster(
        processes=True,
        n_workers=2,
        threads_per_worker=1,
        dashboard_address=":0",
        scheduler_kwargs={"allowed_failures": 0},
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.fixture
async def app(scheduler: str) -> AsyncIterator[App]:
    app = make_app()
    app.ctx.tools.register(where)
    app.ctx.tools.register(nap)
    app.ctx.tools.register(crash)
    app.ctx.plugin(DaskToolsPlugin, {"address": scheduler})
    yield app
    await app.aclose()


async def idle(agent: Any) -> None:
    """Wait for the agent to go idle; the guard allows for a cluster starting on 2 cores."""
    with anyio.fail_after(90):
        await agent.when_idle()


def result_of(agent: Any) -> dict[str, Any]:
    (result,) = data(agent, "tool/result")
    return dict(result)


async def test_a_dask_body_runs_in_a_worker_process_of_the_local_cluster_closed_with_the_scope() -> (
    None
):
    app = make_app()
    app.ctx.tools.register(where)
    app.ctx.plugin(DaskToolsPlugin)
    scripted(app, tool_call("c1", "where", {"x": 21}), text("done"))
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    assert app.ctx.dask.cluster is None  # started on first use, not when applied
    agent.followup("go")
    await idle(agent)
    result = result_of(agent)
    assert result["is_error"] is False, result
    assert '"doubled":42' in result["content"].replace(" ", "")
    pid = int(result["content"].split('"pid":')[1].split(",")[0].strip())
    assert pid != os.getpid()
    cluster = app.ctx.dask.cluster
    assert str(cluster.status.name) == "running"
    link = app.ctx.dask.dashboard_link
    assert link.startswith("http")
    pool = ToolPoolView(agent)  # the pool view links the dashboard
    try:
        assert f'href="{link}"' in pool.table.value and "Dask dashboard" in pool.table.value
    finally:
        pool.close()
    await app.aclose()
    assert str(cluster.status.name) == "closed"


async def test_cancelling_a_turn_cancels_the_dask_future_and_ends_the_call_aborted(
    app: App,
) -> None:
    scripted(app, tool_call("c1", "nap", {"seconds": 30}))
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    agent.followup("go")
    await wait_for(agent, lambda e: e.type == "tool/call")
    client = await app.ctx.dask.connect()
    with anyio.fail_after(60):
        while not client.futures:  # submitted once the body's task runs
            await anyio.wait_all_tasks_blocked()
    agent.cancel()
    await idle(agent)
    result = result_of(agent)
    assert result["error"]["code"] == "ABORTED"
    assert not client.futures  # the cancelled future was released


async def test_a_killed_worker_ends_the_call_tool_error_naming_the_worker(app: App) -> None:
    scripted(app, tool_call("c1", "crash", {}), text("done"))
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    agent.followup("go")
    await idle(agent)
    result = result_of(agent)
    assert result["error"]["code"] == "TOOL_ERROR"
    assert "Dask worker tcp://" in result["error"]["message"]
    assert "was lost while running tool 'crash'" in result["error"]["message"]


async def test_a_dask_tool_without_the_plugin_is_a_tool_error_naming_it() -> None:
    app = make_app()
    app.ctx.tools.register(where)
    scripted(app, tool_call("c1", "where", {"x": 1}), text("done"))
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    agent.followup("go")
    await idle(agent)
    await app.aclose()
    result = result_of(agent)
    assert result["error"]["code"] == "TOOL_ERROR"
    assert "DaskToolsPlugin" in result["error"]["message"]


def test_a_dask_body_cannot_take_the_tool_execution() -> None:
    def body(x: int, execution: ToolExecution) -> int:
        return x

    with pytest.raises(TypeError, match="another process"):
        tool(executor="dask")(body)
    with pytest.raises(ValueError, match="executor"):
        tool(executor="cloud")(body)  # type: ignore[call-overload]
