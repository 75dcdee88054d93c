"""Provenance: who bound each top-level name of the kernel, and with which line.

Every binding of a top-level name (created, rebound, deleted) is logged — by a user cell
(execution count, cell id, the line) or by an agent's run (agent, turn, call id, the code).
What changed is found by comparing the namespace before and after the run by identity (a
shallow copy of the namespace is kept for the run's duration: a C-level copy, then one pass
over the names after), so names bound indirectly (a function declaring ``global``) count too,
and a name the code only used or changed in place does not. *Which line* bound a name comes
from the AST analysis of :mod:`._bindings`, done lazily when a binding is shown, so a cell
pays for no parse. Names starting with ``_`` (IPython's output history) are not followed.
Bounded: the last 20 bindings per name and 10,000 names (the names bound longest ago are
forgotten first).

Secrets: the line of a binding of a secret-looking name (KEY, TOKEN, SECRET, PASSWORD) is
never shown, and the current secret values are masked in every line shown.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from ..._record import Record, set_field
from ...errors import InvalidValueError
from ._bindings import analyse
from ._describe import is_secret, mask, truncate

__all__ = ["Binding", "Provenance", "Watch"]

MAX_PER_NAME = 20
MAX_NAMES = 10_000
_LINE_CHARS = 160
_HIDDEN = "(line hidden: the name looks like a secret)"


Action = Literal["created", "rebound", "deleted", "restored", "removed"]


# A Record, not a frozen dataclass: %load_ext imports this module (the kernel memory logs
# bindings from the load on) and ``dataclass`` compiles the class's methods at import (~7 M).
class Binding(Record):
    """One binding of a name. ``action``: created / rebound / deleted, or restored / removed
    (by undo); ``by``: ``cell`` (``execution_count``, ``cell_id``), ``agent`` (``agent``,
    ``turn``, ``call_id``) or ``undo``; ``source`` the cell's (or the agent's) code, from
    which :attr:`line` is derived when asked."""

    __slots__ = (
        "action",
        "agent",
        "by",
        "call_id",
        "cell_id",
        "execution_count",
        "name",
        "source",
        "time",
        "turn",
    )
    __match_args__ = (
        "name",
        "action",
        "by",
        "source",
        "execution_count",
        "cell_id",
        "agent",
        "turn",
        "call_id",
        "time",
    )

    name: str
    action: Action
    by: Literal["cell", "agent", "undo"]
    source: str
    execution_count: int | None
    cell_id: str | None
    agent: str
    turn: int
    call_id: str
    time: float

    def __init__(
        self,
        name: str,
        action: Action,
        by: Literal["cell", "agent", "undo"],
        source: str = "",
        execution_count: int | None = None,
        cell_id: str | None = None,
        agent: str = "",
        turn: int = 0,
        call_id: str = "",
        time: float = 0.0,
    ) -> None:
        set_field(self, "name", name)
        set_field(self, "action", action)
        set_field(self, "by", by)
        set_field(self, "source", source)
        set_field(self, "execution_count", execution_count)
        set_field(self, "cell_id", cell_id)
        set_field(self, "agent", agent)
        set_field(self, "turn", turn)
        set_field(self, "call_id", call_id)
        set_field(self, "time", time)

    @property
    def line(self) -> str:
        """The statement that bound the name (``""`` when the code does not spell it, e.g. a
        function's ``global``); hidden for a secret-looking name."""
        if is_secret(self.name):
            return _HIDDEN
        return truncate(analyse(self.source).line_of(self.name), _LINE_CHARS) if self.source else ""

    def origin(self) -> str:
        """Where it came from, as one phrase: ``cell [4]`` or ``agent bob, turn 3, call c1``."""
        if self.by == "cell":
            count = f"[{self.execution_count}]" if self.execution_count is not None else "[?]"
            return f"cell {count}" + (f" (id {self.cell_id})" if self.cell_id else "")
        if self.by == "undo":
            return f"undo of agent {self.agent}'s run" + (
                f" {self.call_id}" if self.call_id else ""
            )
        return f"agent {self.agent}, turn {self.turn}" + (
            f", call {self.call_id}" if self.call_id else ""
        )

    def describe(self, secrets: Iterable[str] = ()) -> str:
        """``rebound by agent bob, turn 3, call c1: `df = df.dropna()```."""
        line = self.line
        if line == _HIDDEN:
            return f"{self.action} by {self.origin()} {line}"
        line = mask(line, secrets)
        return f"{self.action} by {self.origin()}" + (f": `{line}`" if line else "")


class Watch:
    """The namespace as it was before one run (a shallow copy: the objects by identity),
    made before the run and compared by :meth:`Provenance.record` after it."""

    __slots__ = ("before", "source")

    def __init__(self, source: str, ns: Mapping[str, Any]) -> None:
        self.source = source
        self.before = dict(ns)

    def absorb(self, ns: Mapping[str, Any], names: Iterable[str]) -> None:
        """Take ``names`` as they are now as the state before the run: someone else (an
        agent's run, an undo, while this cell awaited) bound them and logged it already."""
        for name in names:
            if name in ns:
                self.before[name] = ns[name]
            else:
                self.before.pop(name, None)


_MISSING = object()


class Provenance:
    """The bounded provenance log of one kernel (see the module docstring)."""

    def __init__(self, *, per_name: int = MAX_PER_NAME, max_names: int = MAX_NAMES) -> None:
        if per_name < 1 or max_names < 1:
            raise InvalidValueError("per_name and max_names must be at least 1")
        self.per_name = per_name
        self.max_names = max_names
        self._log: OrderedDict[str, deque[Binding]] = OrderedDict()
        self._agent_names: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._log)

    def record(
        self,
        watch: Watch,
        ns: Mapping[str, Any],
        *,
        by: Literal["cell", "agent"],
        execution_count: int | None = None,
        cell_id: str | None = None,
        agent: str = "",
        turn: int = 0,
        call_id: str = "",
    ) -> list[Binding]:
        """Log every name (not starting with ``_``) that now holds another object than before
        the run: created, rebound or deleted. Returns the bindings logged."""
        before = watch.before
        changed: list[tuple[str, str]] = []
        for name, value in ns.items():
            old = before.get(name, _MISSING)
            if old is not value and name[:1] != "_":
                changed.append((name, "created" if old is _MISSING else "rebound"))
        if len(before) > len(ns) - len([n for n, a in changed if a == "created"]):
            changed.extend((n, "deleted") for n in before if n not in ns and n[:1] != "_")
        logged = []
        now = time.time()
        for name, action in changed:
            binding = Binding(
                name=name,
                action=action,  # type: ignore[arg-type]
                by=by,
                source=watch.source,
                execution_count=execution_count,
                cell_id=cell_id,
                agent=agent,
                turn=turn,
                call_id=call_id,
                time=now,
            )
            self.add(binding)
            logged.append(binding)
        return logged

    def add(self, binding: Binding) -> None:
        """Log one binding (the bounds apply)."""
        log = self._log.get(binding.name)
        if log is None:
            log = self._log[binding.name] = deque(maxlen=self.per_name)
            while len(self._log) > self.max_names:
                gone, _ = self._log.popitem(last=False)
                self._agent_names.pop(gone, None)
        else:
            self._log.move_to_end(binding.name)
        log.append(binding)
        if binding.by == "agent":
            self._agent_names[binding.name] = None
            self._agent_names.move_to_end(binding.name)

    def why(self, name: str) -> list[Binding]:
        """The bindings of ``name``, newest first (``[]`` when none was seen)."""
        return list(reversed(self._log.get(name, ())))

    def last(self, name: str) -> Binding | None:
        log = self._log.get(name)
        return log[-1] if log else None

    def changed_by_agents(self) -> list[tuple[str, Binding]]:
        """Each name an agent bound, with its latest agent binding; most recent first."""
        out = []
        for name in reversed(self._agent_names):
            latest = next((b for b in self.why(name) if b.by == "agent"), None)
            if latest is not None:
                out.append((name, latest))
        return out

    def chain(self, name: str, secrets: Iterable[str] = ()) -> str:
        """``name: rebound by agent bob, ...; created by cell [4]: ...`` (newest first)."""
        bindings = self.why(name)
        if not bindings:
            return f"{name}: no binding seen (not bound by a cell or an agent since the extension loaded)"
        secrets = list(secrets)
        return f"{name}: " + "; ".join(b.describe(secrets) for b in bindings)
