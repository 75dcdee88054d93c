"""``Throttle``: coalesce many "something changed" pokes into a bounded number of renders.

A view pokes its throttle once per session event (possibly 100k times a second); the throttle
calls ``render`` at most once per ``interval`` seconds, always *after* the last poke (a trailing
render), so the front end never misses the final state. Rendering is scheduled with
``loop.call_later`` on the running loop; with no running loop (a plain script, a sync test) every
poke renders at once, because there is nothing that could run a deferred render later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

_log = logging.getLogger("agentloop_nb.jupyter")

DEFAULT_INTERVAL = 0.1
"""Seconds between renders: at most 10 renders per second per view."""


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
        "_render",
        "_tick",
        "_waiters",
        "interval",
        "renders",
    )

    def __init__(self, render: Callable[[], None], interval: float = DEFAULT_INTERVAL) -> None:
        if interval < 0:
            raise ValueError(f"throttle interval must be >= 0 seconds, got {interval!r}")
        self._render = render
        self.interval = interval
        self._handle: asyncio.TimerHandle | None = None
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
        if self._handle is not None:
            return  # a render is already scheduled and will pick this change up
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._fire()
            return
        delay = self._last + self.interval - time.monotonic()
        if delay <= 0:
            # Defer by one loop iteration even when allowed now, so a burst of events appended
            # synchronously (a zero-latency model) collapses into one render.
            self._handle = loop.call_later(0, self._fire)
        else:
            self._handle = loop.call_later(delay, self._fire)

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
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._dirty and not self._closed:
            self._fire()

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
        for handle in (self._handle, self._tick):
            if handle is not None:
                handle.cancel()
        self._handle = self._tick = None
        self._wake()

    def _fire(self) -> None:
        self._handle = None
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


__all__ = ["DEFAULT_INTERVAL", "Throttle"]
