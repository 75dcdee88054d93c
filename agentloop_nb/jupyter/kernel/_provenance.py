"""Provenance: who bound each top-level name of the kernel, and with which line.

Every binding of a top-level name (created, rebound, deleted) is logged — by a user cell (execution count, cell id, the
line) or by an agent's run (agent, turn, call id, the code) — from the AST analysis of
:mod:`._bindings` plus an identity check of those names before and after the run, so a name
the code spells but did not change is not logged. Bounded: the last 20 bindings per name and
10,000 names (the names bound longest ago are forgotten first).

Secrets: the line of a binding of a secret-looking name (KEY, TOKEN, SECRET, PASSWORD) is
never kept, and secret values are masked in every line when it is recorded and when it is
shown.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ._bindings import Bindings
from ._describe import is_secret, mask, secret_values, truncate

__all__ = ["Binding", "Provenance", "Watch"]

MAX_PER_NAME = 20
MAX_NAMES = 10_000
_LINE_CHARS = 160
_CODE_CHARS = 400
_HIDDEN = "(line hidden: the name looks like a secret)"


@dataclass(frozen=True)
class Binding:
    """One binding of a name. ``action``: created / rebound / deleted / restored (undo);
    ``by``: ``cell`` (``execution_count``, ``cell_id``) or ``agent`` (``agent``, ``turn``,
    ``call_id``) or ``undo``; ``line`` the statement (an agent's whole ``code`` too)."""

    name: str
    action: Literal["created", "rebound", "deleted", "restored", "removed"]
    by: Literal["cell", "agent", "undo"]
    line: str
    execution_count: int | None = None
    cell_id: str | None = None
    agent: str = ""
    turn: int = 0
    call_id: str = ""
    code: str = ""
    time: float = 0.0

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
        line = mask(self.line, secrets)
        shown = f" {line}" if line == _HIDDEN else (f": `{line}`" if line else "")
        return f"{self.action} by {self.origin()}{shown}"


class Watch:
    """The names one run may bind and the objects they held before it (by identity): made
    before the run, closed by :meth:`Provenance.record` after it."""

    __slots__ = ("before", "bindings")

    def __init__(self, bindings: Bindings, ns: Mapping[str, Any]) -> None:
        self.bindings = bindings
        missing = _MISSING
        self.before = {n: ns.get(n, missing) for n in bindings.names}


_MISSING = object()


class Provenance:
    """The bounded provenance log of one kernel (see the module docstring)."""

    def __init__(self, *, per_name: int = MAX_PER_NAME, max_names: int = MAX_NAMES) -> None:
        if per_name < 1 or max_names < 1:
            raise ValueError("per_name and max_names must be at least 1")
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
        code: str = "",
    ) -> list[Binding]:
        """Log every name of ``watch`` that now holds another object (created, rebound,
        deleted); a name the code only used or changed in place is not a binding. Returns the
        bindings logged."""
        found = watch.bindings
        logged = []
        secrets: list[str] | None = None
        now = time.time()
        for name, old in watch.before.items():
            new = ns.get(name, _MISSING)
            if new is old:  # spelt, or changed in place: not a binding
                continue
            if new is _MISSING:
                action = "deleted"
            elif old is _MISSING:
                action = "created"
            else:
                action = "rebound"
            if secrets is None:
                secrets = secret_values(ns)
            line = _HIDDEN if is_secret(name) else truncate(found.line_of(name), _LINE_CHARS)
            binding = Binding(
                name=name,
                action=action,  # type: ignore[arg-type]
                by=by,
                line=mask(line, secrets),
                execution_count=execution_count,
                cell_id=cell_id,
                agent=agent,
                turn=turn,
                call_id=call_id,
                code=truncate(mask(code, secrets), _CODE_CHARS) if code else "",
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
