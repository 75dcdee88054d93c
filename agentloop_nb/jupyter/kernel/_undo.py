"""Undo of an agent's kernel changes: snapshots of the names a run may touch, and their restore.

Before an agent's code runs (``run_python`` today, the notebook tools' ``run_cell`` through the
same API), :func:`snapshot_for` records, for every name the code may bind, delete or change in
place (:mod:`._bindings`), its state in the namespace:

- **absent** — the name did not exist (undo removes it);
- **a copy** — ``copy.deepcopy`` of the value, when its estimated size is under the limit
  (default 50 MB);
- **a reference** — modules, classes and functions (rebinding the name back is exact; changes
  made *inside* such an object are not undone);
- **not restorable (why)** — a larger value, or one whose copy raised (open files, generators,
  locks, ...): the reason is kept and reported.

After the run, :meth:`Snapshot.settle` records what each name holds (by identity), so a later
undo can tell whether someone rebound the name since ("changed since, kept").

:func:`restore` undoes runs newest first. Per name it decides everything before touching the
namespace and then applies one dictionary operation, so a name is restored entirely or left
as it is, never half-restored.
"""

from __future__ import annotations

import copy
import sys
import time
import types
import weakref
from collections.abc import Iterable, MutableMapping
from typing import Any, Literal

from ..._record import MutableRecord, Record, set_field
from ._bindings import analyse

__all__ = [
    "DEFAULT_SIZE_LIMIT",
    "NameOutcome",
    "Snapshot",
    "estimate_size",
    "restore",
    "snapshot_for",
]

#: Values estimated above this many bytes are not copied (not restorable).
DEFAULT_SIZE_LIMIT = 50 * 2**20
# A value made of more objects than this is not walked to the end: it counts as too big.
_MAX_OBJECTS = 200_000
_BY_REFERENCE = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)

Outcome = Literal["restored", "removed", "not restorable", "changed since, kept", "unchanged"]


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def _array_bytes(obj: Any) -> int | None:
    """Bytes of a numpy array or pandas object, recognised without importing either."""
    cls = type(obj)
    kind = f"{cls.__module__.split('.')[0]}.{cls.__name__}"
    try:
        # Object columns hold pointers: count a small string behind each value.
        if kind == "pandas.DataFrame":
            objects = sum(1 for t in obj.dtypes if str(t) == "object")
            return int(obj.memory_usage(index=True, deep=False).sum()) + objects * len(obj) * 50
        if kind == "pandas.Series":
            objects = 1 if str(obj.dtype) == "object" else 0
            return int(obj.memory_usage(index=True, deep=False)) + objects * len(obj) * 50
        if kind in ("numpy.ndarray", "pandas.Index"):
            return int(obj.nbytes)
    except Exception:
        return None
    return None


def estimate_size(obj: Any, limit: int) -> int:
    """An estimate of the bytes ``obj`` holds (``sys.getsizeof`` over the objects it reaches
    through containers and ``__dict__``; numpy/pandas by their buffers). The walk stops once
    the total exceeds ``limit`` (the answer is then just "more than ``limit``"), or after
    200,000 objects (answered as ``limit + 1``)."""
    total = 0
    seen: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _BY_REFERENCE):
            continue
        seen.add(id(item))
        if len(seen) > _MAX_OBJECTS:
            return limit + 1
        buffer = _array_bytes(item)
        if buffer is not None:
            total += buffer
        else:
            try:
                total += sys.getsizeof(item)
            except Exception:
                total += 64
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list | tuple | set | frozenset):
                stack.extend(item)
            else:
                state = getattr(item, "__dict__", None)
                if isinstance(state, dict):
                    stack.append(state)
        if total > limit:
            return total
    return total


# Records and a mutable record, not dataclasses: %load_ext imports this module (the kernel
# memory snapshots agent runs from the load on) and ``dataclass`` compiles each class's
# methods from source at import (about 12 M instructions for these three).
class _Before(Record):
    """A name's state before a run: ``absent``, ``value`` (a copy or a reference) or
    ``unrestorable`` (``reason`` says why)."""

    __slots__ = ("kind", "reason", "value")
    __match_args__ = ("kind", "value", "reason")

    kind: Literal["absent", "value", "unrestorable"]
    value: Any
    reason: str

    def __init__(
        self, kind: Literal["absent", "value", "unrestorable"], value: Any = None, reason: str = ""
    ) -> None:
        set_field(self, "kind", kind)
        set_field(self, "value", value)
        set_field(self, "reason", reason)


