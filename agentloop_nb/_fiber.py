"""``Fiber``: the scope that owns registrations and unwinds them together.

Private to :mod:`agentloop_nb.context`, which re-exports :class:`Fiber` and
:class:`InactiveContextError`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from types import CoroutineType, GeneratorType
from typing import Any

from ._disposer import Disposer
from .errors import AgentloopError

_log = logging.getLogger("agentloop_nb.context")


class InactiveContextError(RuntimeError, AgentloopError):
    """Raised when something is registered through a context whose scope was disposed."""


def is_awaitable(value: object) -> bool:
    """``inspect.isawaitable``, without its abstract-base-class check (slow, and run on every
    hook answer): an object is awaitable when its type defines ``__await__`` (coroutines,
    futures, tasks) or it is a generator-based coroutine. A class registered as a virtual
    ``Awaitable`` without defining ``__await__`` is not recognised (it could not be awaited)."""
    kind = type(value)
    if kind is CoroutineType:
        return True
    known = _AWAITABLE_TYPES.get(kind)
    if known is None:
        # A plain attribute probe, not hasattr on the class: a pydantic model class answers a
        # missing attribute from Python code (and hook answers are mostly models).
        known = any("__await__" in vars(base) for base in kind.__mro__)
        if len(_AWAITABLE_TYPES) < 1024:  # hook answers come in few types; never grow unbounded
            _AWAITABLE_TYPES[kind] = known
    return known or (kind is GeneratorType and inspect.isawaitable(value))


_AWAITABLE_TYPES: dict[type, bool] = {}


def close_unstarted(awaitables: Iterable[object]) -> None:
    """Close coroutines that will never run, so they do not warn 'never awaited'."""
    for aw in awaitables:
        if inspect.iscoroutine(aw) and inspect.getcoroutinestate(aw) == inspect.CORO_CREATED:
            aw.close()


class Fiber:
    """A scope: owns listeners, services, effects and child fibers, and disposes them together.

    ``dispose()`` is synchronous, idempotent and unwinds in reverse registration order (a child
    fiber is one entry in that order, so a child created after a registration is disposed before
    it). A disposer error is logged and reported as ``internal/error``; unwinding continues. A
    disposer that returns an awaitable (async teardown) has it collected: ``await aclose()``
    awaits them in disposal order, while a bare ``dispose()`` schedules them on the running loop
    as a task owned by this fiber (without a running loop they are closed and logged).
    Background tasks the fiber owns (async ``emit`` observers) are cancelled on disposal;
    ``aclose()`` waits for them to finish.

    Attributes: ``name``, ``parent`` (``None`` for the root), ``active``, ``instance`` (the
    object a class plugin built, else ``None``), ``config`` (the validated plugin config).
    """

    __slots__ = (
        "__weakref__",
        "_active",
        "_owned",
        "_report",
        "_tasks",
        "config",
        "instance",
        "name",
        "parent",
    )

    _active: bool

    def __init__(
        self,
        name: str,
        parent: Fiber | None = None,
        *,
        report: Callable[[str, object, Exception], None] | None = None,
    ) -> None:
        if parent is not None and not parent._active:
            raise InactiveContextError(
                f"cannot open scope {name!r} under {parent.path!r}: that scope was disposed"
            )
        self.name = name
        self.parent = parent
        self.instance: Any = None
        self.config: Any = None
        self._active = True
        # dict as an insertion-ordered set: O(1) removal when one registration is undone,
        # and popitem() is LIFO, which is exactly the unwind order.
        self._owned: dict[Disposer | Fiber, None] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._report = report
        if parent is not None:
            parent._owned[self] = None

    @property
    def active(self) -> bool:
        return self._active

    @property
    def path(self) -> str:
        """Slash-joined names from the root, for messages (``root/guard``)."""
        parts: list[str] = []
        fiber: Fiber | None = self
        while fiber is not None:
            parts.append(fiber.name)
            fiber = fiber.parent
        return "/".join(reversed(parts))

    # -- ownership -------------------------------------------------------------------------

    def check_active(self, what: str = "register") -> None:
        if not self._active:
            raise InactiveContextError(
                f"cannot {what} through context {self.path!r}: its scope was disposed; "
                "use a live context (re-apply the plugin or create a new child context)"
            )

    def own(self, undo: Callable[[], Any]) -> Disposer:
        """Register ``undo`` to run when this fiber disposes; return its disposer.

        Calling the disposer early runs ``undo`` once and forgets it here.
        """
        self.check_active()
        owned = self._owned

        def run() -> Any:
            owned.pop(disposer, None)
            return undo()

        disposer = Disposer(run)
        owned[disposer] = None
        return disposer

    def track(self, task: asyncio.Task[Any]) -> None:
        """Keep a strong reference to ``task`` until it finishes; cancel it on disposal."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- disposal --------------------------------------------------------------------------

    def _unwind(self) -> list[Awaitable[Any]]:
        """Dispose synchronously; return awaitables still to settle (async teardowns first in
        disposal order, cancelled tasks after)."""
        if not self._active:
            return []
        self._active = False
        if self.parent is not None:
            self.parent._owned.pop(self, None)
        pending: list[Awaitable[Any]] = []
        tasks: list[asyncio.Task[Any]] = []
        owned = self._owned
        while owned:
            entry, _ = owned.popitem()
            try:
                if isinstance(entry, Fiber):
                    for aw in entry._unwind():
                        (tasks if isinstance(aw, asyncio.Task) else pending).append(aw)  # type: ignore[arg-type]
                    continue
                result = entry()
            except Exception as exc:
                self._fail(entry, exc)
                continue
            if result is not None and is_awaitable(result):
                pending.append(result)
        for task in self._tasks:
            task.cancel()
            tasks.append(task)
        pending.extend(tasks)
        return pending

    def _fail(self, entry: object, exc: Exception) -> None:
        _log.error("disposer %r of scope %r raised", entry, self.path, exc_info=exc)
        if self._report is not None:
            self._report("fiber/dispose", entry, exc)

    def dispose(self) -> None:
        """Unwind everything this scope owns (idempotent, synchronous).

        Async teardowns are scheduled on the running loop; use :meth:`aclose` to await them.
        """
        pending = [aw for aw in self._unwind() if not isinstance(aw, asyncio.Future)]
        if not pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            close_unstarted(pending)
            _log.warning(
                "scope %r has %d async teardown(s) but no running event loop; "
                "they were dropped (use 'await fiber.aclose()')",
                self.path,
                len(pending),
            )
            return
        self.track(loop.create_task(self._drain(pending)))

    async def aclose(self) -> None:
        """Dispose, then await async teardowns (in disposal order) and owned tasks.

        Teardown errors are logged and reported, never raised. Cancelling ``aclose`` closes the
        teardowns it had not reached yet.
        """
        await self._drain(self._unwind())
        current = asyncio.current_task()
        rest = [t for t in self._tasks if t is not current]
        if rest:
            await asyncio.wait(rest)

    async def _drain(self, pending: list[Awaitable[Any]]) -> None:
        futures: list[asyncio.Future[Any]] = []
        it = iter(pending)
        try:
            for aw in it:
                if isinstance(aw, asyncio.Future):
                    futures.append(aw)
                    continue
                try:
                    await aw
                except Exception as exc:
                    self._fail(aw, exc)
        finally:
            close_unstarted(it)
        if futures:
            await asyncio.wait(futures)

    def __repr__(self) -> str:
        state = "active" if self._active else "disposed"
        return f"<Fiber {self.path!r} {state}>"

    def _ipython_display_(self) -> None:
        """A scope is plumbing, not a result: as a notebook cell's last expression it shows
        nothing (``repr`` still names it)."""


__all__ = ["Fiber", "InactiveContextError", "close_unstarted", "is_awaitable"]
