"""``Throttle``: coalesce many "something changed" pokes into a bounded number of renders.

A view pokes its throttle once per session event (possibly 100k times a second); the throttle
calls ``render`` at most once per ``interval`` seconds, always *after* the last poke (a trailing
render), so the front end never misses the final state. With no running loop (a plain script, a
sync test) every poke renders at once, because there is nothing that could run a deferred
render later.

On a running loop a due render is handed to the loop's :class:`Pacer`, shared by every
throttle on that loop, which bounds what rendering may cost the kernel however many views
stream (each render is widget state sent over the comm: about a millisecond of the loop's
time, and as much again in ipykernel's IOPub thread):

- at most :data:`RATE` renders per second across the loop (a token bucket holding
  :data:`BURST`, so a click on an idle view still renders at once); past that, each view's
  updates come less often, in turn, and the last state is always rendered;
- due renders run in slots of at most :data:`SLOT` seconds, each slot a callback of its own,
  and the pacer rests :data:`REST` times a slot's length before the next one: twenty views due
  at the same moment never render in one loop iteration, and the kernel reads its shell
  messages between slots.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable

from ...errors import InvalidValueError

_log = logging.getLogger("agentloop_nb.jupyter")

DEFAULT_INTERVAL = 0.1
"""Seconds between renders: at most 10 renders per second per view."""

SLOT = 0.0005
"""Seconds of rendering a pacer slot may spend before it yields to the loop (a render that
starts within the slot runs to its end). A streaming view's render is one comm message, about
0.3-0.5 ms of the loop's time in a kernel, so a slot is about one such render (or many cheap
ones): a shell message that arrives mid-slot waits for one render, not for several."""

REST = 2.0
"""After a slot that took ``d`` seconds the pacer waits ``REST * d`` before the next one, so
renders take at most ``1 / (1 + REST)`` of the loop's time while views are backed up."""

RATE = 60.0
"""Renders per second across every view of a loop, sustained: six views streaming at once
render ten times a second each, twenty views three times."""

BURST = 10
"""Renders the pacer may run at once after a quiet moment (the token bucket's size)."""


class Pacer:
    """The render queue of one event loop, shared by every :class:`Throttle` on it.

    ``Pacer.of(loop)`` is the loop's pacer. ``add(throttle)`` queues a due render (a throttle is
    queued at most once, by the throttle itself); ``discard(throttle)`` drops it. Renders run
    in arrival order, in slots of at most :data:`SLOT` seconds (the render that crosses the
    limit finishes), each slot a callback of its own; the pacer then rests ``REST`` times the
    slot's length (at least one loop iteration), and longer while its token bucket (``RATE``
    per second, ``BURST`` at most) is empty.
    """

    __slots__ = ("_filled", "_handle", "_loop", "_next", "_queue", "_tokens", "slots")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weak: ``_PACERS`` is keyed weakly by the loop, and a value holding its key strongly
        # would keep the loop (and every throttle still queued) alive for good.
        self._loop = weakref.ref(loop)
        self._queue: deque[Throttle] = deque()
        self._handle: asyncio.Handle | None = None
        self._next = -float("inf")  # monotonic time the next slot may start
        self._tokens = float(BURST)
        self._filled = time.monotonic()  # when _tokens was last topped up
        self.slots = 0
        """How many slots ran (what a benchmark or a test counts)."""

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> Pacer:
        """The pacer of ``loop`` (made on first use, dropped with the loop)."""
        pacer = _PACERS.get(loop)
        if pacer is None:
            pacer = _PACERS[loop] = cls(loop)
        return pacer

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, throttle: Throttle) -> None:
        self._queue.append(throttle)
        loop = self._loop()
        if self._handle is None and loop is not None and not loop.is_closed():
            delay = self._next - time.monotonic()
            if delay > 0:
                self._handle = loop.call_later(delay, self._slot)
            else:
                self._handle = loop.call_soon(self._slot)

    def discard(self, throttle: Throttle) -> None:
        if throttle in self._queue:
            self._queue.remove(throttle)

    def _slot(self) -> None:
        self._handle = None
        now = time.monotonic()
        self._tokens = min(float(BURST), self._tokens + (now - self._filled) * RATE)
        self._filled = now
        queue = self._queue
        if queue and self._tokens >= 1:
            self.slots += 1
            start = time.perf_counter()
            end = start + SLOT
            while queue and self._tokens >= 1:
                self._tokens -= 1
                queue.popleft()._fire()
                if time.perf_counter() >= end:
                    break
            took = time.perf_counter() - start
            self._next = time.monotonic() + REST * took
        loop = self._loop()
        if queue and loop is not None:
            wait = max(self._next - time.monotonic(), (1 - self._tokens) / RATE, 0.0)
            self._handle = loop.call_later(wait, self._slot)


_PACERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = weakref.WeakKeyDictionary()


class Throttle:
    """Run ``render()`` at most once per ``interval`` seconds, trailing every ``poke()``.

    ``poke()`` is O(1) and never renders re-entrantly while a render runs. ``flush()`` renders now
    if anything is pending (tests, teardown). ``close()`` drops a pending render. A ``render``
    that raises is logged and does not stop later renders.
    """

    __slots__ = (
        "_closed",
        "_dirty",
        "_handle",
        "_last",
        "_pacer",
        "_render",
        "_tick",
        "_waiters",
        "interval",
        "renders",
    )

    def __init__(self, render: Callable[[], None], interval: float = DEFAULT_INTERVAL) -> None:
        if interval < 0:
            raise InvalidValueError(f"throttle interval must be >= 0 seconds, got {interval!r}")
        self._render = render
        self.interval = interval
        self._handle: asyncio.TimerHandle | None = None  # the timer that queues the render
        self._pacer: Pacer | None = None  # set while the render waits in the pacer's queue
        self._last = -float("inf")
        self._dirty = False
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []
        self._tick: asyncio.TimerHandle | None = None
        self.renders = 0
        """How many renders ran (what a benchmark or a test counts)."""

    @property
    def pending(self) -> bool:
        """Whether a change is waiting for a render."""
        return self._dirty

    def poke(self) -> None:
        """Note a change; a render follows within ``interval`` seconds (trailing edge)."""
        if self._closed:
            return
        self._dirty = True
        if self._handle is not None or self._pacer is not None:
            return  # a render is already scheduled and will pick this change up
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._fire()
            return
        delay = self._last + self.interval - time.monotonic()
        if delay <= 0:
            # Queued, never rendered here: the pacer runs it one loop iteration later at the
            # earliest, so a burst of events appended synchronously (a zero-latency model)
            # collapses into one render.
            self._queue(loop)
        else:
            self._handle = loop.call_later(delay, self._queue, loop)

    def _queue(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle = None
        if self._dirty and not self._closed and self._pacer is None:
            self._pacer = Pacer.of(loop)
            self._pacer.add(self)

    async def settled(self) -> None:
        """Return once no change is waiting for a render (at once if none is). This is how a
        later cell waits for a view to catch up, without sleeping."""
        if not self._dirty or self._closed:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut

    def flush(self) -> None:
        """Render now if a change is pending (cancelling the scheduled render)."""
        self._unschedule()
        if self._dirty and not self._closed:
            self._fire()

    def _unschedule(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._pacer is not None:
            self._pacer.discard(self)
            self._pacer = None

    def poke_after(self, seconds: float) -> None:
        """Poke once ``seconds`` from now, unless such a poke is already scheduled (a clock on
        screen: a view showing something running calls this at each render). No-op without a
        running loop or once closed."""
        if self._tick is not None or self._closed:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._tick = loop.call_later(seconds, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        self.poke()

    def close(self) -> None:
        """Stop: drop a scheduled render and a scheduled poke; later pokes do nothing."""
        self._closed = True
        self._unschedule()
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        self._wake()

    def _fire(self) -> None:
        self._handle = self._pacer = None
        if not self._dirty or self._closed:
            return
        self._dirty = False
        self._last = time.monotonic()
        self.renders += 1
        try:
            self._render()
        except Exception:  # a broken render must not break the event dispatch that poked it
            _log.exception("agentloop_nb view render failed")
        if not self._dirty:
            self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


__all__ = ["DEFAULT_INTERVAL", "Pacer", "Throttle"]