def _capture(ns: MutableMapping[str, Any], name: str, limit: int) -> _Before:
    if name not in ns:
        return _Before("absent")
    value = ns[name]
    if isinstance(value, _BY_REFERENCE):
        return _Before("value", value)
    size = estimate_size(value, limit)
    if size > limit:
        return _Before(
            "unrestorable",
            reason=f"too big to copy (about {_mb(size)} or more; the limit is {_mb(limit)})",
        )
    try:
        copied = copy.deepcopy(value)
    except Exception as exc:  # open files, generators, locks, objects that refuse
        what = type(value).__name__
        return _Before(
            "unrestorable",
            reason=f"a {what} cannot be copied ({type(exc).__name__}: {exc})",
        )
    return _Before("value", copied)


class _After:
    """What a name held right after the run, compared by identity later (weakly when the
    object allows it, so a snapshot never keeps a value alive that the namespace dropped)."""

    __slots__ = ("_ref", "present")

    def __init__(self, ns: MutableMapping[str, Any], name: str) -> None:
        self.present = name in ns
        self._ref: Any = None
        if self.present:
            value = ns[name]
            try:
                self._ref = weakref.ref(value)
            except TypeError:
                self._ref = lambda v=value: v

    def holds(self, ns: MutableMapping[str, Any], name: str) -> bool:
        """True when ``ns[name]`` is still in the state recorded after the run."""
        if name not in ns:
            return not self.present
        return self.present and self._ref() is ns[name]


class Snapshot(MutableRecord):
    """The state, before one run, of the names its code may touch (see the module docstring).
    ``code``, ``tool``, ``call_id``, ``turn`` and ``agent`` describe the run. Mutable (``settle``
    fills ``after``, ``same`` and ``settled``); equal to a snapshot with equal fields, unhashable,
    and shown as ``Snapshot(code=..., ...)`` without ``originals``, as the dataclass it was."""

    __slots__ = (
        "after",
        "agent",
        "call_id",
        "code",
        "created",
        "limit",
        "mutated",
        "names",
        "originals",
        "same",
        "settled",
        "tool",
        "turn",
    )
    __match_args__ = (
        "code",
        "names",
        "mutated",
        "limit",
        "tool",
        "call_id",
        "turn",
        "agent",
        "created",
        "after",
        "same",
        "settled",
        "originals",
    )
    _repr_hidden = ("originals",)

    def __init__(
        self,
        code: str,
        names: dict[str, _Before],
        mutated: frozenset[str],
        limit: int,
        tool: str = "run_python",
        call_id: str = "",
        turn: int = 0,
        agent: str = "",
        created: float | None = None,
        after: dict[str, _After] | None = None,
        same: frozenset[str] = frozenset(),
        settled: bool = False,
        originals: dict[str, Any] | None = None,
    ) -> None:
        self.code = code
        self.names = names
        self.mutated = mutated
        self.limit = limit
        self.tool = tool
        self.call_id = call_id
        self.turn = turn
        self.agent = agent
        self.created: float = time.time() if created is None else created
        self.after: dict[str, _After] = {} if after is None else after
        #: Names that held the very same object before and after the run (set by ``settle``).
        self.same = same
        self.settled = settled
        # The objects the names held before the run: kept only until ``settle`` (identity check).
        self.originals: dict[str, Any] = {} if originals is None else originals

    def settle(self, ns: MutableMapping[str, Any]) -> None:
        """Record what each snapshotted name holds now (call right after the run)."""
        self.after = {name: _After(ns, name) for name in self.names}
        self.same = frozenset(n for n, v in self.originals.items() if n in ns and ns[n] is v)
        self.originals = {}
        self.settled = True

    @property
    def size(self) -> int:
        """Estimated bytes held by the copies (for the journal's memory bound)."""
        return sum(
            estimate_size(b.value, self.limit)
            for b in self.names.values()
            if b.kind == "value" and not isinstance(b.value, _BY_REFERENCE)
        )

    def unrestorable(self) -> dict[str, str]:
        """Name → reason, for the names this snapshot could not copy."""
        return {n: b.reason for n, b in self.names.items() if b.kind == "unrestorable"}


