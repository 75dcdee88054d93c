"""The notebook layer's import graph: no module imports one that imports it back.

Every import counts, wherever it sits: at module level, inside a function or under
``TYPE_CHECKING`` (an import moved into a function still ties the two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

import agentloop_nb.jupyter

PACKAGE = "agentloop_nb.jupyter"
ROOT = Path(agentloop_nb.jupyter.__file__).parent


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The sibling modules ``path`` imports (relative or absolute, anywhere in the file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1:
                names = [base.split(".")[0]] if base else [a.name for a in node.names]
            elif node.level == 0 and base.startswith(PACKAGE + "."):
                names = [base[len(PACKAGE) + 1 :].split(".")[0]]
            elif node.level == 0 and base == PACKAGE:
                names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [
                a.name[len(PACKAGE) + 1 :].split(".")[0]
                for a in node.names
                if a.name.startswith(PACKAGE + ".")
            ]
        found.update(n for n in names if n in modules)
    return found


def _graph() -> dict[str, set[str]]:
    files = {p.stem: p for p in ROOT.glob("*.py") if p.stem != "__init__"}
    return {name: _imports(path, set(files)) for name, path in files.items()}


def _cycle_through(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph[node]):
            if nxt == start:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_module_of_the_notebook_layer_imports_one_that_imports_it_back() -> None:
    graph = _graph()
    assert {"_state", "_magics", "_extension", "_cellplugin"} <= set(graph)
    cycles = [c for m in sorted(graph) if (c := _cycle_through(m, graph)) is not None]
    assert cycles == []


def test_the_kernel_state_is_a_leaf_that_magics_extension_and_plugin_cells_share() -> None:
    graph = _graph()
    assert graph["_state"].isdisjoint({"_magics", "_extension", "_cellplugin"})
    for user in ("_magics", "_extension", "_cellplugin"):
        assert "_state" in graph[user], user


def test_a_function_level_import_counts_as_an_edge(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ._a import A\n"
        "def f():\n    from . import _b\n    import agentloop_nb.jupyter._c\n"
    )
    assert _imports(source, {"_a", "_b", "_c", "_d"}) == {"_a", "_b", "_c"}
