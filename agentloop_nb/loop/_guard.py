"""Run an await so that the turn's abort signal interrupts it."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import anyio

from ..signals import AbortSignal

T = TypeVar("T")


class TurnAborted(Exception):
    """Internal: the turn's signal aborted an await; the driver maps it to the end reason."""


async def interruptible(signal: AbortSignal, awaitable: Awaitable[T]) -> T:
    """Await ``awaitable``; if ``signal`` aborts first, cancel it and raise ``TurnAborted``.

    Hooks receive the signal too and may finish cooperatively; this is the backstop that keeps
    a listener that ignores it from holding the turn open."""
    if signal.aborted:
        close = getattr(awaitable, "close", None)
        if close is not None:
            close()  # never-started coroutine: avoid the "never awaited" warning
        raise TurnAborted
    with anyio.CancelScope() as scope:
        remove = signal.add_callback(lambda _reason: scope.cancel())
        try:
            result = await awaitable
        finally:
            remove()
    if signal.aborted:  # a hook may return normally after the abort: the turn still ends
        raise TurnAborted
    return result
