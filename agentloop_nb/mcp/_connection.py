"""``MCPConnection``: one client session to one MCP server, living in a task its scope owns.

The official SDK's client (``mcp.ClientSession`` over ``stdio_client`` or
``streamable_http_client``) runs anyio task groups and cancel scopes. They are entered and left
by one runner task, created by :meth:`MCPConnection.start` for the owning scope (whose teardown
asks it to leave and awaits it), never by the cell or the tool call that happens to use the
session: tool calls only send requests through it, so no cancel scope is crossed between tasks.

Lifecycle: ``connecting`` → ``ready`` (tools registered) → ``closed``; or ``failed`` (could not
start, or the connection broke: the error names the server). :meth:`close` unregisters the tools
at once and asks the runner to leave the session, which closes stdin, waits for the process
and then ends its whole process group (:mod:`._stdio`, run shielded).
"""

from __future__ import annotations

import asyncio
import logging
import re
import tempfile
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import IO, Any

import anyio

from .._disposer import Disposer
from ..errors import AgentloopError, MissingDependencyError
from ..tools import TOOL_ERROR, Tool, ToolExecution, ToolResult, error_result
from ._results import to_tool_result
from ._server import MCPServer
from ._stdio import stdio_transport

__all__ = ["MCPConnectError", "MCPConnection", "require_sdk"]

_log = logging.getLogger("agentloop_nb.mcp")
_TOOL_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")
_STDERR_TAIL = 500

#: ``register(tool) -> Disposer``: how the connection adds one tool to the owning scope.
Register = Callable[[Tool], Disposer]


