"""Every MCP server process the library starts is reaped, and its asyncio transport closed, by
the time the connection (or the App) reports closed: after a failed start, a handshake timeout,
a close during the handshake, a removal, and for a server's own child processes."""

from __future__ import annotations

import gc
import os
import sys
import warnings
from pathlib import Path

import anyio
import pytest
from _mcp_helpers import WAIT, alive, command, wait_dead, wait_file

from agentloop_nb.app import App
from agentloop_nb.mcp import MCPConnectError, MCPServer

pytestmark = pytest.mark.anyio

SILENT = [sys.executable, "-c", "import time; time.sleep(60)"]  # never answers the handshake


def children() -> set[int]:
    """This process's child processes, zombies included (an unreaped child is a leak too)."""
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            found.update(int(p) for p in (task / "children").read_text().split())
        except OSError:  # the thread ended while we looked
            continue
    return found


def assert_nothing_left(before: set[int]) -> None:
    left = children() - before
    assert not left, f"MCP server processes left behind: {sorted(left)}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()  # an unclosed subprocess transport warns when it is collected
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, leaks


@pytest.mark.parametrize(
    ("cmd", "startup", "expected"),
    [
        (["/nonexistent/mcp-binary"], 10.0, "cannot start"),
        (command("die"), 10.0, "refuses to start"),
        (command("garbage"), 10.0, "does not speak MCP"),
        (SILENT, 0.5, "no MCP handshake within 0.5 s"),
    ],
    ids=["missing-command", "exits-at-startup", "speaks-garbage", "handshake-timeout"],
)
async def test_a_failed_start_leaves_no_process_or_transport(
    cmd: list[str], startup: float, expected: str
) -> None:
    before = children()
    async with App() as app:
        with anyio.fail_after(WAIT), pytest.raises(MCPConnectError, match=expected):
            await app.ctx.mcp.connect(MCPServer("broken", command=cmd, startup_timeout=startup))
        assert_nothing_left(before)


async def test_closing_during_the_handshake_leaves_no_process_or_transport() -> None:
    before = children()
    async with App() as app:
        connection = app.ctx.mcp.start(MCPServer("slow", command=SILENT, startup_timeout=30))
        with anyio.fail_after(WAIT):
            await app.ctx.mcp.remove("slow")
        assert connection.state == "closed"
        assert_nothing_left(before)


async def test_cancelling_connect_leaves_no_process_or_transport() -> None:
    before = children()
    async with App() as app:
        with anyio.move_on_after(0.2):
            await app.ctx.mcp.connect(MCPServer("slow", command=SILENT, startup_timeout=30))
    # Cancelling connect closes the connection; App.aclose() waits for it to end.
    assert_nothing_left(before)


async def test_app_close_waits_for_a_removed_server_still_shutting_down() -> None:
    before = children()
    app = App()
    await app.ctx.mcp.connect(MCPServer("t", command=command()))
    app.ctx.mcp.remove("t")  # the shutdown runs in the background; nobody awaits it
    await app.aclose()
    assert_nothing_left(before)


async def test_a_server_that_exits_at_once_takes_its_grandchild_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    async with App() as app:
        dispose = await app.ctx.mcp.connect(
            MCPServer("g", command=command("grandchild", str(pid_file)))
        )
        grandchild = int(await wait_file(pid_file))
        assert alive(grandchild)
        with anyio.fail_after(WAIT):
            await dispose()
        # The grandchild was signalled with the group; it is reaped by init (not us), so its
        # last moments are only polled (it would sleep 600 s if it were missed).
        await wait_dead(grandchild)
