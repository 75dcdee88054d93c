"""One writer for each piece of mutable state, checked on the source with ``ast``.

A turn's state (``loop/_state.py`` ``TurnState``) changes only through its own transition
methods, except in the driver that owns the running turn (see ``_state``'s docstring); an
agent's ``disposed`` flag is set in exactly one place.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from agentloop_nb.loop._state import TurnState

PACKAGE = Path(__file__).resolve().parent.parent / "agentloop_nb"
OWNERS = {PACKAGE / "loop" / "_state.py", PACKAGE / "loop" / "_driver.py"}


def _stores(tree: ast.AST) -> Iterator[ast.Attribute]:
    """Every attribute an assignment (plain, augmented, annotated, tuple) writes."""
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets.extend(target.elts)
            elif isinstance(target, ast.Attribute):
                yield target


def _modules() -> Iterator[tuple[Path, ast.AST, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        yield path, ast.parse(source), source


def test_turn_state_is_written_only_by_its_transitions_and_the_driver() -> None:
    slots = set(TurnState.__slots__)
    bad = []
    for path, tree, source in _modules():
        if path in OWNERS or "TurnState" not in source:
            continue
        for store in _stores(tree):
            on_self = isinstance(store.value, ast.Name) and store.value.id == "self"
            if store.attr in slots and not on_self:
                where = path.relative_to(PACKAGE.parent)
                bad.append(f"{where}:{store.lineno}: writes .{store.attr}")
    assert not bad, "TurnState written outside its transitions:\n" + "\n".join(bad)


def test_disposed_is_set_in_one_place() -> None:
    sets = []  # every store of ``.disposed`` other than the initial ``False``
    for path, tree, _ in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign):
                continue
            initial = isinstance(node.value, ast.Constant) and node.value.value is False
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr == "disposed":
                    where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                    sets.append(f"{where} (initial)" if initial else where)
    real = [s for s in sets if not s.endswith("(initial)")]
    assert len(real) == 1 and real[0].startswith("agentloop_nb/loop/_state.py:"), sets
    assert all(s.startswith("agentloop_nb/loop/_state.py:") for s in sets), sets
