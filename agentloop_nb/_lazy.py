"""Lazy package exports: a package names what it exports, a submodule loads on first use.

``import agentloop_nb`` and ``%load_ext agentloop_nb`` are paid at every kernel start; importing
a package must not import every room of it (the JSONL backend and the session listing for a
program without persistence; in the notebook layer the widgets pull in ipywidgets, the bridge's
messages pydantic models, the tools difflib...). A package's ``__init__`` declares
``_EXPORTS = LazyExports(__name__, {"._sub": ("Name", ...), ...})`` and
``def __getattr__(name): return _EXPORTS.load(name)`` (and ``__dir__`` returning
``_EXPORTS.dir()`` where ``dir()`` should list them before they load); the same names are imported under
``TYPE_CHECKING`` for type checkers (``tests/test_startup.py`` checks the two agree).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any


class LazyExports:
    """The exports of package ``package``: submodule (relative name) → the names it defines."""

    def __init__(self, package: str, table: Mapping[str, Iterable[str]]) -> None:
        self.package = package
        # Read-only: a declaration, not a registry (nothing adds to it at run time).
        self.home = MappingProxyType({name: sub for sub, names in table.items() for name in names})

    def names(self) -> list[str]:
        """Every exported name, sorted (what ``__all__`` lists)."""
        return sorted(self.home)

    def dir(self) -> list[str]:
        """What the package's ``__dir__`` lists: its namespace and the exports not loaded yet."""
        return sorted(set(vars(sys.modules[self.package])) | set(self.home))

    def load(self, name: str) -> Any:
        """Import the submodule defining ``name`` and return it; it is then cached in the
        package's namespace, so the next access does not come here. Raises
        ``AttributeError`` for a name the package does not export."""
        sub = self.home.get(name)
        if sub is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(sub, self.package), name)
        setattr(sys.modules[self.package], name, value)
        return value


__all__ = ["LazyExports"]
