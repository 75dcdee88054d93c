"""Helpers for the MCP tests: the test server's command, process liveness, file waits."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio

SERVER = str(Path(__file__).resolve().parent / "_mcp_server.py")
WAIT = 15.0  # seconds: a guard against a hang (a server process starts in ~1 s)


def command(mode: str = "stdio", *args: str) -> list[str]:
    """The test server started as ``mode`` (``stdio``, ``http PORT``, ``garbage``, ``die``)."""
    return [sys.executable, SERVER, mode, *args]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead: it has exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


async def wait_file(path: Path) -> str:
    """The text of ``path`` once another process wrote it. Polled: a file written by a
    separate process has no event this process could wait on."""
    target = anyio.Path(path)
    with anyio.fail_after(WAIT):
        while not await target.exists():
            await anyio.sleep(0.02)
    return await target.read_text()


PEERS = Path(__file__).resolve().parent / "peers"
EVERYTHING = (
    PEERS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)


def everything_command() -> list[str]:
    """The npm reference server ``@modelcontextprotocol/server-everything`` over stdio (skips
    the test when node or the package is missing, like the other npm peers)."""
    import shutil

    import pytest

    node = shutil.which("node")
    if node is None:
        pytest.skip("the npm MCP reference server needs Node.js: `node` is not on PATH")
    if not EVERYTHING.exists():
        pytest.skip(f"{EVERYTHING} is missing: run `npm ci --prefix tests/peers`")
    return [node, str(EVERYTHING), "stdio"]


async def wait_dead(pid: int) -> None:
    """Wait until process ``pid`` has exited (for teardowns that finish in the background;
    another process's exit has no event here, so it is polled under a deadline)."""
    with anyio.fail_after(WAIT):
        while alive(pid):
            await anyio.sleep(0.02)
