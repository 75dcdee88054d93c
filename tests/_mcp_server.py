"""A small MCP server for the tests, on the SDK's own server class (``MCPServer``, ex-FastMCP).

Run as ``python tests/_mcp_server.py stdio`` or ``python tests/_mcp_server.py http PORT``.
``garbage`` prints lines that are not JSON-RPC; ``die`` exits at once with a message on stderr;
``silent`` reads its input and never answers (not even ``initialize``); ``many N`` serves N
extra tools ``t0``..``tN-1``; ``grandchild FILE`` first starts a long-sleeping grandchild in
its process group, writes its pid to FILE, then serves as ``stdio``.
Tools: ``echo`` (read-only), ``add``, ``pid``, ``image`` (a caption and a PNG), ``fail`` (isError), ``crash`` (the
process exits mid-call), ``wait`` (blocks until cancelled; writes ``MARKER.started`` and, when
the client's cancellation arrives, ``MARKER.cancelled``) and ``grow`` (adds a ``bonus`` tool and
sends ``tools/list_changed``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.types import ToolAnnotations

PNG_1PX = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)

server = MCPServer("agentloop-test")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Echo TEXT back."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def image() -> list[str | Image]:
    """A caption and a 1x1 PNG."""
    return ["a pixel", Image(data=PNG_1PX, format="png")]


@server.tool()
def fail(reason: str) -> str:
    """Always fails with REASON."""
    raise ValueError(reason)


@server.tool()
def crash() -> str:
    """The process dies while answering."""
    sys.stdout.flush()
    os._exit(3)


@server.tool()
async def wait(marker: str) -> str:
    """Block until cancelled."""
    await anyio.Path(marker + ".started").write_text(str(os.getpid()))
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        # Synchronous on purpose: nothing may be awaited in a cancelled scope.
        Path(marker + ".cancelled").write_text("cancelled")  # noqa: ASYNC240
        raise
    return "unreachable"


def bonus() -> str:
    """A tool that appears later."""
    return "bonus!"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the 'bonus' tool and tell the client."""
    server.add_tool(bonus)
    await ctx.session.send_tool_list_changed()
    return "grown"


def _numbered(i: int) -> Any:
    def numbered() -> int:
        return i

    return numbered


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "garbage":
        print("this is not JSON-RPC", flush=True)
        print("{still not", flush=True)
        time.sleep(60)
    elif mode == "die":
        print("fatal: the test server refuses to start", file=sys.stderr, flush=True)
        sys.exit(2)
    elif mode == "silent":
        sys.stdin.read()  # hold the pipe open, answer nothing, until the client closes it
    elif mode == "many":
        for i in range(int(sys.argv[2])):
            server.add_tool(_numbered(i), name=f"t{i}", description=f"Tool number {i}.")
        server.run()
    elif mode == "grandchild":
        import subprocess

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(sys.argv[2]).write_text(str(child.pid))
        server.run()
    elif mode == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()


if __name__ == "__main__":
    main()
