"""Global limits shared by every agent of one loop: a live-capped gate for tool bodies
(``settings.max_parallel_tool_calls_total``) and one for model streams
(``settings.max_concurrent_model_calls``).

A :class:`Gate` reads its cap from the live settings at every admission, so lowering a cap
takes effect as running holders leave and raising it admits waiters at once. Waiters are
admitted first come, first served.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import anyio

from ..signals import AbortScope

if TYPE_CHECKING:
    from ..signals import AbortSignal
    from ._config import LoopSettings


class Gate:
    """At most ``cap()`` holders at once (``None``: unlimited), FIFO admission."""

    __slots__ = ("_cap", "_held", "_waiters")

    def __init__(self, cap: Callable[[], int | None]) -> None:
        self._cap = cap
        self._held = 0
        self._waiters: deque[anyio.Event] = deque()

    @property
    def held(self) -> int:
        """How many holders are inside the gate now."""
        return self._held

    @property
    def waiting(self) -> int:
        """How many callers wait for a slot."""
        return len(self._waiters)

    def slot(self, signal: AbortSignal | None = None) -> _Slot:
        """``async with gate.slot(signal):`` holds one slot for the block. Raises
        ``AbortError`` when ``signal`` aborts while waiting (the slot is then not taken);
        cancellation while waiting leaves no slot held."""
        return _Slot(self, signal)

    def try_acquire(self) -> bool:
        """Take a slot if one is free and nobody waits (no await); whether it did. Hot paths
        call this first and :meth:`acquire` only when it fails; :meth:`release` either way."""
        if self._waiters:
            return False
        # fast path (benchmarks/bench_ab.py): _room inlined, this runs twice per model step
        cap = self._cap()
        if cap is None or self._held < cap:
            self._held += 1
            return True
        return False

    async def acquire(self, signal: AbortSignal | None = None) -> None:
        """Wait for a slot (first come, first served) and take it. Raises ``AbortError`` when
        ``signal`` aborts while waiting; cancellation while waiting leaves no slot held."""
        if not self.try_acquire():
            await self._acquire(signal)

    def release(self) -> None:
        """Give back a slot taken by :meth:`try_acquire` or :meth:`acquire`."""
        self._held -= 1
        if self._waiters:
            self.wake()

    def wake(self) -> None:
        """Admit waiters while the (possibly changed) cap allows."""
        while self._waiters and self._room():
            self._held += 1  # handed over: the woken waiter owns this slot
            self._waiters.popleft().set()

    def _room(self) -> bool:
        cap = self._cap()
        return cap is None or self._held < cap

    async def _acquire(self, signal: AbortSignal | None) -> None:
        admitted = anyio.Event()
        self._waiters.append(admitted)
        try:
            with AbortScope(signal):
                await admitted.wait()
        except BaseException:
            if admitted.is_set():
                self.release()  # admitted as we were cancelled: give the slot back
            else:
                self._waiters.remove(admitted)
            raise


class _Slot:
    __slots__ = ("_gate", "_signal")

    def __init__(self, gate: Gate, signal: AbortSignal | None) -> None:
        self._gate = gate
        self._signal = signal

    async def __aenter__(self) -> None:
        await self._gate.acquire(self._signal)

    async def __aexit__(self, *exc: object) -> None:
        self._gate.release()


class GlobalLimits:
    """The loop's two gates, capped by its live settings (``ctx.agent_loop.limits``)."""

    __slots__ = ("model_calls", "tool_calls")

    def __init__(self, settings: LoopSettings) -> None:
        # partial(getattr, ...) reads the live setting without a Python frame per admission
        self.tool_calls = Gate(partial(getattr, settings, "max_parallel_tool_calls_total"))
        self.model_calls = Gate(partial(getattr, settings, "max_concurrent_model_calls"))
        settings.on_change(self._changed)

    def _changed(self) -> None:
        self.tool_calls.wake()
        self.model_calls.wake()
