"""``UsageTotals``: token usage and cost summed from a session log.

Counted: the ``usage`` of every ``assistant/message`` (priced at the model of the
``request/header`` in effect when it was logged) and of every ``compaction/summary`` (priced at
its own ``model``). Usage a provider never reported counts as 0. ``cost_usd`` is ``None`` when a
category with tokens has no price (an unknown model, or a table entry without that price).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._event_names import ASSISTANT_MESSAGE, COMPACTION_SUMMARY, REQUEST_HEADER, TURN_START
from ._record import Record, set_field
from .models import ModelTable, cost_usd

__all__ = ["UsageTotals", "session_usage", "usage_from_events"]


class UsageTotals(Record):
    """Summed usage. ``input_tokens + output_tokens`` is what token budgets count;
    ``cost_usd`` is ``None`` when any priced part is unknown."""

    __slots__ = (
        "cache_read_tokens",
        "cache_write_tokens",
        "cost_usd",
        "input_tokens",
        "output_tokens",
        "reasoning_tokens",
    )
    __match_args__ = (
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "cost_usd",
    )

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    cost_usd: float | None

    def __init__(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        cost_usd: float | None = 0.0,
    ) -> None:
        set_field(self, "input_tokens", input_tokens)
        set_field(self, "output_tokens", output_tokens)
        set_field(self, "cache_read_tokens", cache_read_tokens)
        set_field(self, "cache_write_tokens", cache_write_tokens)
        set_field(self, "reasoning_tokens", reasoning_tokens)
        set_field(self, "cost_usd", cost_usd)

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: object) -> UsageTotals:
        if not isinstance(other, UsageTotals):
            return NotImplemented
        cost = (
            None
            if self.cost_usd is None or other.cost_usd is None
            else self.cost_usd + other.cost_usd
        )
        return UsageTotals(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            cost,
        )

    @classmethod
    def of(cls, usage: Mapping[str, Any], table: ModelTable, model: str | None) -> UsageTotals:
        """One reported usage (``Usage`` fields; missing or ``None`` count 0) priced at
        ``model``'s entry in ``table``."""

        def n(key: str) -> int:
            value = usage.get(key)
            return int(value) if isinstance(value, int | float) and value > 0 else 0

        inp, out = n("input_tokens"), n("output_tokens")
        read, write = n("cache_read_tokens"), n("cache_write_tokens")
        tokens = {"input": inp, "output": out, "cache_read": read, "cache_write": write}
        cost = cost_usd(tokens, table.lookup(model))
        return cls(inp, out, read, write, n("reasoning_tokens"), cost)


ZERO = UsageTotals()


def usage_from_events(
    events: Iterable[Any], table: ModelTable
) -> tuple[UsageTotals, list[UsageTotals]]:
    """``(total, by_turn)`` for a session's events: ``by_turn[i]`` is turn ``i + 1``'s usage
    (one entry per ``turn/start``; usage logged before the first turn counts in the total
    only). See the module docstring for what counts."""
    ledger = _Ledger(table)
    ledger.fold(list(events))
    return ledger.total, list(ledger.by_turn)


class _Ledger:
    """Running sums over a log's prefix: folding only the events appended since."""

    __slots__ = ("by_turn", "model", "position", "table", "total")

    def __init__(self, table: ModelTable) -> None:
        self.table = table
        self.position = 0
        self.model: str | None = None
        self.total = ZERO
        self.by_turn: list[UsageTotals] = []

    def fold(self, events: Sequence[Any]) -> None:
        for index in range(self.position, len(events)):
            self._add(events[index])
        self.position = len(events)

    def _add(self, event: Any) -> None:
        kind = event.type
        if kind == TURN_START:
            self.by_turn.append(ZERO)
            return
        if kind == REQUEST_HEADER:
            header = event.data.get("header")
            config = header.get("config", {}) if isinstance(header, Mapping) else {}
            model = config.get("model") if isinstance(config, Mapping) else None
            self.model = model if isinstance(model, str) else None
            return
        if kind == ASSISTANT_MESSAGE:
            priced_as = self.model
        elif kind == COMPACTION_SUMMARY:
            named = event.data.get("model")
            priced_as = named if isinstance(named, str) else None
        else:
            return
        usage = event.data.get("usage")
        if not isinstance(usage, Mapping):
            return
        part = UsageTotals.of(usage, self.table, priced_as)
        self.total = self.total + part
        if self.by_turn:
            self.by_turn[-1] = self.by_turn[-1] + part


# One ledger per session (append-only logs: a ledger never needs to look back).
_LEDGERS: weakref.WeakKeyDictionary[Any, _Ledger] = weakref.WeakKeyDictionary()


def session_usage(session: Any, table: ModelTable) -> tuple[UsageTotals, list[UsageTotals]]:
    """Like :func:`usage_from_events` for ``session.events``, folding only the events appended
    since the last call for the same session and table (O(new events))."""
    ledger = _LEDGERS.get(session)
    if ledger is None or ledger.table is not table or ledger.position > len(session.events):
        ledger = _LEDGERS[session] = _Ledger(table)
    ledger.fold(session.events)
    return ledger.total, list(ledger.by_turn)


# The public path (``agentloop_nb.UsageTotals``), as the package root's eager names report:
# reprs, docs and pickles name it whichever home loads it first.
UsageTotals.__module__ = "agentloop_nb"
