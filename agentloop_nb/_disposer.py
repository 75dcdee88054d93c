"""The ``Disposer`` returned by every registration: an idempotent callable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Disposer:
    """Undo one registration. Calling it again does nothing; ``disposed`` says whether it ran.

    The wrapped callback may return an awaitable (async teardown); the first call returns it so
    an owner can await it, later calls return ``None``.
    """

    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[], Any] | None = None) -> None:
        self._fn = fn

    @property
    def disposed(self) -> bool:
        return self._fn is None

    def __call__(self) -> Any:
        fn, self._fn = self._fn, None
        if fn is None:
            return None
        return fn()

    def __repr__(self) -> str:
        return f"<Disposer {'disposed' if self._fn is None else 'live'}>"

    def _ipython_display_(self) -> None:
        """A registration's handle is not a result: as a notebook cell's last expression
        (``ctx.on(...)``, ``kernel_tools(agent)``) it shows nothing; ``repr`` still says
        whether it is live."""
