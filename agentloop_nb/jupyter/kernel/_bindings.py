"""Which top-level names a piece of code may bind, delete or change in place: the one AST
analysis that undo snapshots and provenance share.

Static and conservative: the analysis reads the code, never runs it. It follows the module
scope only (a ``def``'s or ``class``'s body runs later or in its own scope), except that a
``global X`` anywhere counts as a binding of ``X`` (the function may rebind it when called).

- **bound**: assignment targets (``=``, ``+=``, annotated, unpacking, ``for``, ``with ... as``,
  ``except ... as``, walrus — also inside comprehensions, where it leaks), imports, ``def`` and
  ``class`` names, ``match`` captures, ``global`` declarations;
- **deleted**: ``del NAME``;
- **mutated**: names whose object the code may change without rebinding them: the root name of
  a method call (``lst.append(1)``, ``df.drop(..., inplace=True)``, ``df["a"].fillna(...)``) and
  of an attribute or subscript target (``df["a"] = 1``, ``obj.x += 1``, ``del d[k]``). A
  mutation through a plain function argument (``random.shuffle(lst)``) is not seen.

``from m import *`` binds names the code does not spell: ``star`` says so. A cell IPython could
not parse (syntax error) binds nothing.
"""

from __future__ import annotations

import ast
import functools

from ..._record import Record, set_field

__all__ = ["Bindings", "analyse"]

# Names IPython owns (the output history) or Python sets itself.
_IGNORED = frozenset({"_", "__", "___", "__builtins__", "__name__", "__doc__"})
_CACHE_SIZE = 256
_COMPOUND = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.Match,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)


# A Record, not a frozen dataclass: %load_ext imports this module (undo and provenance use it)
# and ``dataclass`` compiles the class's methods at import (about 6 M instructions).
class Bindings(Record):
    """What ``analyse(code)`` found. ``bound``/``deleted``/``mutated`` map a name to the
    1-based line of the (last) statement that binds / deletes / may change it; ``ends`` maps
    that line to the statement's last line; ``lines`` are the code's lines (``line_of(name)``
    gives the statement)."""

    __slots__ = ("bound", "deleted", "ends", "lines", "mutated", "star")
    __match_args__ = ("bound", "deleted", "mutated", "star", "lines", "ends")

    bound: dict[str, int]
    deleted: dict[str, int]
    mutated: dict[str, int]
    star: bool
    lines: tuple[str, ...]
    ends: dict[int, int]

    def __init__(
        self,
        bound: dict[str, int] | None = None,
        deleted: dict[str, int] | None = None,
        mutated: dict[str, int] | None = None,
        star: bool = False,
        lines: tuple[str, ...] = (),
        ends: dict[int, int] | None = None,
    ) -> None:
        set_field(self, "bound", {} if bound is None else bound)
        set_field(self, "deleted", {} if deleted is None else deleted)
        set_field(self, "mutated", {} if mutated is None else mutated)
        set_field(self, "star", star)
        set_field(self, "lines", lines)
        set_field(self, "ends", {} if ends is None else ends)

    @property
    def names(self) -> set[str]:
        """Every name the code may rebind, delete or change in place."""
        return {*self.bound, *self.deleted, *self.mutated}

    def line_of(self, name: str) -> str:
        """The statement that binds (or deletes, or changes) ``name``, its lines stripped and
        joined by one space; ``""`` when the code does not spell it."""
        number = self.bound.get(name) or self.deleted.get(name) or self.mutated.get(name)
        if not number or number > len(self.lines):
            return ""
        last = min(self.ends.get(number, number), len(self.lines))
        return " ".join(part.strip() for part in self.lines[number - 1 : last] if part.strip())


def _root(node: ast.AST) -> ast.Name | None:
    """The name at the bottom of ``a.b[c].d(...)`` chains, or ``None``."""
    while True:
        if isinstance(node, ast.Name):
            return node
        if isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None


class _Walker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.bound: dict[str, int] = {}
        self.deleted: dict[str, int] = {}
        self.mutated: dict[str, int] = {}
        self.star = False
        self.line = 0  # the line of the statement being walked
        self.ends: dict[int, int] = {}

    def _add(self, table: dict[str, int], name: str) -> None:
        if name not in _IGNORED:
            table[name] = self.line

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt):  # bindings report the line of their own statement
            self.line = node.lineno
            if not isinstance(node, _COMPOUND):  # a compound statement's own line only
                self.ends[node.lineno] = node.end_lineno or node.lineno
        super().visit(node)

    # -- targets ------------------------------------------------------------------------------

    def target(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            self._add(self.bound, node.id)
        elif isinstance(node, ast.Tuple | ast.List):
            for element in node.elts:
                self.target(element)
        elif isinstance(node, ast.Starred):
            self.target(node.value)
        elif isinstance(node, ast.Attribute | ast.Subscript):
            root = _root(node)
            if root is not None:
                self._add(self.mutated, root.id)
            self.visit(node)  # indices and the chain may call methods too

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for t in node.targets:
            self.target(t)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        self.target(node.target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.target(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.target(node.target)
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self.target(node.optional_vars)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self._add(self.bound, node.name)
        for stmt in node.body:
            self.visit(stmt)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.target(node.target)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            if isinstance(t, ast.Name):
                self._add(self.deleted, t.id)
            elif isinstance(t, ast.Tuple | ast.List):
                for element in t.elts:
                    self.visit_Delete(ast.Delete(targets=[element]))
            else:
                self.target(t)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(self.bound, alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.star = True
            else:
                self._add(self.bound, alias.asname or alias.name)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self._add(self.bound, name)

    # -- scopes that run later or elsewhere ---------------------------------------------------

    def _globals_in(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Global):
                    self.visit_Global(sub)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)
        self._add(self.bound, node.name)
        self._globals_in(node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        self._add(self.bound, node.name)
        self._globals_in(node.body)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in [*node.args.defaults, *node.args.kw_defaults]:
            if expr is not None:
                self.visit(expr)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        # The loop variable stays inside the comprehension; a walrus in it does not.
        self.visit(node.iter)
        for cond in node.ifs:
            self.visit(cond)

    # -- expressions --------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute):
            root = _root(node.func)
            if root is not None:
                self._add(self.mutated, root.id)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self._add(self.bound, node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._add(self.bound, node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self._add(self.bound, node.rest)
        self.generic_visit(node)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def analyse(code: str) -> Bindings:
    """The names ``code`` may bind, delete or change in place (see the module docstring).
    Never raises: code that does not parse binds nothing. Recent answers are cached (a cell
    re-run costs a dictionary lookup; a pure function's memo, not a registry)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        found = Bindings(lines=tuple(code.splitlines()))
    else:
        walker = _Walker()
        for stmt in tree.body:
            walker.visit(stmt)
        found = Bindings(
            bound=walker.bound,
            deleted=walker.deleted,
            mutated=walker.mutated,
            star=walker.star,
            lines=tuple(code.splitlines()),
            ends=walker.ends,
        )
    return found
