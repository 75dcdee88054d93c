"""MCP over streamable HTTP (the test server on 127.0.0.1, a free port) and an independent
server from the npm registry (``@modelcontextprotocol/server-everything`` over stdio), each
driven through a full agent turn."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import anyio
import pytest
from _loop_helpers import data, new_agent, run
from _mcp_helpers import WAIT, command, everything_command

from agentloop_nb.app import App
from agentloop_nb.mcp import MCPServer
from agentloop_nb.testing import combine, text, tool_call


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepting(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def http_url() -> Iterator[str]:
    """The test server over streamable HTTP; stopped (and reaped) after the test."""
    port = _free_port()
    proc = subprocess.Popen(
        command("http", str(port)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        # A separate process: polling its port is the only readiness signal there is.
        with anyio.from_thread.start_blocking_portal() as portal:
            portal.call(_wait_port, port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT)


async def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(WAIT):
        while not _accepting(port):
            if proc.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {proc.returncode}")
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_agent_calls_tools_over_streamable_http(http_url: str) -> None:
    async with App() as app:
        dispose = await app.ctx.mcp.connect(MCPServer("web", url=http_url, headers={"X-Test": "1"}))
        agent, _ = new_agent(
            app,
            combine(
                tool_call("c1", "web__echo", {"text": "hi"}), tool_call("c2", "web__image", {})
            ),
            text("done"),
        )
        await run(agent)
        echo, image = data(agent, "tool/result")
        assert echo["content"] == "echo: hi"
        assert [b["type"] for b in image["content"]] == ["text", "image"]
        await dispose()
        assert app.ctx.tools.lookup("web__echo") is None


@pytest.mark.anyio
async def test_http_server_killed_mid_call_gives_an_error_result_and_a_usable_agent(
    http_url: str,
) -> None:
    async with App() as app:
        await app.ctx.mcp.connect(MCPServer("web", url=http_url))
        agent, _ = new_agent(app, tool_call("c1", "web__crash", {}), text("noted"), text("ok"))
        await run(agent)
        (result,) = data(agent, "tool/result")
        assert result["is_error"] and result["error"]["code"] == "TOOL_ERROR"
        assert "MCP server 'web'" in result["content"]
        await run(agent, "still there?")
        assert agent.session.derive_messages()[-1].text == "ok"


@pytest.mark.anyio
@pytest.mark.peer
async def test_agent_uses_the_npm_reference_server() -> None:
    cmd = everything_command()
    async with App() as app:
        dispose = await app.ctx.mcp.connect(MCPServer("everything", command=cmd))
        assert app.ctx.tools.lookup("everything__get-sum").concurrency_safe is True
        agent, _ = new_agent(
            app,
            combine(
                tool_call("c1", "everything__echo", {"message": "hello"}),
                tool_call("c2", "everything__get-sum", {"a": 2, "b": 40}),
                tool_call("c3", "everything__get-tiny-image", {}),
            ),
            text("all done"),
        )
        await run(agent)
        echo, total, image = data(agent, "tool/result")
        assert echo["content"] == "Echo: hello"
        assert "42" in total["content"]
        assert any(b["type"] == "image" for b in image["content"])
        await dispose()
        assert app.ctx.mcp.list() == []
