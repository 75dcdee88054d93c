"""The stream guard (:func:`guard`): re-yield an adapter's chunks up to and including its first
``Finish`` and turn every way the stream can go wrong into one terminal finish (see
``_runtime``'s module docstring for the error policy). Always closes the source, also on an
early ``aclose``.

It stays an async generator: a plain async iterator class with the same contract measured no
cheaper (benchmarks/README.md "Issue 28: a tool step's own work"), since a chunk's cost is the
guard's own bookkeeping, not the generator's machinery, and a generator gets the loop's
finalizer for an abandoned stream for free. Counted again in session 13 (callgrind, a 6-chunk
stream): the generator level costs about 14 k instructions (8 k a stream, 1 k a chunk), the
guard's bookkeeping 15 k; a class whose ``__anext__`` is a coroutine costs 8 k more than the
generator (a coroutine made per chunk), one that hands out a finished ``asyncio.Future`` per
chunk three times as much (docs/architecture.md "Step, session 13"). What a chunk and a
stream no longer pay: a Python ``asyncio.current_task`` frame per chunk on Python 3.11 (the
lookup it makes, called with the stream's loop), and ``add_callback``'s closure and disposer
per stream (the watch is appended and removed directly).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from ._abort_watch import AbortWatch
from ._chunks import (
    Aborted,
    BlockEnd,
    BlockStart,
    ErrorFinish,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageChunk,
)
from ._errors import LlmError

if TYPE_CHECKING:
    from ..signals import AbortSignal

__all__ = ["ABORTED", "TRUNCATED", "aclose_quietly", "error_finish", "exception_finish", "guard"]

# Literal, valid instances: model_construct makes them without building the (deferred)
# validators at import.
ABORTED = Finish.model_construct(reason=Aborted.model_construct())
TRUNCATED = Finish.model_construct(
    reason=ErrorFinish.model_construct(code="TRANSPORT", message="stream ended without a finish")
)


def error_finish(code: str, message: str) -> Finish:
    return Finish(reason=ErrorFinish(code=code, message=message))


def exception_finish(exc: BaseException) -> Finish:
    if isinstance(exc, LlmError):
        return Finish(reason=exc.to_finish())
    text = str(exc)
    return error_finish("UNKNOWN", f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


async def aclose_quietly(source: Any) -> None:
    close = getattr(source, "aclose", None)
    if close is None:
        return
    # A failing close must not mask the finish already delivered (no ``suppress`` object:
    # this runs once per model stream).
    try:  # noqa: SIM105
        await close()
    except Exception:
        pass


async def guard(source: AsyncIterator[Any], signal: AbortSignal | None) -> AsyncIterator[Any]:
    """Re-yield ``source`` up to and including its first ``Finish``; turn every way it can go
    wrong into one terminal finish; ``signal`` ends it ``Finish(Aborted())``. Always closes
    ``source`` (also on an early ``aclose``)."""
    anext_ = source.__anext__
    if signal is None:
        try:
            while True:
                try:
                    chunk = await anext_()
                except StopAsyncIteration:
                    yield TRUNCATED
                    return
                except Exception as exc:
                    yield exception_finish(exc)
                    return
                yield chunk
                if isinstance(chunk, Finish):
                    return
        finally:
            await aclose_quietly(source)

    loop = asyncio.get_running_loop()
    watch = AbortWatch()
    # The watch is the signal's callback, appended and removed directly (``add_callback``
    # builds a closure and a disposer per stream); already aborted: it runs now, as there.
    callbacks = signal._callbacks
    if signal.aborted:
        watch(signal.reason)
    else:
        callbacks.append(watch)
    try:
        while True:
            if watch.aborted:
                yield ABORTED
                return
            # fast path (benchmarks/bench_loop.py ingest): AbortWatch's protocol inlined per
            # chunk, no scope per chunk; parked only in the adapter's await, never across a yield
            task = watch.task = _current_task(loop)
            final: Finish | None = None
            try:
                chunk = await anext_()
            except StopAsyncIteration:
                final = ABORTED if watch.aborted else TRUNCATED
            except asyncio.CancelledError:
                if not watch.claim(task):
                    raise
                final = ABORTED
            except Exception as exc:
                # An adapter that raises because it noticed the abort is still an abort.
                final = ABORTED if watch.aborted else exception_finish(exc)
            finally:
                watch.task = None
                if watch.sent:
                    watch.withdraw(task)
            if final is not None:
                yield final
                return
            # fast path (benchmarks/README.md "Step (session 11)"): a chunk of an exact chunk
            # class is no ``Finish`` without ``isinstance`` (an ABC check on a pydantic model)
            if type(chunk) not in _NOT_FINISH and isinstance(chunk, Finish):
                yield ABORTED if watch.aborted else chunk
                return
            yield chunk
    finally:
        try:  # noqa: SIM105  (no context manager object: runs once per model stream)
            callbacks.remove(watch)
        except ValueError:  # ran already (the signal aborted) or never added
            pass
        await aclose_quietly(source)


# The exact chunk classes that are not ``Finish`` (a subclass of one is checked as usual).
_NOT_FINISH = frozenset(
    {BlockStart, TextDelta, ReasoningDelta, ToolCallDelta, BlockEnd, UsageChunk}
)


# ``asyncio.current_task(loop)`` as a C-level call (the guard asks once per chunk, for the loop
# it found when the stream started): the builtin from Python 3.12 on; on 3.11, where it is a
# Python function, the lookup it makes (``_current_tasks``, the C module's table).
_current_task: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = (
    asyncio.current_task if sys.version_info >= (3, 12) else asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]
)
