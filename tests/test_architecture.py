"""Package structure rules, checked on the source with ``ast``.

(a) No module reads or writes another module's underscored members: an attribute access
``x._name`` (single leading underscore, not a dunder) is allowed only on ``self``/``cls`` or
when ``_name`` is defined in the same module (a private helper class of that module).
(b) No import circle among the modules of ``loop/``, ``session/``, ``jupyter/`` and ``tools/``:
every import counts, also those under ``TYPE_CHECKING`` and inside functions.
(c) Every import points down the layer table of ``docs/architecture.md`` (read from the doc),
rooms of an independent layer do not import each other, and a module reaches another room
only through its package (never its private modules); the module map lists every module once.
(d) The bundled plugins (``plugins/``) use public names only: they import no private module
(a dotted path with an underscored part) from outside ``plugins/``.

``ALLOWED`` lists deliberate exceptions with their reason. ``KNOWN_ELSEWHERE_*`` list what is
still being fixed outside the loop; they may only shrink (a stale entry fails too).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "agentloop_nb"
ASSERTED = (
    "agentloop_nb.loop",
    "agentloop_nb.session",
    "agentloop_nb.jupyter",
    "agentloop_nb.tools",
)

# (module, attribute): reason
ALLOWED: dict[tuple[str, str], str] = {
    ("agentloop_nb.tools._define", "_getframe"): "sys._getframe: the stdlib's API",
    ("agentloop_nb.tools._runtime", "_getframe"): "sys._getframe: the stdlib's API",
    ("agentloop_nb.jupyter.kernel._sync", "_asyncio_future_blocking"): "asyncio's Future protocol",
    ("agentloop_nb.llm._guard", "_callbacks"): (
        "the stream guard's watch is appended to and removed from its signal directly, as "
        "AbortScope and AbortController.follow do: add_callback's closure and disposer per "
        "model stream cost more than the rest of a short stream's setup"
    ),
    ("agentloop_nb.tools._bodies", "_callbacks"): (
        "a suspended tool body's abort watch is appended to and removed from its signal "
        "directly, as AbortScope does: add_callback's closure and disposer ran once per pooled call"
    ),
    ("agentloop_nb.tools._dispatch", "_callbacks"): (
        "a pool worker's body scope puts its canceller on each body's signal directly, as "
        "AbortScope does (once per pooled call)"
    ),
    ("agentloop_nb.tools._bodies", "_current_tasks"): (
        "asyncio.current_task's own lookup, on Python 3.11 only (a Python function there; a "
        "suspending tool body asks once: every pooled call)"
    ),
    ("agentloop_nb.llm._guard", "_current_tasks"): (
        "asyncio.current_task's own lookup, on Python 3.11 only (a Python function there; the "
        "guard asks once per chunk; from 3.12 on the builtin is used)"
    ),
}

# A private module of another room that a module may import (module, imported): reason.
ROOM_REACHES: dict[tuple[str, str], str] = {
    ("agentloop_nb.loop._driver", "agentloop_nb.session._frozen"): (
        "append takes a FrozenDict as-is: the unchecked wrapper must not become public API"
    ),
    ("agentloop_nb.loop._request", "agentloop_nb.session._frozen"): (
        "chunks are frozen from their validated fields (the same unchecked wrapper)"
    ),
    ("agentloop_nb.loop._request", "agentloop_nb.llm._options"): (
        "request_options: the request's frozen options built by their twin class, the "
        'loop\'s internal fast path (benchmarks/README.md "Step (session 14)"), not public API'
    ),
    ("agentloop_nb.loop._driver", "agentloop_nb.session._assistant_log"): (
        "the assembled message logged from its fields with the node it derives: the loop's "
        "internal fast path, not public API"
    ),
    ("agentloop_nb.loop._driver", "agentloop_nb.session._user_log"): (
        "an entered user message logged from its fields with the node it derives: the loop's "
        "internal fast path, not public API"
    ),
    ("agentloop_nb.loop._inbox", "agentloop_nb.session._user_log"): (
        "a queued user message's logged dump built from its fields, and a message built from "
        "a str as validation builds it: the loop's internal fast path, not public API"
    ),
    ("agentloop_nb.loop._inbox", "agentloop_nb.session._frozen"): (
        "a splice of frozen dumps wrapped as-is (the unchecked wrapper)"
    ),
    ("agentloop_nb.loop._header", "agentloop_nb.session._frozen"): (
        "a request header's data wrapped as-is, its tool schemas frozen by the checked walk "
        "(freeze_plain_dict) once while they stand"
    ),
    ("agentloop_nb.loop._call_log", "agentloop_nb.session._frozen"): (
        "tool/call and tool/result data of exact strs and ints wrapped as-is (FrozenDict built "
        "as the unchecked wrapper builds it)"
    ),
    ("agentloop_nb.loop._call_log", "agentloop_nb.session._nodes"): (
        "tool_result_node: a committed plain result's message handed to append with its data "
        "(as the driver's assistant message), not parsed back; the loop's internal fast path"
    ),
    ("agentloop_nb.loop._scheduler", "agentloop_nb.tools._decisions"): (
        "want_admitted: the loop, which runs nothing between a call's admission and its body, "
        "asks for the validated arguments to be handed on (off for direct callers); "
        "hand_scope: a pool worker hands its body scope on to the dispatch phase"
    ),
    ("agentloop_nb.loop._scheduler", "agentloop_nb.tools._dispatch"): (
        "WorkerScope: one cancel scope per pool worker for the bodies it runs, the loop's "
        'internal fast path (benchmarks/README.md "Pool (session 11)"), not public API; '
        "dispatch: the phase itself, without the facade's frame (session 12)"
    ),
    ("agentloop_nb.loop._scheduler", "agentloop_nb.tools._admit"): (
        "admit_now: the pool admits a call without a coroutine when nothing is to be "
        'awaited, the loop\'s internal fast path (benchmarks/README.md "Pool (session 12)")'
    ),
    ("agentloop_nb.loop._scheduler", "agentloop_nb.tools._runtime"): (
        "registry_of: the registry the pool hands to admit_now and dispatch (as the facade's "
        "pre_execute and dispatch pass it); not public API"
    ),
    ("agentloop_nb.loop._scheduler", "agentloop_nb.tools._settle"): (
        "settle_now: the pool settles a call without a coroutine when nothing is to be "
        'awaited, the loop\'s internal fast path (benchmarks/README.md "Pool (session 12)")'
    ),
}

# Private modules a bundled plugin may import (module, imported module): reason.
PLUGIN_PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}

# Private reaches other areas are removing (module, attribute).
KNOWN_ELSEWHERE_REACHES: frozenset[tuple[str, str]] = frozenset()

# Import circles other areas are breaking (the modules of one circle).
KNOWN_ELSEWHERE_CYCLES: frozenset[frozenset[str]] = frozenset()


@functools.cache
def _modules() -> dict[str, ast.Module]:
    out: dict[str, ast.Module] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_privates(tree: ast.Module) -> set[str]:
    """Underscored names a module defines: functions, classes, assigned names, attributes set
    on ``self``/``cls`` and ``__slots__`` entries (writing ``other._x`` defines nothing)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    return {n for n in names if _is_private(n)}


