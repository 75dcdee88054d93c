"""Summaries of live kernel objects for a model: what ``list_variables`` and
``inspect_variable`` say about a value.

Every summary is bounded (``max_chars``) and cheap on huge objects: pandas and numpy are never
imported here (a value is recognised by its class's module and name), a DataFrame's ``describe``
runs on a bounded row sample, an array's statistics on a bounded slice, and container reprs are
built from a bounded prefix (``reprlib``) instead of ``repr`` over everything.

Precedence: an object's own ``_repr_llm_()`` wins, then a describer registered with
:func:`register_describer` for its type (most specific class first), then the built-in
summaries. Secrets (names containing KEY, TOKEN, SECRET or PASSWORD) are the caller's rule:
:func:`is_secret` says which names they are.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import reprlib
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..._disposer import Disposer
from ...errors import InvalidTypeError

__all__ = [
    "MASK",
    "SAMPLE_ROWS",
    "Describer",
    "close_matches",
    "describe",
    "is_secret",
    "mask",
    "register_describer",
    "secret_values",
    "short_summary",
    "truncate",
]

#: ``fn(obj, max_chars) -> str`` (a describer may ignore ``max_chars``; the result is cut).
Describer = Callable[[Any, int], str]

#: Rows of a DataFrame/Series the numeric ``describe()`` looks at (a head+tail sample beyond).
SAMPLE_ROWS = 100_000
#: Elements of an array the min/max/mean statistics look at (evenly strided beyond).
SAMPLE_ELEMENTS = 1_000_000

_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_describers: dict[type, Describer] = {}


@functools.lru_cache(maxsize=65_536)
def is_secret(name: str) -> bool:
    """True when ``name`` contains KEY, TOKEN, SECRET or PASSWORD (any case). Cached: the
    kernel's memory asks it for every namespace entry after a cell that spells a string."""
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS)


#: What a secret's value is replaced with in tool output.
MASK = "[secret]"


def secret_values(ns: Mapping[str, Any]) -> list[str]:
    """The string values (4 characters or more) of the secret-named entries of ``ns``, longest
    first, so that :func:`mask` leaves no partial leftovers."""
    values = []
    for name, value in ns.items():
        if not is_secret(name):
            continue
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str) and len(value) >= 4:
            values.append(value)
    return sorted(values, key=len, reverse=True)


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by :data:`MASK`."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def truncate(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, saying how much was left out."""
    if len(text) <= max_chars:
        return text
    note = f"… [{len(text) - max_chars} more chars]"
    keep = max(0, max_chars - len(note))
    return (text[:keep] + note)[:max_chars]


def register_describer(cls: type, fn: Callable[..., Any]) -> Disposer:
    """Describe instances of ``cls`` (and subclasses) with ``fn(obj, max_chars)`` or
    ``fn(obj)`` (the result is cut to ``max_chars`` either way); the disposer unregisters it
    (a later registration for the same type replaces this one).

    Raises ``TypeError`` when ``cls`` is not a class, ``fn`` is not callable or takes neither
    one nor two positional arguments."""
    if not isinstance(cls, type):
        raise InvalidTypeError(f"describe(type, fn): expected a class, got {cls!r}")
    if not callable(fn):
        raise InvalidTypeError(f"describe(type, fn): fn must be callable, got {fn!r}")
    described = _two_arguments(fn)
    _describers[cls] = described

    def remove() -> None:
        if _describers.get(cls) is described:
            del _describers[cls]

    return Disposer(remove)


def close_matches(name: str, names: Iterable[str]) -> list[str]:
    """Up to five names close to ``name`` (case-insensitive), best first."""
    pool = list(names)
    lowered = {n.lower(): n for n in pool}
    key = name.lower()
    prefix = sorted(n for n in lowered if n.startswith(key) or key.startswith(n))
    hits = difflib.get_close_matches(key, list(lowered), n=5, cutoff=0.5)
    ordered = prefix + [h for h in hits if h not in prefix]
    return [lowered[h] for h in ordered[:5]]


def _kind(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__.split('.')[0]}.{cls.__name__}"


# -- one line per variable -----------------------------------------------------------------


def short_summary(obj: Any) -> str:
    """A few words about ``obj`` for ``list_variables`` (shape, dtype, len); never raises."""
    try:
        kind = _kind(obj)
        if kind in ("pandas.DataFrame", "pandas.Series", "numpy.ndarray"):
            shape = "x".join(str(n) for n in obj.shape)
            if kind == "pandas.DataFrame":
                return f"shape {shape}, columns {truncate(', '.join(map(str, obj.columns)), 60)}"
            return f"shape {shape}, dtype {obj.dtype}"
        if isinstance(obj, str | bytes):
            return f"len {len(obj)}: {truncate(repr(obj), 40)}"
        if isinstance(obj, bool | int | float | complex | types.NoneType):
            return truncate(repr(obj), 40)
        if isinstance(obj, Mapping | list | tuple | set | frozenset):
            return f"len {len(obj)}"
        if callable(obj):
            return _signature(obj)
        return ""
    except Exception:  # a broken object must not break the listing
        return ""


# -- a full summary --------------------------------------------------------------------------


