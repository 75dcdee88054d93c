"""Known-fault drills: hostile MCP servers over stdio (the test server's modes in
``tests/_mcp_server.py``). Each gives a clear error naming the server, in bounded time and
memory, and leaves no process behind — not even a grandchild the server started."""

from __future__ import annotations

from pathlib import Path

import pytest
from _drills import bounded, cancel_promptly, turn_ends
from _loop_helpers import data, new_agent, run
from _mcp_helpers import command, wait_dead, wait_file

from agentloop_nb.app import App
from agentloop_nb.mcp import MCPConnectError, MCPServer
from agentloop_nb.testing import text, tool_call

# Each drill starts an MCP server process (the SDK takes seconds to import on a busy machine).
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


@pytest.mark.parametrize(
    ("mode", "handshake", "expected"),
    [
        ("garbage", 10.0, "does not speak MCP"),
        ("silent", 1.0, "no MCP handshake within 1 s"),
    ],
    ids=["garbage-on-stdout", "never-answers-initialize"],
)
async def test_a_server_that_does_not_speak_mcp_fails_clearly_and_leaves_no_process(
    mode: str, handshake: float, expected: str
) -> None:
    async with bounded(seconds=90, megabytes=None), App() as app:
        with pytest.raises(MCPConnectError) as info:
            await app.ctx.mcp.connect(
                MCPServer("hostile", command=command(mode), startup_timeout=handshake)
            )
        assert "MCP server 'hostile'" in str(info.value) and expected in str(info.value)
        assert app.ctx.mcp.get("hostile") is None
        assert not [t for t in app.ctx.tools.definitions() if t.name.startswith("hostile__")]


async def test_a_server_with_ten_thousand_tools_connects_in_bounded_time() -> None:
    async with bounded(seconds=120, megabytes=None), App() as app:
        # The server itself needs long to register 10,000 tools before it answers initialize.
        many = MCPServer("many", command=command("many", "10000"), startup_timeout=110)
        await app.ctx.mcp.connect(many)
        names = {t.name for t in app.ctx.tools.definitions()}
        assert {"many__t0", "many__t9999"} <= names and len(names) >= 10_000
        agent, _ = new_agent(app, tool_call("c1", "many__t9999", {}), text("ok"))
        await run(agent)
        assert data(agent, "tool/result")[0]["content"] == "9999"


async def test_a_server_crashing_mid_call_is_an_error_result_and_the_agent_goes_on() -> None:
    async with bounded(seconds=90, megabytes=None), App() as app:
        await app.ctx.mcp.connect(MCPServer("t", command=command()))
        agent, _ = new_agent(app, tool_call("c1", "t__crash", {}), text("it crashed"))
        await run(agent)
        (result,) = data(agent, "tool/result")
        assert (
            result["error"]["code"] == "TOOL_ERROR" and "closed the connection" in result["content"]
        )
        assert [e["kind"] for e in turn_ends(agent)] == ["completed"]


async def test_a_call_to_a_hanging_tool_is_cancelled_within_two_seconds(tmp_path: Path) -> None:
    marker = tmp_path / "wait"
    async with bounded(seconds=90, megabytes=None), App() as app:
        await app.ctx.mcp.connect(MCPServer("t", command=command()))
        agent, _ = new_agent(app, tool_call("c1", "t__wait", {"marker": str(marker)}), text("-"))
        agent.followup("go")
        await wait_file(Path(f"{marker}.started"))
        await cancel_promptly(agent)
        assert data(agent, "tool/result")[0]["error"]["code"] == "ABORTED"


async def test_a_grandchild_the_server_started_does_not_outlive_the_connection(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    async with bounded(seconds=90, megabytes=None) as drill:
        async with App() as app:
            await app.ctx.mcp.connect(MCPServer("g", command=command("grandchild", str(pid_file))))
            grandchild = int(await wait_file(pid_file))
            drill.watch(grandchild)  # reparented away from us once the server exits
        await wait_dead(grandchild)  # App.aclose() ended the server's whole process group
