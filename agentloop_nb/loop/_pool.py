"""The tool pool's synchronisation (``_scheduler._run_pool``): how many pooled calls run
(``Running``), the start lock that keeps starts in model order (``StartLock``) and the
settled calls its commit task takes in model order (``Slots``). Private to the loop."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from ..tools import ToolExecution, ToolResult

__all__ = ["Running", "Slots", "StartLock"]


class Running:
    """How many pooled calls are between their start and their settled body (a worker adds
    one to ``count`` itself when a call starts, and calls :meth:`leave` when it settles)."""

    __slots__ = ("count", "idle")

    def __init__(self) -> None:
        self.count = 0
        self.idle: anyio.Event | None = None

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0 and self.idle is not None:
            self.idle.set()
            self.idle = None

    async def wait_idle(self) -> None:
        """Return once no call is running (at once when none is)."""
        if self.count:
            idle = self.idle = self.idle or anyio.Event()
            await idle.wait()


class StartLock:
    """The pool's start lock: held while a worker takes the next call in model order, logs
    its ``tool/call`` and runs its ``tools/pre-execute`` (and, for a call run alone, its body).

    Waiters are served first come, first served, and a released lock is handed to the first
    one (it holds it from then on, before it runs); taking a free lock is a flag, with no
    await (asyncio's lock costs three coroutine frames a call, anyio's also walks the task's
    cancel scopes). A waiter cancelled while it waits leaves the line; one cancelled after
    the lock was handed to it passes it on. A worker woken for the lock holds it even if a
    cancel scope cancels it meanwhile (anyio does not cancel a task whose wait is over), so it
    stops at its next await, as with asyncio's lock."""

    __slots__ = ("held", "waiters")

    def __init__(self) -> None:
        self.held = False
        self.waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        if self.held:
            return False
        self.held = True
        return True

    async def take(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # it was handed the lock: pass it on
            elif waiter in self.waiters:  # (a release may have dropped it, cancelled)
                self.waiters.remove(waiter)
            raise

    def release(self) -> None:
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # handed over: the lock stays held
                return
        self.held = False


class Slots:
    """A pool's calls as they settle (``(execution, result)``, or ``None`` for a call that
    never started), taken in model order by its commit task, which waits only for a call
    that has not settled yet (no future per call: a settled one is taken at once)."""

    __slots__ = ("settled", "waiter", "wanted")

    def __init__(self) -> None:
        self.settled: dict[int, tuple[ToolExecution, ToolResult] | None] = {}
        self.wanted = -1
        self.waiter: asyncio.Future[None] | None = None

    def put(self, i: int, slot: tuple[ToolExecution, ToolResult] | None) -> None:
        self.settled[i] = slot
        if i == self.wanted:
            self.wanted = -1
            waiter = self.waiter
            if waiter is not None and not waiter.done():  # (done: the commit task cancelled)
                waiter.set_result(None)

    async def take(self, i: int) -> tuple[ToolExecution, ToolResult] | None:
        settled = self.settled
        if i not in settled:
            waiter = self.waiter = asyncio.get_running_loop().create_future()
            self.wanted = i
            await waiter
        return settled.pop(i)
