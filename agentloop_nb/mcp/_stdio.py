"""``stdio_transport``: an MCP server process whose whole process group ends with the connection.

The SDK's ``stdio_client`` kills the server's process group only when the server outlives the
grace period after its stdin closes; a server that exits at once leaves its grandchildren
running (and holding its pipes, so the asyncio transport stays open until garbage collection).
This transport starts the server in a new session (process group id == its pid), bridges its
pipes to the memory streams ``mcp.ClientSession`` reads and writes, and on exit, shielded from
cancellation and with every wait bounded:

1. closes the server's stdin and waits up to ``grace`` seconds for it to exit (MCP shutdown);
2. sends SIGTERM to the process group, always: a grandchild outlives an exited leader;
3. waits up to ``grace`` seconds for the group to end, then SIGKILLs whatever is left;
4. closes the pipes and the asyncio subprocess transport.

The spawn itself is shielded too: a cancellation arriving while the process starts would
otherwise drop a live process nobody reaps.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Sequence
from typing import IO, Any

import anyio
from anyio.abc import Process

__all__ = ["stdio_transport"]

GRACE = 2.0  # seconds for the server to exit after stdin closes, and after SIGTERM
_REAP = 2.0  # seconds for the event loop to observe a SIGKILLed process


@contextlib.asynccontextmanager
async def stdio_transport(
    command: Sequence[str],
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    errlog: IO[str],
    grace: float = GRACE,
) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``command`` (its environment: the SDK's safe defaults updated with ``env``) and
    yield ``(read_stream, write_stream)`` for ``mcp.ClientSession``. Raises ``OSError`` /
    ``ValueError`` when the process cannot be started. On exit the server's process group is
    gone (see the module docstring), also when the body failed or was cancelled."""
    from mcp.client.stdio import get_default_environment

    with anyio.CancelScope(shield=True):
        process = await anyio.open_process(
            list(command),
            env=get_default_environment() | (env or {}),
            stderr=errlog,
            cwd=cwd,
            start_new_session=True,
        )
    stopped = False
    try:
        async with anyio.create_task_group() as tg:
            read_stream, write_stream = _bridge(process, tg)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    await write_stream.aclose()
                    await read_stream.aclose()
                    await _stop(process, grace)
                    stopped = True
                tg.cancel_scope.cancel()  # the pipe tasks may still wait on a survivor's pipe
    finally:
        # Reached without the stop above when the task group could not start.
        if not stopped:
            with anyio.CancelScope(shield=True):
                await _stop(process, grace)


def _bridge(process: Process, tg: Any) -> tuple[Any, Any]:
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    to_session, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, from_session = anyio.create_memory_object_stream[Any](0)
    assert process.stdout is not None and process.stdin is not None
    stdout, stdin = process.stdout, process.stdin

    async def read() -> None:
        buffer = b""
        async with to_session:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in stdout:
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        text = line.decode("utf-8", errors="replace")
                        try:
                            item: Any = SessionMessage(
                                jsonrpc_message_adapter.validate_json(text, by_name=False)
                            )
                        except ValueError as exc:  # the session reports it (not MCP output)
                            item = exc
                        await to_session.send(item)

    async def write() -> None:
        async with from_session:
            try:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((data + "\n").encode())
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                # The server stopped reading: end the session's reads instead of a hang.
                await to_session.aclose()

    tg.start_soon(read)
    tg.start_soon(write)
    return read_stream, write_stream


async def _stop(process: Process, grace: float) -> None:
    """End the server and its process group, close its pipes and transport."""
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        assert process.stdin is not None
        await process.stdin.aclose()
    with anyio.move_on_after(grace):
        await _leader_exited(process)
    group = process.pid  # start_new_session: the server leads its own group
    if _signal_group(group, signal.SIGTERM):
        # wait() returns once the server is reaped and its pipes closed, i.e. usually once
        # every descendant holding them has exited too.
        with anyio.move_on_after(grace):
            await process.wait()
        _signal_group(group, signal.SIGKILL)
        with anyio.move_on_after(_REAP):
            await process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await pipe.aclose()
    # A survivor of SIGKILL (uninterruptible sleep) would keep the asyncio transport open
    # until garbage collection, which warns; close it now (nothing public exposes it).
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError):
            close()


def _signal_group(group: int, signum: int) -> bool:
    """Send ``signum`` to process group ``group``; whether the group still had members."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # not ours any more (cannot happen while a member is ours)
        return False
    return True


async def _leader_exited(process: Process) -> None:
    """Return once the server process itself has exited, even while a descendant still holds
    its stdout (asyncio's ``wait()`` also waits for the pipes to close)."""
    if process.returncode is not None:
        return
    try:
        fd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel): wait() is the next best thing
        await process.wait()
        return
    try:
        # A pidfd turns readable when the process exits (not only once it is reaped).
        await anyio.wait_readable(fd)
    finally:
        os.close(fd)
