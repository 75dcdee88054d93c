"""Plugin cells: ``%%plugin NAME`` and its plain-Python twin :func:`plugin`.

Both apply a *named* plugin on the App's root context (``ctx.plugin(fn, name=NAME)``), so
re-running the cell first disposes the previous scope of that name (its listeners, tools,
prompt sections...) instead of adding a second copy; an exception while the cell runs disposes
everything it registered and propagates, leaving no half-registered plugin (the old scope of
that name is gone too: the cell asked for it to be replaced).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

from ...errors import InvalidValueError
from .._state import app

_MISSING = object()


def run_plugin_cell(shell: Any, root: Any, name: str, cell: str) -> Any:
    """Execute ``cell`` in the user namespace as plugin ``name`` with ``ctx`` bound to the
    plugin's context while it runs (restored afterwards, so later cells see the App's ``ctx``
    again; a handler that needs its plugin context later should capture it, e.g.
    ``my = ctx``). IPython syntax (``%magics``) works; top-level ``await`` does not (a plugin
    applies synchronously: start async work with ``ctx.effect``). Returns the plugin's scope
    (``Fiber``)."""
    code = shell.transform_cell(cell)
    filename = shell.compile.cache(code, shell.execution_count, raw_code=cell)
    compiled = compile(code, filename, "exec")
    ns = shell.user_ns

    def apply(pctx: Any, _config: Any) -> None:
        previous = ns.get("ctx", _MISSING)
        ns["ctx"] = pctx
        try:
            exec(compiled, shell.user_global_ns, ns)
        finally:
            if ns.get("ctx") is pctx:  # the cell did not rebind ctx itself
                if previous is _MISSING:
                    del ns["ctx"]
                else:
                    ns["ctx"] = previous

    apply.__name__ = name
    return root.plugin(apply, name=name)


class plugin:  # lower case: it reads as a function, ``with plugin("guard") as ctx:``
    """A named plugin scope for plain Python, as a context manager or a decorator.

    ``with plugin("guard") as ctx: ctx.on(...)`` — registrations made through ``ctx`` inside
    the block belong to the scope named ``guard``; running the block again replaces the old
    scope; an exception inside disposes what the block registered and propagates.

    ``@plugin("guard")`` on ``def setup(ctx): ...`` applies ``setup`` as that named plugin at
    once and returns the scope (``Fiber``).

    ``target`` is the context to apply on (default: the kernel App's root context, which
    needs ``%load_ext agentloop_nb``).
    """

    def __init__(self, name: str, *, target: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidValueError(f"a plugin cell needs a non-empty name, got {name!r}")
        self.name = name
        self._target = target
        self.fiber: Any = None

    def _root(self) -> Any:
        if self._target is not None:
            return self._target
        return app().ctx

    def __enter__(self) -> Any:
        box: list[Any] = []

        def apply(pctx: Any, _config: Any) -> None:
            box.append(pctx)

        apply.__name__ = self.name
        self.fiber = self._root().plugin(apply, name=self.name)
        return box[0]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None and self.fiber is not None:
            self.fiber.dispose()

    def __call__(self, fn: Callable[[Any], Any]) -> Any:
        def apply(pctx: Any, _config: Any) -> None:
            fn(pctx)

        apply.__name__ = self.name
        self.fiber = self._root().plugin(apply, name=self.name)
        return self.fiber


__all__ = ["plugin", "run_plugin_cell"]
