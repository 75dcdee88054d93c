"""Known models: context windows and prices.

``KNOWN_MODELS`` maps a model-name *prefix* to a :class:`ModelInfo` (context window in tokens,
prices in USD per million input, output, cache-read and cache-write tokens). A model name is
looked up by its longest matching prefix (``"gpt-4o-mini-2024-07-18"`` finds ``"gpt-4o-mini"``);
an unknown model has no window and no prices (every field ``None``).

A :class:`ModelTable` layers overrides over the table: ``App(models={prefix: {...}})`` adds or
overrides entries, and any key may be omitted (an override of a prefix keeps the fields it
does not name from the entry that prefix would otherwise find). The App publishes its table as
the ``models`` service (``ctx.models``); code that finds no such service uses
:data:`DEFAULT_TABLE`.

Prices change; the built-in figures are list prices at the time of writing and are meant as a
default for the usage view, not as billing data. Override them per deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ._record import Record, field_values, set_field
from .errors import InvalidValueError

__all__ = [
    "DEFAULT_TABLE",
    "KNOWN_MODELS",
    "ModelInfo",
    "ModelTable",
    "cost_usd",
    "model_table",
]

_PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")


class ModelInfo(Record):
    """What is known about one model. ``context_window`` in tokens; prices in USD per million
    tokens of each category. ``None`` means unknown."""

    __slots__ = ("cache_read", "cache_write", "context_window", "input", "output")
    __match_args__ = ("context_window", "input", "output", "cache_read", "cache_write")

    context_window: int | None
    input: float | None
    output: float | None
    cache_read: float | None
    cache_write: float | None

    def __init__(
        self,
        context_window: int | None = None,
        input: float | None = None,
        output: float | None = None,
        cache_read: float | None = None,
        cache_write: float | None = None,
    ) -> None:
        set_field(self, "context_window", context_window)
        set_field(self, "input", input)
        set_field(self, "output", output)
        set_field(self, "cache_read", cache_read)
        set_field(self, "cache_write", cache_write)

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any], base: ModelInfo | None = None) -> ModelInfo:
        """``entry``'s keys over ``base`` (or an unknown model). Raises ``ValueError`` for an
        unknown key or a value that is not a non-negative number."""
        names = set(cls.__match_args__)
        unknown = set(entry) - names
        if unknown:
            raise InvalidValueError(
                f"unknown model table key(s) {sorted(unknown)}: use {sorted(names)}"
            )
        values: dict[str, Any] = {}
        for key, value in entry.items():
            values[key] = _checked(key, value)
        start = base or cls()
        return cls(**{**field_values(start), **values})


def _checked(key: str, value: Any) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise InvalidValueError(f"model table {key!r} must be a number >= 0, got {value!r}")
    if key == "context_window":
        if not isinstance(value, int) or value == 0:
            raise InvalidValueError(
                f"model table 'context_window' must be a positive int, got {value!r}"
            )
        return value
    return float(value)


def _m(window: int, input: float, output: float, cache_read: float | None = None,
       cache_write: float | None = None) -> ModelInfo:  # fmt: skip
    return ModelInfo(window, input, output, cache_read, cache_write)


KNOWN_MODELS: Mapping[str, ModelInfo] = MappingProxyType(
    {
        # OpenAI
        "gpt-4o-mini": _m(128_000, 0.15, 0.60, 0.075),
        "gpt-4o": _m(128_000, 2.50, 10.00, 1.25),
        "gpt-4.1-nano": _m(1_047_576, 0.10, 0.40, 0.025),
        "gpt-4.1-mini": _m(1_047_576, 0.40, 1.60, 0.10),
        "gpt-4.1": _m(1_047_576, 2.00, 8.00, 0.50),
        "gpt-5-nano": _m(400_000, 0.05, 0.40, 0.005),
        "gpt-5-mini": _m(400_000, 0.25, 2.00, 0.025),
        "gpt-5": _m(400_000, 1.25, 10.00, 0.125),
        "o3-mini": _m(200_000, 1.10, 4.40, 0.55),
        "o3": _m(200_000, 2.00, 8.00, 0.50),
        "o4-mini": _m(200_000, 1.10, 4.40, 0.275),
        # Anthropic
        "claude-opus-4": _m(200_000, 15.00, 75.00, 1.50, 18.75),
        "claude-sonnet-4": _m(200_000, 3.00, 15.00, 0.30, 3.75),
        "claude-3-7-sonnet": _m(200_000, 3.00, 15.00, 0.30, 3.75),
        "claude-3-5-sonnet": _m(200_000, 3.00, 15.00, 0.30, 3.75),
        "claude-haiku-4": _m(200_000, 1.00, 5.00, 0.10, 1.25),
        "claude-3-5-haiku": _m(200_000, 0.80, 4.00, 0.08, 1.00),
        # DeepSeek
        "deepseek-chat": _m(128_000, 0.27, 1.10, 0.07),
        "deepseek-reasoner": _m(128_000, 0.55, 2.19, 0.14),
        # Local / demo models: free, with the window they are usually served with.
        "offline": _m(32_768, 0.0, 0.0, 0.0, 0.0),
        "gemma3-270m": _m(32_768, 0.0, 0.0, 0.0, 0.0),
    }
)
"""The built-in table: model-name prefix → :class:`ModelInfo`."""

_UNKNOWN = ModelInfo()

_MATCH_CACHE_SIZE = 1024


class ModelTable:
    """The built-in table with ``overrides`` (prefix → mapping of :class:`ModelInfo` fields, or
    a ``ModelInfo``) layered over it. Raises ``ValueError`` for a bad entry."""

    __slots__ = ("_configured", "_entries", "_matches", "_prefixes")

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        entries: dict[str, ModelInfo] = dict(KNOWN_MODELS)
        configured: set[str] = set()  # overrides that name a context window
        for prefix, entry in (overrides or {}).items():
            if not isinstance(prefix, str) or not prefix:
                raise InvalidValueError(
                    f"model table prefix must be a non-empty str, got {prefix!r}"
                )
            if isinstance(entry, ModelInfo):
                entries[prefix] = entry
            elif isinstance(entry, Mapping):
                entries[prefix] = ModelInfo.from_mapping(entry, _longest(entries, prefix))
            else:
                raise InvalidValueError(
                    f"model table entry {prefix!r} must be a mapping, got {entry!r}"
                )
            if entries[prefix].context_window is not None and (
                isinstance(entry, ModelInfo) or "context_window" in entry
            ):
                configured.add(prefix)
        self._entries = entries
        self._configured = frozenset(configured)
        # Longest first: the first prefix that matches is the longest match.
        self._prefixes = sorted(entries, key=len, reverse=True)
        # model name -> its longest matching prefix ("" for none). The table never changes
        # after construction, and compaction asks for the same model at every step.
        self._matches: dict[str, str] = {}

    def _prefix(self, model: str) -> str:
        """``model``'s longest matching prefix, or ``""`` (cached per model name)."""
        found = self._matches.get(model)
        if found is None:
            found = next((p for p in self._prefixes if model.startswith(p)), "")
            if len(self._matches) >= _MATCH_CACHE_SIZE:
                self._matches.clear()  # bounded: many distinct names just re-scan
            self._matches[model] = found
        return found

    def lookup(self, model: str | None) -> ModelInfo:
        """The entry of ``model``'s longest matching prefix; an all-``None`` ``ModelInfo`` for
        an unknown (or missing) model."""
        if not model:
            return _UNKNOWN
        prefix = self._prefix(model)
        return self._entries[prefix] if prefix else _UNKNOWN

    def context_window(self, model: str | None) -> int | None:
        return self.lookup(model).context_window

    def configured_window(self, model: str | None) -> int | None:
        """``model``'s window when the entry it finds is an override that names one (what a
        person configured, as opposed to the built-in figure), else ``None``."""
        if not model:
            return None
        prefix = self._prefix(model)
        return self._entries[prefix].context_window if prefix in self._configured else None

    @property
    def entries(self) -> Mapping[str, ModelInfo]:
        """Every entry (built-in and overridden), by prefix (read-only)."""
        return MappingProxyType(self._entries)

    def __repr__(self) -> str:
        return f"<ModelTable {len(self._entries)} entries>"


def _longest(entries: Mapping[str, ModelInfo], model: str) -> ModelInfo:
    best = ""
    for prefix in entries:
        if model.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return entries[best] if best else _UNKNOWN


DEFAULT_TABLE = ModelTable()
"""The built-in table without overrides."""


def model_table(ctx: Any) -> ModelTable:
    """The ``models`` service of ``ctx`` when there is one, else :data:`DEFAULT_TABLE`."""
    try:
        table = getattr(ctx, "models", None)
    except Exception:  # a context names the missing service in its own error
        table = None
    return table if isinstance(table, ModelTable) else DEFAULT_TABLE


def cost_usd(tokens: Mapping[str, int], info: ModelInfo) -> float | None:
    """The cost of ``tokens`` (keys ``input``, ``output``, ``cache_read``, ``cache_write``;
    missing keys count 0) at ``info``'s prices. ``None`` when a category with tokens has no
    price."""
    total = 0.0
    for name in _PRICE_FIELDS:
        count = tokens.get(name, 0)
        if not count:
            continue
        price = getattr(info, name)
        if price is None:
            return None
        total += count * price / 1_000_000
    return total
