"""MCP tool servers on the official ``mcp`` SDK (the ``agentloop_nb[mcp]`` extra).

The App provides ``ctx.mcp`` (:class:`MCPService`)::

    from agentloop_nb.mcp import MCPServer

    files = MCPServer("files", command=["python", "server.py"])        # stdio
    remote = MCPServer("remote", url="http://127.0.0.1:8000/mcp")      # streamable HTTP
    disposer = await ctx.mcp.connect(files)   # tools appear as "files__<tool>"

Importing this package does not import the SDK; connecting without it raises ``ImportError``
naming the extra to install.
"""

from __future__ import annotations

from ._connection import MCPConnectError, MCPConnection
from ._server import MCPServer
from ._service import MCPService

__all__ = ["MCPConnectError", "MCPConnection", "MCPServer", "MCPService"]