def private_reaches() -> list[tuple[str, int, str]]:
    """Every ``x._name`` access of another module's private member: (module, line, attr)."""
    found: list[tuple[str, int, str]] = []
    for module, tree in _modules().items():
        own = _defined_privates(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in own:
                continue
            found.append((module, node.lineno, node.attr))
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """module → the package modules it imports (explicit targets only)."""
    modules = _modules()
    packages = {
        m for m in modules if (PACKAGE.parent / Path(*m.split(".")) / "__init__.py").exists()
    }
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, tree in modules.items():
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, module in packages, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            graph[module].update(t for t in targets if t in modules and t != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> Iterator[None]:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                yield from visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            for _ in visit(v):
                pass
    return out


def _asserted(component: frozenset[str]) -> bool:
    return any(m == p or m.startswith(p + ".") for m in component for p in ASSERTED)


def _fmt(component: frozenset[str]) -> str:
    return " <-> ".join(sorted(component))


def test_no_module_reaches_another_modules_private_members() -> None:
    reaches = private_reaches()
    bad = [
        f"{m}:{line}: ._{attr[1:]}"
        for m, line, attr in reaches
        if (m, attr) not in ALLOWED and (m, attr) not in KNOWN_ELSEWHERE_REACHES
    ]
    assert not bad, "private members of another module are reached:\n" + "\n".join(bad)


def test_no_import_circle_inside_loop_session_jupyter_or_tools() -> None:
    found = cycles(import_graph())
    others = [c for c in found if not _asserted(c)]
    if others:
        print("import circles outside the asserted folders:", *map(_fmt, others), sep="\n  ")
    bad = [_fmt(c) for c in found if _asserted(c) and c not in KNOWN_ELSEWHERE_CYCLES]
    assert not bad, "import circles:\n" + "\n".join(bad)


def private_module_imports(prefix: str) -> set[tuple[str, str]]:
    """(module, imported module) for every module under ``prefix`` importing a private module
    (one with an underscored dotted part) from outside ``prefix``."""
    found: set[tuple[str, str]] = set()
    for module, targets in import_graph().items():
        if not module.startswith(prefix + "."):
            continue
        for target in targets:
            outside = not target.startswith(prefix + ".") and target != prefix
            if outside and any(_is_private(part) for part in target.split(".")):
                found.add((module, target))
    return found


def test_bundled_plugins_import_only_public_modules() -> None:
    found = private_module_imports("agentloop_nb.plugins")
    bad = sorted(f"{m} imports {t}" for m, t in found - set(PLUGIN_PRIVATE_IMPORTS))
    assert not bad, "plugins import private modules:\n" + "\n".join(bad)
    stale = set(PLUGIN_PRIVATE_IMPORTS) - found
    assert not stale, f"no longer imported: remove from PLUGIN_PRIVATE_IMPORTS: {stale}"


def test_the_known_elsewhere_lists_hold_only_what_still_exists() -> None:
    reaches = {(m, attr) for m, _line, attr in private_reaches()}
    found = set(cycles(import_graph()))
    stale = [f"reach {r}" for r in KNOWN_ELSEWHERE_REACHES - reaches]
    stale += [f"cycle {_fmt(c)}" for c in KNOWN_ELSEWHERE_CYCLES - found]
    stale += [f"allowed {a}" for a in set(ALLOWED) - reaches]
    assert not stale, "fixed: remove from the lists:\n" + "\n".join(stale)


def test_the_rules_catch_a_private_reach_and_a_circle() -> None:
    tree = ast.parse("def f(x):\n    return x._hidden + self._mine\n")
    assert _defined_privates(tree) == set()
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert _is_private("_usage") and not _is_private("__init__") and not _is_private("usage")


# -- the layer table of docs/architecture.md is true --------------------------------------

DOC = PACKAGE.parent / "docs" / "architecture.md"
_LAYER_ROW = re.compile(r"^\| (\d+) \| ([^|]+) \| ((?:`[^`]+` ?)+) \|$", re.MULTILINE)


@dataclass(frozen=True)
class Layer:
    number: int
    name: str
    prefixes: tuple[str, ...]  # dotted module names; a package prefix covers its modules

    @property
    def independent(self) -> bool:
        return "(independent)" in self.name


def _dotted(path: str) -> str:
    parts = ["agentloop_nb", *path.removesuffix("/").removesuffix(".py").split("/")]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layers(doc: str) -> list[Layer]:
    """The layer table: number, name and the modules or packages each row names."""
    return [
        Layer(int(n), name.strip(), tuple(_dotted(p) for p in re.findall(r"`([^`]+)`", mods)))
        for n, name, mods in _LAYER_ROW.findall(doc)
    ]


def place(module: str, table: list[Layer]) -> tuple[Layer, str] | None:
    """The layer and the room (longest prefix named by the table) ``module`` belongs to."""
    best: tuple[Layer, str] | None = None
    for layer in table:
        for prefix in layer.prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > len(best[1])
            ):
                best = (layer, prefix)
    return best


def layer_violations(graph: dict[str, set[str]], table: list[Layer]) -> list[str]:
    """Every import that goes up a layer, crosses between independent rooms, or reaches a
    private module of another room (rooms are the table's package prefixes)."""
    bad: list[str] = []
    for module in sorted(graph):
        here = place(module, table)
        if here is None:
            bad.append(f"{module}: in no layer of docs/architecture.md")
            continue
        for target in sorted(graph[module]):
            there = place(target, table)
            if there is None:
                continue  # reported as a module of its own
            (lm, room), (lt, troom) = here, there
            if lt.number > lm.number:
                bad.append(f"{module} (layer {lm.number}) imports {target} (layer {lt.number})")
            elif lt is lm and lm.independent and room != troom:
                bad.append(f"{module} imports {target}: independent rooms of layer {lm.number}")
            elif (module, target) in ROOM_REACHES:
                continue
            elif (
                room != troom
                and target != troom
                and _is_room(troom)
                and any(_is_private(part) for part in target[len(troom) + 1 :].split("."))
            ):
                bad.append(f"{module} imports {target}: use the room's package {troom}")
    return bad


def _is_room(prefix: str) -> bool:
    return (PACKAGE.parent / Path(*prefix.split(".")) / "__init__.py").exists()


def test_every_import_points_down_the_layer_table_of_the_architecture_doc() -> None:
    table = layers(DOC.read_text(encoding="utf-8"))
    assert [layer.number for layer in table] == list(range(1, len(table) + 1))
    bad = layer_violations(import_graph(), table)
    assert not bad, "imports against docs/architecture.md's layers:\n" + "\n".join(bad)


def test_the_layer_rule_catches_an_upward_import_a_room_crossing_and_a_private_reach() -> None:
    table = layers(
        "| 1 | low | `a.py` `r/` |\n| 2 | mid (independent) | `m/` `n/` |\n| 3 | top | `t.py` |\n"
    )
    graph = {
        "agentloop_nb.a": {"agentloop_nb.t"},  # up
        "agentloop_nb.m.x": {"agentloop_nb.n.y"},  # across independent rooms
        "agentloop_nb.n.y": set(),
        "agentloop_nb.t": {"agentloop_nb.a", "agentloop_nb.m.x"},  # down: fine
        "agentloop_nb.z": set(),  # in no layer
    }
    bad = layer_violations(graph, table)
    assert len(bad) == 3, bad
    assert "layer 1" in bad[0] and "independent" in bad[1] and "in no layer" in bad[2]


def test_the_architecture_map_lists_every_module_once_sorted_by_path() -> None:
    doc = DOC.read_text(encoding="utf-8")
    listed = re.findall(r"^\| `(agentloop_nb/[\w/]+\.py)` \|", doc, re.MULTILINE)
    modules = sorted(str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py"))
    assert listed == modules, (
        f"add: {sorted(set(modules) - set(listed))}; remove: {sorted(set(listed) - set(modules))};"
        " each once, sorted by path"
    )
