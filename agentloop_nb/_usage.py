"""``UsageTotals``: token usage and cost summed from a session log.

Counted: the ``usage`` of every ``assistant/message`` (priced at the model of the
``request/header`` in effect when it was logged) and of every ``compaction/summary`` (priced at
its own ``model``). Usage a provider never reported counts as 0. ``cost_usd`` is ``None`` when a
category with tokens has no price (an unknown model, or a table entry without that price).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .events import ASSISTANT_MESSAGE, COMPACTION_SUMMARY, REQUEST_HEADER, TURN_START
from .models import ModelTable, cost_usd

__all__ = ["UsageTotals", "usage_from_events"]


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """Summed usage. ``input_tokens + output_tokens`` is what token budgets count;
    ``cost_usd`` is ``None`` when any priced part is unknown."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = 0.0

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
    total = ZERO
    by_turn: list[UsageTotals] = []
    model: str | None = None
    for event in events:
        kind = event.type
        if kind == TURN_START:
            by_turn.append(ZERO)
            continue
        if kind == REQUEST_HEADER:
            header = event.data.get("header")
            config = header.get("config", {}) if isinstance(header, Mapping) else {}
            model = config.get("model") if isinstance(config, Mapping) else None
            continue
        if kind == ASSISTANT_MESSAGE:
            priced_as = model
        elif kind == COMPACTION_SUMMARY:
            priced_as = event.data.get("model")
        else:
            continue
        usage = event.data.get("usage")
        if not isinstance(usage, Mapping):
            continue
        part = UsageTotals.of(usage, table, priced_as if isinstance(priced_as, str) else None)
        total = total + part
        if by_turn:
            by_turn[-1] = by_turn[-1] + part
    return total, by_turn