def snapshot_for(
    code: str,
    shell: Any,
    *,
    limit: int = DEFAULT_SIZE_LIMIT,
    tool: str = "run_python",
    call_id: str = "",
    turn: int = 0,
    agent: str = "",
) -> Snapshot:
    """Snapshot, in ``shell.user_ns``, the names ``code`` may bind, delete or change in place.
    Call :meth:`Snapshot.settle` after running the code. Never raises for the code's content
    (code that does not parse snapshots nothing)."""
    ns = shell.user_ns
    found = analyse(code)
    names = {name: _capture(ns, name, limit) for name in sorted(found.names)}
    return Snapshot(
        code=code,
        names=names,
        originals={name: ns[name] for name in names if name in ns},
        mutated=frozenset(found.mutated),
        limit=limit,
        tool=tool,
        call_id=call_id,
        turn=turn,
        agent=agent,
    )


def _equal(copied: Any, current: Any) -> bool:
    """True when ``current`` provably equals the copy taken before the run (pandas'
    ``equals``, numpy's element-wise ``==``, else ``==`` answering a plain ``True``)."""
    try:
        same = getattr(current, "equals", None)
        if callable(same) and type(current) is type(copied):
            return bool(same(copied))
        result = current == copied
        if result is True:
            return True
        shape = getattr(result, "shape", None)
        all_ = getattr(result, "all", None)
        if shape is not None and callable(all_) and getattr(copied, "shape", None) == shape:
            return bool(all_())
    except Exception:
        return False
    return False


class NameOutcome(Record):
    """What undo did to one name: ``outcome`` and, for *not restorable*, ``reason``."""

    __slots__ = ("name", "outcome", "reason")
    __match_args__ = ("name", "outcome", "reason")

    name: str
    outcome: Outcome
    reason: str

    def __init__(self, name: str, outcome: Outcome, reason: str = "") -> None:
        set_field(self, "name", name)
        set_field(self, "outcome", outcome)
        set_field(self, "reason", reason)

    def __str__(self) -> str:
        if self.outcome == "not restorable":
            return f"{self.name}: not restorable ({self.reason})"
        return f"{self.name}: {self.outcome}"


def restore(snapshots: Iterable[Snapshot], ns: MutableMapping[str, Any]) -> list[NameOutcome]:
    """Undo the runs of ``snapshots`` (newest first) in ``ns``; one outcome per name, sorted.

    A name goes back to its state before the *oldest* of these runs that touched it, unless
    it no longer holds what the *newest* of them left ("changed since, kept": someone rebound
    or deleted it since). A name is restored entirely or not at all."""
    newest_after: dict[str, _After] = {}
    target: dict[str, _Before] = {}
    touched: set[str] = set()  # rebound (to another object) or possibly changed in place
    rebound: set[str] = set()
    for snap in snapshots:
        if not snap.settled:
            continue
        for name, before in snap.names.items():
            newest_after.setdefault(name, snap.after[name])
            target[name] = before  # older runs overwrite: the oldest state wins
            if name not in snap.same:
                rebound.add(name)
            if name not in snap.same or name in snap.mutated:
                touched.add(name)
    plan: list[tuple[str, Outcome, str, Any]] = []
    for name in sorted(target):
        before = target[name]
        if not newest_after[name].holds(ns, name):
            plan.append((name, "changed since, kept", "", None))
        elif name not in touched:
            plan.append((name, "unchanged", "", None))
        elif before.kind == "absent":
            plan.append((name, "removed" if name in ns else "unchanged", "", None))
        elif before.kind == "unrestorable":
            plan.append((name, "not restorable", before.reason, None))
        elif name not in rebound and _equal(before.value, ns[name]):
            plan.append((name, "unchanged", "", None))  # only read: keep the very object
        else:
            plan.append((name, "restored", "", before.value))
    outcomes = []
    for name, outcome, reason, value in plan:
        if outcome == "removed":
            del ns[name]
        elif outcome == "restored":
            ns[name] = value
        outcomes.append(NameOutcome(name, outcome, reason))
    return outcomes
