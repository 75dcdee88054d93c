"""Summaries of live kernel objects for a model: what ``list_variables`` and
``inspect_variable`` say about a value.

Every summary is bounded (``max_chars``) and cheap on huge objects: pandas and numpy are never
imported here (a value is recognised by its class's module and name), a DataFrame's ``describe``
runs on a bounded row sample, an array's statistics on a bounded slice, and container reprs are
built from a bounded prefix (``reprlib``) instead of ``repr`` over everything.

Precedence: an object's own ``_repr_llm_()`` wins, then a describer registered in the
:class:`Describers` registry handed in for its type (most specific class first), then the
built-in summaries. The registry is an object, not a module global: the loaded extension's
``KernelState`` owns one and provides it to its App as ``ctx.describers``. Secrets (names containing KEY, TOKEN, SECRET or PASSWORD) are the caller's rule:
:func:`is_secret` says which names they are.
"""

from __future__ import annotations

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
    "Describers",
    "close_matches",
    "describe",
    "is_secret",
    "mask",
    "secret_values",
    "shell_describers",
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


class Describers:
    """A registry of describers by type: what :func:`describe` consults after an object's own
    ``_repr_llm_()``. One per IPython shell (:func:`shell_describers`: the kernel's, what
    ``kernel_tools.describe`` registers in with or without the extension loaded; the loaded
    extension provides it to its App as ``ctx.describers``); make your own for an App outside
    IPython and provide it as ``app.ctx.provide("describers", Describers())``."""

    def __init__(self) -> None:
        self._by_type: dict[type, Describer] = {}

    def register(self, cls: type, fn: Callable[..., Any]) -> Disposer:
        """Describe instances of ``cls`` (and subclasses) with ``fn(obj, max_chars)`` or
        ``fn(obj)`` (the result is cut to ``max_chars`` either way); the disposer unregisters
        it (a later registration for the same type replaces this one).

        Raises ``TypeError`` when ``cls`` is not a class, ``fn`` is not callable or takes
        neither one nor two positional arguments."""
        described = self.check(cls, fn)
        self._by_type[cls] = described

        def remove() -> None:
            if self._by_type.get(cls) is described:
                del self._by_type[cls]

        return Disposer(remove)

    @staticmethod
    def check(cls: type, fn: Callable[..., Any]) -> Describer:
        """``fn`` as ``fn(obj, max_chars)``, after the checks :meth:`register` makes (raising
        the same ``TypeError``)."""
        if not isinstance(cls, type):
            raise InvalidTypeError(f"describe(type, fn): expected a class, got {cls!r}")
        if not callable(fn):
            raise InvalidTypeError(f"describe(type, fn): fn must be callable, got {fn!r}")
        return _two_arguments(fn)

    def find(self, cls: type) -> Describer | None:
        """The describer of ``cls``: the one registered for the most specific class of its
        MRO, or ``None``."""
        for base in cls.__mro__:
            fn = self._by_type.get(base)
            if fn is not None:
                return fn
        return None

    def __len__(self) -> int:
        return len(self._by_type)

    def __repr__(self) -> str:
        names = ", ".join(sorted(t.__qualname__ for t in self._by_type)) or "none"
        return f"<Describers: {names}>"


def close_matches(name: str, names: Iterable[str]) -> list[str]:
    """Up to five names close to ``name`` (case-insensitive), best first."""
    pool = list(names)
    lowered = {n.lower(): n for n in pool}
    key = name.lower()
    prefix = sorted(n for n in lowered if n.startswith(key) or key.startswith(n))
    import difflib  # here: only a miss needs it (2.5 M instructions to import)

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


def describe(obj: Any, max_chars: int, describers: Describers | None = None) -> str:
    """A type-aware summary of ``obj`` within ``max_chars`` characters (see the module
    docstring for the precedence; without ``describers`` only ``_repr_llm_`` and the
    built-ins). A failing ``_repr_llm_`` or describer is reported in the summary, never
    raised."""
    own = getattr(type(obj), "_repr_llm_", None)
    if callable(own):
        return truncate(_safe(lambda: str(own(obj)), "_repr_llm_"), max_chars)
    fn = describers.find(type(obj)) if describers is not None else None
    if fn is not None:
        return truncate(_safe(lambda: str(fn(obj, max_chars)), "describer"), max_chars)
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


_SHELL_SLOT = "_agentloop_describers"


def shell_describers(shell: Any) -> Describers:
    """The describers registry of IPython ``shell``, made on first need and kept on the shell
    itself: it lives as long as the kernel (across ``%reload_ext``, with or without the
    extension loaded), and no module holds it."""
    found = getattr(shell, _SHELL_SLOT, None)
    if not isinstance(found, Describers):
        found = Describers()
        setattr(shell, _SHELL_SLOT, found)
    return found
