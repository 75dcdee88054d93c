"""``KernelMemory``: what the kernel remembers about its own namespace — error autopsies, undo
snapshots of agents' runs, and the provenance of every top-level name.

One per kernel (the extension makes it and provides it as ``ctx.kernel_memory`` and as
``ctx.undo``, the service ``agent.undo()`` delegates to). It listens to IPython's
``pre_run_cell`` / ``post_run_cell`` events:

- ``pre_run_cell``: a shallow copy of the namespace (the objects by identity);
- ``post_run_cell``: the provenance of what the cell bound (one pass comparing the namespace
  with that copy), and an autopsy when it failed (or forgetting that cell's autopsy when it
  succeeded). Measured in ``benchmarks/bench_kernel_memory.py``.

Agents' runs go through :meth:`KernelMemory.begin_run` / :meth:`KernelMemory.end_run` (the
kernel tools' ``run_python`` does; the notebook tools' ``run_cell`` calls the same pair): an
undo snapshot before, its settlement, the provenance and the journal entry after. A cell
executed while an agent's run is open (``run_cell`` through the front end) is attributed to
that agent.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from ..._record import MutableRecord
from ...errors import InvalidValueError
from ._autopsy import Autopsies, Autopsy, build_autopsy
from ._describe import Describers, secret_values
from ._provenance import Binding, Provenance, Watch
from ._undo import DEFAULT_SIZE_LIMIT, NameOutcome, Snapshot, restore, snapshot_for

__all__ = ["AgentRun", "KernelMemory", "UndoReport"]

_log = logging.getLogger("agentloop_nb.jupyter")

#: Runs remembered per agent for undo (older ones are dropped).
MAX_RUNS = 20
#: Notebook tools whose edits undo leaves to the notebook's own history.
CELL_EDIT_TOOLS = frozenset({"insert_cell", "replace_cell", "delete_cell"})


# Mutable records, not dataclasses: %load_ext imports this module and ``dataclass`` compiles
# each class's methods from source at import. Both stay mutable, equal by their fields and
# unhashable, as the dataclasses were.
class AgentRun(MutableRecord):
    """One agent run in progress: its undo snapshot and provenance watch."""

    __slots__ = ("agent", "agent_name", "snapshot", "watch")
    __match_args__ = ("snapshot", "watch", "agent", "agent_name")

    def __init__(self, snapshot: Snapshot, watch: Watch, agent: Any, agent_name: str) -> None:
        self.snapshot = snapshot
        self.watch = watch
        self.agent = agent
        self.agent_name = agent_name


class UndoReport(MutableRecord):
    """What an undo did: ``outcomes`` per name, the ``runs`` undone (newest first) and
    ``notes`` (e.g. that cell edits are undone by the notebook's own history). Its repr is its
    text (what a cell ending in ``agent.undo()`` shows)."""

    __slots__ = ("agent_name", "notes", "outcomes", "runs")
    __match_args__ = ("agent_name", "outcomes", "runs", "notes")

    def __init__(
        self,
        agent_name: str,
        outcomes: list[NameOutcome] | None = None,
        runs: list[Snapshot] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.agent_name = agent_name
        self.outcomes: list[NameOutcome] = [] if outcomes is None else outcomes
        self.runs: list[Snapshot] = [] if runs is None else runs
        self.notes: list[str] = [] if notes is None else notes

    def outcome(self, name: str) -> str | None:
        """The outcome of ``name`` (``"restored"``, ...) or ``None`` when undo did not see it."""
        return next((o.outcome for o in self.outcomes if o.name == name), None)

    def __str__(self) -> str:
        if not self.runs:
            return f"{self.agent_name}: nothing to undo (no run of its code is remembered)"
        calls = ", ".join(f"{s.tool} {s.call_id}".strip() for s in self.runs)
        lines = [f"undid {len(self.runs)} run(s) of {self.agent_name} ({calls}):"]
        shown = [o for o in self.outcomes if o.outcome != "unchanged"]
        lines.extend(f"  {o}" for o in shown)
        if not shown:
            lines.append("  no name needed restoring")
        lines.extend(self.notes)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


class KernelMemory:
    """Autopsies, undo journal and provenance of one kernel (see the module docstring).

    ``size_limit``: values estimated above it are not copied for undo (default 50 MB);
    ``max_runs``: runs remembered per agent; ``max_chars``: bound of an autopsy's text;
    ``name_of(agent) -> str | None``: the name agents are shown by (default: their id);
    ``describers``: the registry an autopsy's locals are summarised with."""

    def __init__(
        self,
        shell: Any,
        *,
        size_limit: int = DEFAULT_SIZE_LIMIT,
        max_runs: int = MAX_RUNS,
        max_chars: int = 4000,
        name_of: Callable[[Any], str | None] | None = None,
        describers: Describers | None = None,
    ) -> None:
        if not isinstance(size_limit, int) or size_limit < 0:
            raise InvalidValueError(
                f"size_limit must be a number of bytes >= 0, got {size_limit!r}"
            )
        if not isinstance(max_runs, int) or max_runs < 1:
            raise InvalidValueError(f"max_runs must be an integer >= 1, got {max_runs!r}")
        self.shell = shell
        self.size_limit = size_limit
        self.max_runs = max_runs
        self.max_chars = max_chars
        self.name_of = name_of
        self.describers = describers
        self.autopsies = Autopsies()
        self.provenance = Provenance()
        self._journal: dict[str, deque[Snapshot]] = {}
        self._cell: tuple[Watch, str | None, str] | None = None
        self._open: AgentRun | None = None
        self._installed = False

    # -- IPython events ----------------------------------------------------------------------

    def install(self) -> None:
        """Listen to the shell's ``pre_run_cell`` / ``post_run_cell`` (idempotent)."""
        if self._installed or self.shell is None:
            return
        self.shell.events.register("pre_run_cell", self.pre_run_cell)
        self.shell.events.register("post_run_cell", self.post_run_cell)
        self._installed = True

    def uninstall(self) -> None:
        if not self._installed:
            return
        for event, fn in (
            ("pre_run_cell", self.pre_run_cell),
            ("post_run_cell", self.post_run_cell),
        ):
            with contextlib.suppress(ValueError):  # someone unregistered it already
                self.shell.events.unregister(event, fn)
        self._installed = False

    def pre_run_cell(self, info: Any) -> None:
        source = info.transformed_cell or info.raw_cell or ""
        self._cell = (Watch(source, self.shell.user_ns), info.cell_id, info.raw_cell or "")

    def post_run_cell(self, result: Any) -> None:
        cell, self._cell = self._cell, None
        if cell is None:
            return
        watch, cell_id, raw = cell
        count = result.execution_count
        try:
            # A cell an agent's run_cell executed is logged by that run's end_run.
            if self._open is None:
                self.provenance.record(
                    watch, self.shell.user_ns, by="cell", execution_count=count, cell_id=cell_id
                )
            error = result.error_in_exec or result.error_before_exec
            if error is None:
                self.autopsies.succeeded(cell_id, raw)
            elif isinstance(error, BaseException):
                self.autopsies.add(
                    build_autopsy(
                        error,
                        source=raw,
                        ns=self.shell.user_ns,
                        cell_id=cell_id,
                        execution_count=count,
                        max_chars=self.max_chars,
                        name_of=self._cell_name,
                        describers=self.describers,
                    )
                )
        except Exception:  # never break the user's cell for bookkeeping
            _log.exception("agentloop_nb: recording the cell's bindings or autopsy failed")

    def _cell_name(self, filename: str) -> str | None:
        fmt = getattr(getattr(self.shell, "compile", None), "format_code_name", None)
        if fmt is None:
            return None
        try:
            named = fmt(filename)
        except Exception:
            return None
        return " ".join(named) if named else None

    # -- agents' runs ------------------------------------------------------------------------

    def agent_name(self, agent: Any) -> str:
        name = self.name_of(agent) if self.name_of is not None and agent is not None else None
        return name or str(getattr(agent, "id", "agent"))

    def begin_run(
        self, code: str, *, agent: Any, call_id: str = "", turn: int = 0, tool: str = "run_python"
    ) -> AgentRun:
        """Before an agent's code runs: snapshot what it may touch. Pass the result to
        :meth:`end_run` once the code has run (whether it failed or not)."""
        ns = self.shell.user_ns
        name = self.agent_name(agent)
        snap = snapshot_for(
            code,
            self.shell,
            limit=self.size_limit,
            tool=tool,
            call_id=call_id,
            turn=turn,
            agent=name,
        )
        run = AgentRun(snap, Watch(code, ns), agent, name)
        self._open = run
        return run

    def end_run(self, run: AgentRun) -> list[Binding]:
        """After the run: settle the snapshot, log the provenance, keep it for undo."""
        if self._open is run:
            self._open = None
        snap = run.snapshot
        snap.settle(self.shell.user_ns)
        logged = self._record_agent(run.watch, run)
        self._absorb([b.name for b in logged])
        key = str(getattr(run.agent, "id", run.agent_name))
        journal = self._journal.setdefault(key, deque(maxlen=self.max_runs))
        journal.append(snap)
        return logged

    def _absorb(self, names: Iterable[str]) -> None:
        """Bindings logged while a user cell runs (it awaited an agent, or ran undo) are not
        that cell's: its diff must not log them a second time."""
        if self._cell is not None:
            self._cell[0].absorb(self.shell.user_ns, names)

    def _record_agent(self, watch: Watch, run: AgentRun) -> list[Binding]:
        snap = run.snapshot
        return self.provenance.record(
            watch,
            self.shell.user_ns,
            by="agent",
            agent=run.agent_name,
            turn=snap.turn,
            call_id=snap.call_id,
        )

    def runs(self, agent: Any) -> list[Snapshot]:
        """The runs of ``agent`` undo can still reach, oldest first."""
        return list(self._journal.get(str(getattr(agent, "id", agent)), ()))

    def can_undo(self, agent: Any, call_id: str) -> bool:
        return any(s.call_id == call_id for s in self.runs(agent))

    # -- undo --------------------------------------------------------------------------------

    def undo(self, agent: Any, calls: int = 1, *, through: str | None = None) -> UndoReport:
        """Restore the namespace to what it was before ``agent``'s last ``calls`` runs (or,
        with ``through=call_id``, before that run and every later one). Per name: restored /
        removed / not restorable (why) / changed since, kept. Raises ``ValueError`` for
        ``calls`` < 1 or an unknown ``through`` call id."""
        if not isinstance(calls, int) or calls < 1:
            raise InvalidValueError(f"calls must be an integer >= 1, got {calls!r}")
        name = self.agent_name(agent)
        journal = self._journal.get(str(getattr(agent, "id", agent)), deque())
        if through is not None:
            ids = [s.call_id for s in journal]
            if through not in ids:
                raise InvalidValueError(
                    f"no remembered run of {name} has call id {through!r} "
                    f"(remembered: {', '.join(ids) or 'none'})"
                )
            calls = len(ids) - ids.index(through)
        taken = [journal.pop() for _ in range(min(calls, len(journal)))]  # newest first
        report = UndoReport(name, runs=taken)
        if not taken:
            return report
        ns = self.shell.user_ns
        report.outcomes = restore(taken, ns)
        self._absorb(o.name for o in report.outcomes if o.outcome in ("restored", "removed"))
        for outcome in report.outcomes:
            if outcome.outcome in ("restored", "removed"):
                self.provenance.add(
                    Binding(
                        name=outcome.name,
                        action=outcome.outcome,
                        by="undo",
                        agent=name,
                        call_id=", ".join(s.call_id for s in taken if s.call_id),
                    )
                )
        edits = _cell_edits(agent, min(s.turn for s in taken))
        if edits:
            report.notes.append(
                f"this agent also edited cells ({edits}); undo does not touch cells: use the "
                "notebook's own undo (Ctrl+Z in the cell, or Edit → Undo)"
            )
        if len(taken) < calls:
            report.notes.append(f"only {len(taken)} run(s) were remembered")
        return report

    # -- provenance ---------------------------------------------------------------------------

    def why(self, name: str) -> str:
        """The chain of bindings of ``name``, newest first, secrets masked."""
        return self.provenance.chain(name, secret_values(self.shell.user_ns))

    def origin(self, name: str) -> str | None:
        """The last binding of ``name`` as one line (``None`` when none was seen)."""
        last = self.provenance.last(name)
        if last is None:
            return None
        return last.describe(secret_values(self.shell.user_ns))

    def changed_by_agents(self) -> list[tuple[str, str]]:
        """``(name, its latest agent binding)`` for each name agents changed, newest first."""
        secrets = secret_values(self.shell.user_ns)
        return [(n, b.describe(secrets)) for n, b in self.provenance.changed_by_agents()]

    # -- autopsies ---------------------------------------------------------------------------

    def autopsy(self, cell: str | int | None = None) -> Autopsy | None:
        """The kept autopsy of ``cell`` (id or execution count; default: the last failure)."""
        return self.autopsies.find(cell)


def _cell_edits(agent: Any, since_turn: int) -> str:
    """``replace_cell ×2, insert_cell ×1`` for the cell edits ``agent`` made since that turn."""
    counts: dict[str, int] = {}
    events: Iterable[Any] = getattr(getattr(agent, "session", None), "events", ())
    for event in events:
        if event.type != "tool/call" or event.data.get("turn", 0) < since_turn:
            continue
        tool = event.data.get("name")
        if tool in CELL_EDIT_TOOLS:
            counts[tool] = counts.get(tool, 0) + 1
    return ", ".join(f"{t} ×{n}" for t, n in sorted(counts.items()))
