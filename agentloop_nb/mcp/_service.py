"""``MCPService``: the ``ctx.mcp`` service (connect MCP servers, list and remove them).

Ownership: a connection made through a context belongs to that context's scope: its teardown is
one of the scope's effects, returning a future the scope's ``aclose()`` awaits, so disposing the
scope (re-running the plugin cell that connected, ``app.aclose()``) closes the session and ends
the server process. The tools register through the same context (or through the agent's
context with ``agent=``), so they disappear with the connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .._disposer import Disposer
from .._scoped import OwnedCopy
from ..errors import InvalidTypeError, InvalidValueError, NotFoundError, UsageError
from ._connection import MCPConnection, require_sdk
from ._server import MCPServer

__all__ = ["MCPService"]


class MCPService(OwnedCopy):
    """The ``ctx.mcp`` service. ``MCPService()`` is the shared directory of live connections
    (server name → :class:`MCPConnection`); ``ctx.mcp`` is a view whose connections belong to
    ``ctx``'s scope (``__bind__`` from :class:`OwnedCopy`: the view shares the directory).
    Server names are unique across the directory (they prefix tool names).
    """

    __slots__ = ("_connections", "_owner", "_runners")

    def __init__(self, ctx: Any = None) -> None:
        self._connections: dict[str, MCPConnection] = {}
        # Strong references to the runner tasks (the loop keeps weak ones) until they end,
        # also after their connection left the directory and is still shutting down.
        self._runners: set[asyncio.Task[None]] = set()
        self._owner: Any = None

    async def connect(self, server: MCPServer, agent: Any = None) -> Disposer:
        """Start ``server``, wait for its handshake and tool listing, register its tools as
        ``f"{server.name}__{tool}"`` and return the disposer that closes it again.

        ``agent`` (an agent or its id): only that agent sees the tools; ``None``: every agent
        (or, through an agent's ``ctx``, that agent). Raises :class:`MCPConnectError` naming the
        server when it cannot start, crashes, times out or does not speak MCP (nothing stays
        registered), ``ValueError`` for a name already connected, ``ImportError`` naming the
        ``agentloop_nb[mcp]`` extra without the SDK. Cancelling the call closes the connection.
        """
        connection = self.start(server, agent)
        try:
            await connection.ready()
        except BaseException:
            connection.disposer()
            raise
        return connection.disposer

    def start(self, server: MCPServer, agent: Any = None) -> MCPConnection:
        """Begin connecting ``server`` in the background and return its :class:`MCPConnection`
        at once (``await connection.ready()`` waits, raising like :meth:`connect`). The
        synchronous form, for plugin cells and magics; the tools appear once it is ready.

        Raises ``ImportError`` without the SDK, ``ValueError`` for a name already connected,
        ``TypeError`` for something other than an :class:`MCPServer`, ``RuntimeError`` with no
        running event loop, ``InactiveContextError`` through a disposed context.
        """
        require_sdk()
        if not isinstance(server, MCPServer):
            raise InvalidTypeError(f"expected an MCPServer, got {server!r}")
        owner = self._require_owner()
        owner.fiber.check_active("connect an MCP server")
        if server.name in self._connections:
            raise InvalidValueError(
                f"an MCP server named {server.name!r} is connected; remove it first "
                f"(ctx.mcp.remove({server.name!r}) or %agent mcp remove {server.name})"
            )
        asyncio.get_running_loop()  # RuntimeError here, before anything is registered
        target, register_ctx = self._target(owner, agent)
        connection = MCPConnection(server, register_ctx.tools.register, target)
        connections = self._connections

        def teardown() -> asyncio.Future[None]:
            if connections.get(server.name) is connection:
                del connections[server.name]
            return connection.close()

        disposer = owner.effect(lambda: teardown)
        connections[server.name] = connection
        connection.disposer = disposer
        # Not fiber.track: disposal would cancel the runner at any await, possibly inside the
        # SDK's process spawn; the teardown above asks it to leave and the scope awaits that.
        runner = connection.start()
        self._runners.add(runner)
        runner.add_done_callback(self._runners.discard)
        if target is not None and register_ctx is not owner:
            register_ctx.effect(lambda: disposer)  # disposing the agent closes it too
        return connection

    async def wait_closed(self) -> None:
        """Wait until every connection started through this service has ended, also those
        already removed from the directory and still shutting down (their server processes
        reaped). Does not close anything itself."""
        while self._runners:
            await asyncio.gather(*self._runners, return_exceptions=True)

    def get(self, name: str) -> MCPConnection | None:
        """The live connection named ``name`` (any state but closed), or ``None``."""
        return self._connections.get(name)

    def list(self) -> list[MCPConnection]:
        """Every live connection, in connection order."""
        return list(self._connections.values())

    def remove(self, name: str) -> asyncio.Future[None]:
        """Close the connection named ``name`` (tools unregistered at once); the returned
        future is done when the server process or HTTP session is gone. ``KeyError`` for an
        unknown name."""
        connection = self._connections.get(name)
        if connection is None:
            raise NotFoundError(f"no MCP server named {name!r} is connected")
        result = connection.disposer()
        return result if result is not None else connection.close()

    def _require_owner(self) -> Any:
        if self._owner is None:
            raise UsageError("use the MCP service through a context: ctx.mcp.connect(...)")
        return self._owner

    @staticmethod
    def _target(owner: Any, agent: Any) -> tuple[Any, Any]:
        """``(agent the tools are for, context to register them through)``."""
        if agent is None:
            return getattr(owner, "agent", None), owner
        if isinstance(agent, str):
            # The loop knows an agent from ``create`` on; the directory once it is entered.
            found = owner.agent_loop.get(agent) or owner.agents.get(agent)
            if found is None:
                raise InvalidValueError(f"no agent with id {agent!r}")
            agent = found
        agent_ctx = getattr(agent, "ctx", None)
        if agent_ctx is None:
            raise InvalidTypeError(f"expected an agent (or its id), got {agent!r}")
        return agent, agent_ctx

    def __repr__(self) -> str:
        return f"<MCPService servers={list(self._connections)!r}>"