def _two_arguments(fn: Callable[..., Any]) -> Describer:
    """``fn`` as ``fn(obj, max_chars)``: a one-argument describer is wrapped."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature (some builtins): trust the documented form
        return fn
    for arity in (2, 1):
        try:
            signature.bind(*range(arity))
        except TypeError:
            continue
        if arity == 2:
            return fn
        return lambda obj, _max_chars: fn(obj)
    raise InvalidTypeError(
        f"describe(type, fn): fn must take (obj) or (obj, max_chars), got {fn!r}{signature}"
    )


def describe(obj: Any, max_chars: int) -> str:
    """A type-aware summary of ``obj`` within ``max_chars`` characters (see the module
    docstring for the precedence). A failing ``_repr_llm_`` or describer is reported in the
    summary, never raised."""
    own = getattr(type(obj), "_repr_llm_", None)
    if callable(own):
        return truncate(_safe(lambda: str(own(obj)), "_repr_llm_"), max_chars)
    for cls in type(obj).__mro__:
        fn = _describers.get(cls)
        if fn is not None:
            described = _safe(lambda f=fn: str(f(obj, max_chars)), "describer")  # type: ignore[misc]
            return truncate(described, max_chars)
    return truncate(_builtin(obj, max_chars), max_chars)


def _safe(make: Callable[[], str], what: str) -> str:
    try:
        return make()
    except Exception as exc:
        return f"({what} failed: {type(exc).__name__}: {exc})"


def _builtin(obj: Any, max_chars: int) -> str:
    kind = _kind(obj)
    head = f"type: {type(obj).__module__}.{type(obj).__qualname__}"
    try:
        if kind == "pandas.DataFrame":
            return f"{head}\n{_frame(obj, max_chars)}"
        if kind == "pandas.Series":
            return f"{head}\n{_series(obj, max_chars)}"
        if kind == "numpy.ndarray":
            return f"{head}\n{_array(obj)}"
        if isinstance(obj, Mapping | list | tuple | set | frozenset):
            return f"{head}\nlen: {len(obj)}\n{_bounded_repr(obj, max_chars)}"
        if callable(obj) and not isinstance(obj, type):
            return f"{head}\n{_callable(obj)}"
        if isinstance(obj, type):
            return f"class {obj.__module__}.{obj.__qualname__}\n{_callable(obj)}"
        return f"{head}\n{_bounded_repr(obj, max_chars)}"
    except Exception as exc:
        return f"{head}\n(summary failed: {type(exc).__name__}: {exc})"


def _bounded_repr(obj: Any, max_chars: int) -> str:
    r = reprlib.Repr()
    r.maxlevel = 3
    r.maxstring = r.maxother = max(20, max_chars // 4)
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = 50
    if isinstance(obj, str | bytes):
        return repr(obj[: max_chars + 1])
    if isinstance(obj, Mapping | list | tuple | set | frozenset):
        return r.repr(obj)
    return repr(obj)[: max_chars + 1] if type(obj).__repr__ is not object.__repr__ else repr(obj)


def _signature(obj: Any) -> str:
    name = getattr(obj, "__name__", type(obj).__name__)
    try:
        return f"{name}{inspect.signature(obj, eval_str=True)}"
    except Exception:  # unresolvable string annotations: show them as written
        pass
    try:
        return f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return f"{name}(...)"


def _callable(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    first = doc.strip().split("\n\n", 1)[0].strip()
    return _signature(obj) + (f"\n{first}" if first else "")


def _frame(df: Any, max_chars: int) -> str:
    rows, cols = df.shape
    parts = [f"shape: {rows} rows x {cols} columns"]
    dtypes = ", ".join(f"{c}: {t}" for c, t in list(df.dtypes.items())[:50])
    parts.append(f"dtypes: {truncate(dtypes, max(200, max_chars // 3))}")
    parts.append("head():\n" + df.head(5).to_string(max_cols=20, max_colwidth=40))
    numeric = df.select_dtypes("number")
    if numeric.shape[1]:
        sample = _sample(numeric)
        note = "" if len(sample) == rows else f" (on a {len(sample)}-row sample)"
        table = sample.describe().to_string(max_cols=20)
        parts.append(f"describe(){note}:\n{table}")
    return "\n".join(parts)


def _series(s: Any, max_chars: int) -> str:
    parts = [f"length: {len(s)}, dtype: {s.dtype}, name: {s.name!r}"]
    parts.append("head():\n" + s.head(5).to_string())
    if s.dtype.kind in "iufc":
        sample = _sample(s)
        note = "" if len(sample) == len(s) else f" (on a {len(sample)}-row sample)"
        parts.append(f"describe(){note}:\n{sample.describe().to_string()}")
    return "\n".join(parts)


def _sample(frame: Any) -> Any:
    """At most ``SAMPLE_ROWS`` rows: all of them, or a head and a tail half each (cheap
    slices: no copy of the whole frame, deterministic)."""
    if len(frame) <= SAMPLE_ROWS:
        return frame
    half = SAMPLE_ROWS // 2
    return frame.iloc[list(range(half)) + list(range(len(frame) - half, len(frame)))]


def _array(a: Any) -> str:
    parts = [f"shape: {a.shape}, dtype: {a.dtype}, size: {a.size}"]
    if a.size and a.dtype.kind in "iufb":
        flat = a.reshape(-1)
        note = ""
        if flat.size > SAMPLE_ELEMENTS:
            flat = flat[:: -(-flat.size // SAMPLE_ELEMENTS)]
            note = f" (on a strided sample of {flat.size})"
        parts.append(f"min: {flat.min()}, max: {flat.max()}, mean: {flat.mean():.6g}{note}")
    prefix = a.reshape(-1)[:10].tolist() if a.size else []
    parts.append(f"first values: {prefix}")
    return "\n".join(parts)