class MCPConnectError(RuntimeError, AgentloopError):
    """An MCP server could not be connected (command not found, crashed at startup, timed out,
    spoke something that is not MCP). The message names the server."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"MCP server {server!r}: {message}")
        self.server = server
        self.reason = message


def require_sdk() -> Any:
    """The ``mcp`` SDK module; ``ImportError`` saying which extra to install when absent."""
    try:
        import mcp
        import mcp.client.streamable_http
    except ImportError as exc:
        raise MissingDependencyError(
            "MCP servers need the official 'mcp' SDK: pip install 'agentloop_nb[mcp]'"
        ) from exc
    return mcp


def tool_name(server: str, tool: str) -> str:
    """``f"{server}__{tool}"`` with characters providers refuse replaced by ``_`` (64 max)."""
    return _TOOL_NAME_BAD.sub("_", f"{server}__{tool}")[:64]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _describe(exc: BaseException) -> str:
    leaves = [e for e in _leaves(exc) if not isinstance(e, asyncio.CancelledError)] or [exc]
    first = leaves[0]
    text = str(first) or type(first).__name__
    return f"{type(first).__name__}: {text}"


class MCPConnection:
    """One server's live session: its state, its registered tools, and the calls through it.

    Attributes: ``server`` (:class:`MCPServer`), ``state`` (``"connecting"``, ``"ready"``,
    ``"failed"``, ``"closed"``), ``error`` (why it failed, naming the server), ``tools`` (the
    registered tool names), ``agent`` (the agent that sees the tools, ``None``: every agent).
    """

    def __init__(self, server: MCPServer, register: Register, agent: Any = None) -> None:
        self.server = server
        self.agent = agent
        self.state = "connecting"
        self.error: str | None = None
        self.tools: tuple[str, ...] = ()
        self._register = register
        self._registered: list[Disposer] = []
        self._session: Any = None
        self._closing = False
        self._refresh = False
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = loop.create_future()
        self._closed: asyncio.Future[None] = loop.create_future()
        self._startup: anyio.CancelScope | None = None
        self._garbage: str | None = None
        self._stderr: IO[str] | None = None
        self._installed = asyncio.Event()  # replaced at every install: wakes wait_for_tools
        self.task: asyncio.Task[None] | None = None
        #: Closes the connection (set by the service: an effect of the owning scope).
        self.disposer = Disposer(self.close)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        """Create the runner task. The owning scope ends it through :meth:`close` (an effect
        whose returned future the scope awaits); the caller keeps a strong reference."""
        task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp:{self.server.name}")
        task.add_done_callback(self._finished)
        self.task = task
        return task

    async def wait_for_tools(self, predicate: Callable[[tuple[str, ...]], Any]) -> tuple[str, ...]:
        """Wait until ``predicate(self.tools)`` is true (checked now and after every tool
        listing, e.g. the refresh a ``tools/list_changed`` triggers); returns the tools.
        Raises :class:`MCPConnectError` when the connection ends first."""
        while not predicate(self.tools):
            if self._closed.done() or self.state == "failed":
                raise MCPConnectError(self.server.name, self.error or "the connection is closed")
            waiter: asyncio.Future[Any] = asyncio.ensure_future(self._installed.wait())
            try:
                await asyncio.wait([waiter, self._closed], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
        return self.tools

    async def ready(self) -> None:
        """Wait until the tools are registered. Raises :class:`MCPConnectError` when the server
        could not be connected (or the connection was closed first). Cancelling the wait leaves
        the connection alone."""
        await asyncio.shield(self._ready)

    def close(self) -> asyncio.Future[None]:
        """Unregister the tools now and end the session; returns a future done once the server
        process (or HTTP session) is gone. Idempotent; dropping the future is safe."""
        self._closing = True
        self._unregister()
        self._wake.set()
        if self._startup is not None:
            # Still in the handshake: end it, then the runner leaves the transport normally
            # (cancelling the task itself could land inside the SDK's process spawn).
            self._startup.cancel()
        if self.task is None and not self._closed.done():
            self._closed.set_result(None)
        return self._closed

    def _finished(self, task: asyncio.Task[None]) -> None:
        if not self._ready.done():
            self._ready.set_exception(
                MCPConnectError(self.server.name, "closed before it was ready")
            )
            self._ready.exception()  # mark retrieved: nobody may be waiting
        if self.state != "failed":
            self.state = "closed"
        # A failed connection keeps its tools until it is closed, so the model reads "not
        # connected (why)" instead of an unknown tool.
        if not self._closed.done():
            self._closed.set_result(None)

    async def _run(self) -> None:
        try:
            await self._serve()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if self._closing:
                return  # closed on purpose; whatever the shutdown raised is not news
            known = [e for e in _leaves(exc) if isinstance(e, MCPConnectError)]
            was_ready = self._ready.done()
            self._fail(known[0].reason if known else self._failure(exc))
            if was_ready:  # nobody awaits the outcome any more: say it somewhere
                _log.warning("MCP server %r: %s", self.server.name, self.error)
        finally:
            self._session = None
            if self._stderr is not None:
                self._stderr.close()

    def _fail(self, message: str) -> None:
        self.state = "failed"
        self.error = message
        if not self._ready.done():
            self._ready.set_exception(MCPConnectError(self.server.name, message))
            self._ready.exception()

    def _failure(self, exc: BaseException) -> str:
        starting = not self._ready.done()
        what = "cannot start" if starting else "connection failed"
        # The SDK's task groups wrap the handshake's TimeoutError in an exception group.
        if starting and any(isinstance(e, TimeoutError) for e in _leaves(exc)):
            return f"no MCP handshake within {self.server.startup_timeout:g} s"
        text = f"{what}: {_describe(exc)}"
        tail = self._stderr_tail()
        return f"{text}; stderr: {tail}" if tail else text

    def _stderr_tail(self) -> str:
        err = self._stderr
        if err is None or err.closed:
            return ""
        try:
            err.flush()
            err.seek(0)
            return " ".join(err.read()[-_STDERR_TAIL:].split())
        except (OSError, ValueError):
            return ""

    async def _transport(self, sdk: Any) -> Any:
        server = self.server
        if server.command is not None:
            # A real file: the kernel's sys.stderr has no descriptor for the child to inherit;
            # its tail explains a server that dies at startup.
            # Closed by _run after a failure message has read its tail.
            self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
            # Our own transport, not the SDK's stdio_client: it ends the server's whole process
            # group on close, also when the server itself exits at once (see _stdio).
            return stdio_transport(
                server.command,
                env=dict(server.env) if server.env is not None else None,
                cwd=server.cwd,
                errlog=self._stderr,
            )
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # The SDK's recommended timeouts: a server may hold a response stream open for long.
        client = httpx2.AsyncClient(
            headers=dict(server.headers or {}), timeout=httpx2.Timeout(30.0, read=300.0)
        )
        return _HttpTransport(streamable_http_client(str(server.url), http_client=client), client)

    async def _serve(self) -> None:
        sdk = require_sdk()
        async with AsyncExitStack() as stack:
            try:
                transport = await self._transport(sdk)
            except (OSError, ValueError) as exc:
                raise MCPConnectError(self.server.name, f"cannot start: {exc}") from exc
            try:
                read, write = await stack.enter_async_context(transport)
            except OSError as exc:
                raise MCPConnectError(self.server.name, f"cannot start: {exc}") from exc
            session = await stack.enter_async_context(
                sdk.ClientSession(read, write, message_handler=self._on_message)
            )
            with anyio.CancelScope() as startup:
                self._startup = startup
                if self._closing:
                    startup.cancel()
                with anyio.fail_after(self.server.startup_timeout):
                    await session.initialize()
                    listing = await self._list_tools(session)
            self._startup = None
            if self._closing:
                raise MCPConnectError(self.server.name, "closed before it was ready")
            if startup.cancelled_caught:
                raise MCPConnectError(self.server.name, f"does not speak MCP: {self._garbage}")
            self._session = session
            self._install(listing)
            self.state = "ready"
            self._ready.set_result(None)
            await self._until_closed(session)

    async def _until_closed(self, session: Any) -> None:
        # A lost connection (state "failed") ends the loop too: the SDK's shutdown then reaps
        # what is left of the transport.
        while not self._closing and self.state == "ready":
            await self._wake.wait()
            self._wake.clear()
            if self._refresh and not self._closing:
                self._refresh = False
                try:
                    self._install(await self._list_tools(session))
                except Exception as exc:  # keep the old tools: calls report their own errors
                    _log.warning(
                        "MCP server %r: refreshing tools failed: %s", self.server.name, exc
                    )

    async def _list_tools(self, session: Any) -> list[Any]:
        tools: list[Any] = []
        cursor: str | None = None
        while True:
            if cursor is None:
                page = await session.list_tools()
            else:
                from mcp.types import PaginatedRequestParams

                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def _on_message(self, message: Any) -> None:
        """The session's message handler (runs in the session's own tasks)."""
        if isinstance(message, Exception):
            self._garbage = _bad_output(message)
            if self._startup is not None:
                self._startup.cancel()  # fail the handshake now instead of at the timeout
            elif self.state == "ready":
                _log.warning("MCP server %r sent bad output: %s", self.server.name, self._garbage)
            return
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._refresh = True
            self._wake.set()

    # -- tools -----------------------------------------------------------------------------

    def _install(self, listing: list[Any]) -> None:
        """Replace the registered tools with ``listing`` (no-op once closing)."""
        if self._closing:
            return
        self._unregister()
        names: list[str] = []
        for spec in listing:
            definition = self._definition(spec)
            try:
                self._registered.append(self._register(definition))
            except ValueError as exc:  # a name clash: report it, keep the other tools
                _log.warning(
                    "MCP server %r: tool %r not registered: %s", self.server.name, spec.name, exc
                )
                continue
            names.append(definition.name)
        self.tools = tuple(names)
        installed, self._installed = self._installed, asyncio.Event()
        installed.set()

    def _unregister(self) -> None:
        registered, self._registered = self._registered, []
        for dispose in registered:
            dispose()
        self.tools = ()

    def _definition(self, spec: Any) -> Tool:
        mcp_name = str(spec.name)
        schema = dict(spec.input_schema or {})
        schema.setdefault("type", "object")
        annotations = getattr(spec, "annotations", None)
        read_only = getattr(annotations, "read_only_hint", None) is True

        async def execute(args: dict[str, Any], execution: ToolExecution) -> ToolResult:
            return await self.call(mcp_name, args)

        description = spec.description or getattr(spec, "title", None) or ""
        return Tool(
            tool_name(self.server.name, mcp_name),
            f"{description} (MCP server {self.server.name})".strip(),
            schema,
            execute,
            concurrency_safe=read_only,
        )

    async def call(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """Call ``tool`` on the server. Never raises for server problems: a dead connection, a
        protocol error or ``isError`` is a ``TOOL_ERROR`` result naming the server. Cancelling
        the call sends the MCP cancellation notification (the SDK does, shielded)."""
        name = self.server.name
        session = self._session
        if session is None or self.state != "ready":
            reason = self.error or f"the connection is {self.state}"
            return error_result(TOOL_ERROR, f"MCP server {name!r} is not connected ({reason})")
        try:
            result = await session.call_tool(tool, args)
        except Exception as exc:
            if _is_closed(exc):
                self._fail(f"the server closed the connection during {tool!r} (did it exit?)")
                self._wake.set()
                return error_result(TOOL_ERROR, f"MCP server {name!r}: {self.error}")
            return error_result(
                TOOL_ERROR, f"MCP server {name!r} failed on {tool!r}: {_describe(exc)}"
            )
        return to_tool_result(name, tool, result)


def _bad_output(exc: Exception) -> str:
    """What a server wrote that is not JSON-RPC, briefly (the SDK reports a parse error)."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            return f"it wrote {str(first.get('input'))[:120]!r} ({first.get('msg')})"
        except Exception:
            pass
    return " ".join(str(exc).split())[:200]


def _is_closed(exc: Exception) -> bool:
    """Whether ``exc`` is the SDK's "connection closed" (the server went away)."""
    from mcp.types import CONNECTION_CLOSED

    return getattr(exc, "code", None) == CONNECTION_CLOSED


class _HttpTransport:
    """``streamable_http_client`` plus the httpx client it does not close itself."""

    def __init__(self, inner: Any, client: Any) -> None:
        self._inner = inner
        self._client = client

    async def __aenter__(self) -> Any:
        await self._client.__aenter__()
        try:
            return await self._inner.__aenter__()
        except BaseException:
            await self._client.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            with anyio.CancelScope(shield=True):
                await self._client.__aexit__(None, None, None)
