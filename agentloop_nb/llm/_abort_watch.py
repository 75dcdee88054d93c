"""``AbortWatch``: the stream guard's cancellation bookkeeping.

An :class:`~agentloop_nb.signals.AbortScope` per streamed chunk would cost about 20 µs (an
anyio cancel scope entered and left per token, far more than the rest of a chunk's ingest), so
the guard registers one ``AbortWatch`` per stream as the signal's abort callback instead. The
watch turns an abort into a cancellation of the one task parked in the adapter's ``__anext__``
await, only while it is parked there, and takes that cancellation back afterwards, so it can
surface nowhere else (not in the consumer's code, not as a stray ``cancelling()`` count).

The guard's side, per chunk (plain attribute writes: this runs once per token)::

    task = watch.task = current_task()     # parked: an abort may cancel it now
    try:
        chunk = await anext_()
    except CancelledError:
        if not watch.claim(task):          # not ours alone: let it propagate
            raise
        ...                                # ours: the stream ends aborted
    finally:
        watch.task = None                  # never across a yield
        if watch.sent:
            watch.withdraw(task)           # the adapter swallowed our cancellation
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["AbortWatch"]


class AbortWatch:
    """One stream's abort callback and the state of the cancellation it may have sent.

    ``aborted``: the signal fired (read by the guard twice per chunk, so a plain attribute, not
    the signal's property). ``task``: the task parked in the adapter's await, else ``None``
    (set and cleared by the guard). ``sent``: a cancellation of ``task`` is outstanding.
    ``baseline``: ``task.cancelling()`` before it, to tell our cancellation from another's.
    """

    __slots__ = ("aborted", "baseline", "sent", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.sent = False
        self.baseline = 0
        self.aborted = False

    def __call__(self, _reason: Any) -> None:
        """The signal's abort callback: mark ``aborted`` and cancel the parked task (once)."""
        self.aborted = True
        task = self.task
        # A self-abort from inside the awaited adapter code runs in the parked task itself;
        # the guard's next iteration sees ``aborted`` instead.
        if task is None or self.sent or task is asyncio.current_task():
            return
        self.baseline = task.cancelling()
        self.sent = True
        task.cancel()

    def claim(self, task: asyncio.Task[Any] | None) -> bool:
        """For a ``CancelledError`` raised in the parked await: whether it was this watch's
        cancellation alone (the stream then ends aborted). Our share of the task's
        cancellation count is taken back either way; ``False`` means it must propagate (not
        ours, or someone else cancelled the task as well)."""
        if not self.sent or task is None:
            return False
        self.sent = False
        task.uncancel()
        return task.cancelling() <= self.baseline

    def withdraw(self, task: asyncio.Task[Any] | None) -> None:
        """After the parked await, if our cancellation is still outstanding (the adapter
        swallowed it and went on): balance the request we made."""
        if self.sent and task is not None:
            self.sent = False
            task.uncancel()
