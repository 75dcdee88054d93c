"""Micro-benchmark of the event bus's "does anyone listen" fast path.

Compares, per dispatch of an unobserved hook, the call-site guard the loop used to copy
(``if ctx.has_listeners(name): ... else: default``) with a plain
``await ctx.waterfall(name, payload, default, signal=signal)`` (payload built eagerly, or
``Lazy(...)``) /
``await ctx.serial(name, payload, signal=signal)`` that decides inside the bus, plus the
observed case (one listener, with and without a signal) and ``emit`` with no listener.

Run: ``.venv/bin/python benchmarks/bench_bus.py`` (a few seconds). Prints ns per dispatch
(best of 7 runs: the least disturbed by other load). Nothing here is asserted.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentloop_nb.context import Context, Lazy
from agentloop_nb.signals import AbortController

N = 50_000


@dataclass(frozen=True, slots=True)
class Payload:
    agent: Any
    turn: int
    step: int
    signal: Any


async def _noop() -> None:
    return None


def _default() -> str:
    return "default"


async def _timed(fn: Callable[[], Awaitable[None]]) -> float:
    runs = []
    for _ in range(7):
        gc.collect()
        start = time.perf_counter()
        await fn()
        runs.append((time.perf_counter() - start) / N * 1e9)
    return min(runs)


async def main() -> None:
    root = Context()
    agent = object()
    ctx = root.child(agent=agent)
    signal = AbortController().signal
    has_signal = "signal" in inspect.signature(ctx.waterfall).parameters

    async def guarded_waterfall() -> None:
        for i in range(N):
            if ctx.has_listeners("h/w"):
                await ctx.waterfall("h/w", Payload(agent, i, i, signal), _default)
            else:
                _default()

    async def bus_waterfall() -> None:
        for i in range(N):
            await ctx.waterfall("h/w", Payload(agent, i, i, signal), _default, signal=signal)

    async def bus_waterfall_lazy() -> None:
        for i in range(N):
            await ctx.waterfall("h/w", Lazy(Payload, agent, i, i, signal), _default, signal=signal)

    async def guarded_serial() -> None:
        for i in range(N):
            if ctx.has_listeners("h/s"):
                await ctx.serial("h/s", Payload(agent, i, i, signal))

    async def bus_serial() -> None:
        for i in range(N):
            await ctx.serial("h/s", Payload(agent, i, i, signal), signal=signal)

    async def bare_await() -> None:
        for _ in range(N):
            await _noop()

    async def emit_unobserved() -> None:
        for i in range(N):
            ctx.emit("h/e", i)

    async def observed_waterfall() -> None:
        for i in range(N):
            await ctx.waterfall("h/o", Payload(agent, i, i, signal), _default)

    async def observed_waterfall_signal() -> None:
        for i in range(N):
            await ctx.waterfall("h/o", Payload(agent, i, i, signal), _default, signal=signal)

    async def passthrough(payload: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        return await next()

    root.on("h/o", passthrough)
    cases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("reference: await a coroutine that returns at once", bare_await),
        ("unobserved waterfall, has_listeners guard at the call site", guarded_waterfall),
        ("unobserved serial, has_listeners guard at the call site", guarded_serial),
        ("unobserved emit", emit_unobserved),
        ("observed waterfall (1 pass-through listener)", observed_waterfall),
    ]
    if has_signal:
        cases += [
            ("unobserved waterfall(..., signal=) deciding in the bus", bus_waterfall),
            ("unobserved waterfall(Lazy(...), signal=) deciding in the bus", bus_waterfall_lazy),
            ("unobserved serial(..., signal=) deciding in the bus", bus_serial),
            ("observed waterfall(..., signal=) (abort scope)", observed_waterfall_signal),
        ]
    print(f"{'case':<62} ns/dispatch")
    for label, fn in cases:
        print(f"{label:<62} {await _timed(fn):8.0f}")


if __name__ == "__main__":
    asyncio.run(main())
