"""What blocks a kernel's event loop: a probe ``bench_view_stall.py --probe`` loads into the kernel.

``install()`` wraps, on the running loop,

- every callback (``asyncio.events.Handle._run``): its thread CPU time (the loop's own work,
  which the machine's load does not inflate) and wall time (which adds waiting for the GIL and
  for a core);
- every loop iteration (``loop._run_once``): the callbacks it ran after its ``select``, taken
  together. A message that arrives waits for the iteration under way, so a long iteration is a
  stall, whichever callbacks it is made of;
- every render of an agentloop_nb view (``Throttle._fire``), by view;
- every collection of the cyclic GC (``gc.callbacks``).

``take()`` returns what was recorded since the last ``take()`` as JSON-able lists and clears it.
Benchmark instrumentation only: it slows each callback by about a microsecond.
"""

from __future__ import annotations

import asyncio
import gc
import time
from asyncio import events
from typing import Any

_busy = [0.0, 0]  # CPU seconds of all callbacks, their count
_slow: list[tuple[float, str]] = []  # (CPU seconds, what) of every callback or render > 1 ms
_bursts: list[Any] = []  # iterations over 5 ms of wall time: (cpu, wall, n, 3 largest)
_gc: list[tuple[int, float]] = []  # (generation, seconds) of every collection
_iteration: list[Any] = [0.0, 0.0, []]
_renders: list[float] = []  # CPU seconds of every view render


def _what(handle: Any) -> str:
    cb = handle._callback
    owner = getattr(cb, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task {owner.get_name()[:40]} {getattr(coro, '__qualname__', coro)}"
    return getattr(cb, "__qualname__", None) or repr(cb)[:120]


def install() -> None:
    """Start recording on the running loop (call once, from a cell)."""
    run = events.Handle._run
    clock = time.thread_time
    wall = time.perf_counter
    loop = asyncio.get_running_loop()
    run_once = loop._run_once  # type: ignore[attr-defined]

    def timed(handle: Any) -> None:
        t, w = clock(), wall()
        run(handle)
        d, dw = clock() - t, wall() - w
        _busy[0] += d
        _busy[1] += 1
        _iteration[0] += d
        _iteration[1] += dw
        if dw > 0.0005:
            _iteration[2].append((dw, handle))
        if d > 0.001:
            _slow.append((d, _what(handle)))

    def iteration() -> None:
        _iteration[:] = [0.0, 0.0, []]
        run_once()  # its select comes first: the callbacks after it are the iteration's work
        if _iteration[1] > 0.005:
            top = sorted(_iteration[2], key=lambda p: -p[0])[:3]
            parts = [(d, _what(h)) for d, h in top]
            _bursts.append((_iteration[0], _iteration[1], len(_iteration[2]), parts))

    started = [0.0]

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = wall()
        else:
            _gc.append((info["generation"], wall() - started[0]))

    from agentloop_nb.jupyter.view._throttle import Throttle

    fire = Throttle._fire

    def render(throttle: Any) -> None:  # which view's render is slow (a pacer slot runs several)
        t = clock()
        fire(throttle)
        d = clock() - t
        _renders.append(d)
        if d > 0.001:
            _slow.append((d, f"render {getattr(throttle._render, '__qualname__', 'render')}"))

    Throttle._fire = render  # type: ignore[method-assign]
    events.Handle._run = timed  # type: ignore[method-assign]
    loop._run_once = iteration  # type: ignore[attr-defined]
    gc.callbacks.append(collected)


def take() -> list[Any]:
    """``[[cpu_seconds, callbacks], slow, bursts, gc, [process_cpu, main_thread_cpu], renders]``
    since the last call (the clocks: now, every thread and the calling one; renders: each view
    render's CPU seconds); clears them."""
    clocks = [time.process_time(), time.thread_time()]
    out = [list(_busy), list(_slow), list(_bursts), list(_gc), clocks, list(_renders)]
    _renders.clear()
    _busy[:] = [0.0, 0]
    _slow.clear()
    _bursts.clear()
    _gc.clear()
    return out
