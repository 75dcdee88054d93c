"""Error autopsies: what a failed cell left behind, kept while its frames are still alive.

When a user cell raises, :meth:`Autopsies.record` (called from IPython's ``post_run_cell``
event, after IPython has shown the traceback: what the user sees is unchanged) builds an
:class:`Autopsy` from the exception object, whose traceback still holds the failing frames:

- the cell: its id (IPython's ``cell_id`` of the execution request, when the front end sent
  one), its execution count and source;
- the exception chain (``raise ... from``, and exceptions raised while handling another);
- a plain-text traceback (no ANSI colours), library frames marked, IPython's own frames left
  out;
- for the innermost frames in user code (at most 5), summaries of their local variables made
  by the kernel tools' describers (bounded by ``max_chars``; secrets hidden); a cell's module
  frame lists the names its failing line uses rather than the whole namespace;
- for a ``NameError``, ``KeyError`` or ``AttributeError``, the missing name and its closest
  matches among the live names and the frame's locals, the mapping's keys or the object's
  attributes (the line the offline model's ``fix`` command reads).

Secret values (of secret-named variables, in the namespace or in a frame) are masked in every
part. The last autopsy of each cell is kept until that cell next succeeds (keyed by cell id;
without one, by its source); at most 100 are kept.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from types import FrameType, ModuleType, TracebackType
from typing import Any

from ..._record import Record, set_field
from ...errors import NotFoundError
from ._describe import Describers, describe, is_secret, mask, secret_values, truncate

__all__ = ["Autopsies", "Autopsy", "FrameLocals", "Missing", "build_autopsy"]

MAX_USER_FRAMES = 5
MAX_LOCALS = 20
MAX_KEPT = 100
_MAX_CHAIN = 5
_MAX_KEYS = 10_000
_NOT_DEFINED = re.compile(r"name '(\w+)' is not defined")


def is_library(filename: str) -> bool:
    """True for the standard library, installed packages and frozen modules."""
    return filename.startswith("<frozen") or filename.startswith(_lib_dirs())


@functools.cache
def _lib_dirs() -> tuple[str, ...]:
    # Read at the first autopsy, not at %load_ext (``sysconfig`` and its path expansion).
    import sysconfig

    paths = sysconfig.get_paths()
    keys = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple(sorted({p for k in keys if (p := paths.get(k))}))


# Records, not frozen dataclasses: %load_ext imports this module (the kernel memory records
# failed cells from the load on) and ``dataclass`` compiles each class's methods at import.
class FrameLocals(Record):
    """One user frame: where it is and summaries of its locals (``(name, summary)``)."""

    __slots__ = ("line", "locals", "where")
    __match_args__ = ("where", "line", "locals")

    where: str
    line: str
    locals: tuple[tuple[str, str], ...]

    def __init__(self, where: str, line: str, locals: tuple[tuple[str, str], ...]) -> None:
        set_field(self, "where", where)
        set_field(self, "line", line)
        set_field(self, "locals", locals)


class Missing(Record):
    """The name a ``NameError``/``KeyError``/``AttributeError`` did not find: ``kind`` (name,
    key, attribute), ``name``, ``among`` (where it was looked for) and ``closest`` matches."""

    __slots__ = ("among", "closest", "kind", "name")
    __match_args__ = ("kind", "name", "among", "closest")

    kind: str
    name: str
    among: str
    closest: tuple[str, ...]

    def __init__(self, kind: str, name: str, among: str, closest: tuple[str, ...]) -> None:
        set_field(self, "kind", kind)
        set_field(self, "name", name)
        set_field(self, "among", among)
        set_field(self, "closest", closest)

    def line(self) -> str:
        closest = ", ".join(repr(c) for c in self.closest) or "none"
        return f"missing: {self.kind} {self.name!r} — not among {self.among}; closest: {closest}"


class Autopsy(Record):
    """What a failed cell left behind (see the module docstring). ``cell`` names it the way
    tools accept it back: its id, or ``[N]`` (its execution count) without one."""

    __slots__ = (
        "cell_id",
        "chain",
        "exception",
        "execution_count",
        "frames",
        "missing",
        "source",
        "time",
        "traceback",
    )
    __match_args__ = (
        "cell_id",
        "execution_count",
        "source",
        "exception",
        "chain",
        "traceback",
        "frames",
        "missing",
        "time",
    )

    cell_id: str | None
    execution_count: int | None
    source: str
    exception: str
    chain: tuple[str, ...]
    traceback: str
    frames: tuple[FrameLocals, ...]
    missing: Missing | None
    time: float

    def __init__(
        self,
        cell_id: str | None,
        execution_count: int | None,
        source: str,
        exception: str,
        chain: tuple[str, ...],
        traceback: str,
        frames: tuple[FrameLocals, ...],
        missing: Missing | None,
        time: float,
    ) -> None:
        set_field(self, "cell_id", cell_id)
        set_field(self, "execution_count", execution_count)
        set_field(self, "source", source)
        set_field(self, "exception", exception)
        set_field(self, "chain", chain)
        set_field(self, "traceback", traceback)
        set_field(self, "frames", frames)
        set_field(self, "missing", missing)
        set_field(self, "time", time)

    @property
    def cell(self) -> str:
        if self.cell_id:
            return self.cell_id
        return f"[{self.execution_count}]" if self.execution_count is not None else "[?]"

    def title(self) -> str:
        count = f"[{self.execution_count}]" if self.execution_count is not None else "[?]"
        ident = f" (id {self.cell_id})" if self.cell_id else ""
        return f"cell {count}{ident}"

    def render(self, max_chars: int = 4000) -> str:
        """The autopsy as text for a model and a person, within ``max_chars``."""
        head = [f"Error autopsy of {self.title()}: {self.exception}"]
        if self.missing is not None:
            head.append(self.missing.line())
        head.append("source:\n```python\n" + truncate(self.source, max_chars // 3) + "\n```")
        if len(self.chain) > 1:
            head.append("exception chain (first raised first):\n  " + "\n  ".join(self.chain))
        tail = []
        if self.frames:
            parts = ["locals of the innermost frames in your code (innermost last):"]
            for f in self.frames:
                parts.append(f"  {f.where}: {f.line}")
                parts.extend(f"    {name} = {summary}" for name, summary in f.locals)
            tail.append("\n".join(parts))
        fixed = "\n".join(head)
        budget = max(200, max_chars - len(fixed) - 2)
        frames_text = truncate("\n".join(tail), budget // 2) if tail else ""
        tb_budget = budget - len(frames_text)
        tb = _keep_tail(self.traceback, tb_budget)
        text = "\n".join(p for p in (fixed, "traceback:\n" + tb, frames_text) if p)
        return truncate(text, max_chars)


def _keep_tail(text: str, max_chars: int) -> str:
    """The end of ``text`` (a traceback's last lines matter most) within ``max_chars``."""
    if len(text) <= max_chars:
        return text
    note = f"[{len(text) - max_chars} earlier chars cut] …"
    return note + text[len(text) - max(0, max_chars - len(note)) :]


def _chain(exc: BaseException) -> list[BaseException]:
    """The exceptions of the chain, the first raised first (bounded)."""
    out = [exc]
    while len(out) < _MAX_CHAIN:
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None or nxt in out:
            break
        out.append(nxt)
        exc = nxt
    return list(reversed(out))


def _line(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _strip_leading_library(te: traceback.TracebackException) -> None:
    """Drop the frames before the first user frame (IPython's ``run_code``), in each link."""
    seen: set[int] = set()
    node: traceback.TracebackException | None = te
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        stack = list(node.stack)
        k = 0
        while k < len(stack) - 1 and is_library(stack[k].filename):
            k += 1
        if k:
            node.stack = traceback.StackSummary.from_list(stack[k:])
        node = node.__cause__ or node.__context__


def _traceback_text(exc: BaseException, name_of: Callable[[str], str | None]) -> str:
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__, limit=None)
    _strip_leading_library(te)
    lines = []
    for chunk in te.format():
        for line in chunk.splitlines():
            m = re.match(r'(\s*)File "([^"]+)", line (\d+)(.*)', line)
            if m:
                label = name_of(m[2])
                lib = " [library]" if label is None and is_library(m[2]) else ""
                where = label or f'File "{m[2]}"'
                line = f"{m[1]}{where}, line {m[3]}{m[4]}{lib}"
            lines.append(line)
    return "\n".join(lines)


def _frames(tb: TracebackType | None) -> list[tuple[FrameType, int]]:
    out = []
    while tb is not None:
        out.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return out


def _source_line(frame: FrameType, lineno: int, source: str | None) -> str:
    import linecache

    line = linecache.getline(frame.f_code.co_filename, lineno).strip()
    if not line and source is not None:
        lines = source.splitlines()
        line = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    return line


def _names_in(line: str) -> list[str]:
    try:
        tree = ast.parse(line.rstrip(":"), mode="exec")
        names = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
    except SyntaxError:
        names = re.findall(r"[A-Za-z_]\w*", line)
    return list(dict.fromkeys(names))


def _summary(name: str, value: Any, budget: int, describers: Describers | None) -> str:
    if is_secret(name):
        return f"{type(value).__name__} (secret: value hidden)"
    return describe(value, budget, describers).replace("\n", "\n      ")


def _frame_locals(
    frame: FrameType,
    lineno: int,
    where: str,
    source: str | None,
    max_chars: int,
    describers: Describers | None,
) -> FrameLocals:
    line = _source_line(frame, lineno, source)
    f_locals = frame.f_locals
    if f_locals is frame.f_globals:  # a cell's (or module's) top level: the line's names only
        picked = [
            (n, f_locals[n])
            for n in _names_in(line)
            if n in f_locals and not isinstance(f_locals[n], ModuleType)
        ]
    else:
        picked = list(islice(f_locals.items(), MAX_LOCALS))
    per = max(60, min(400, max_chars // (4 * max(1, len(picked)))))
    return FrameLocals(where, line, tuple((n, _summary(n, v, per, describers)) for n, v in picked))


def _closest(name: str, pool: Iterable[str]) -> list[str]:
    """Up to five names of ``pool`` close to ``name``, the closest first (ties by name)."""
    import difflib  # here: only a miss needs it (2.5 M instructions to import)

    ranked = []
    for candidate in set(pool):
        if candidate == name:
            continue
        ratio = difflib.SequenceMatcher(None, name.lower(), candidate.lower()).ratio()
        if ratio >= 0.7:
            ranked.append((-ratio, candidate))
    return [c for _, c in sorted(ranked)[:5]]


def _user_names(ns: Mapping[str, Any]) -> list[str]:
    return [n for n in ns if not n.startswith("_")]


def _missing(
    exc: BaseException,
    frames: list[tuple[FrameType, int]],
    user: list[tuple[FrameType, int]],
    ns: Mapping[str, Any],
    source: str | None,
) -> Missing | None:
    inner = user[-1][0] if user else None
    if isinstance(exc, NameError) and not isinstance(exc, UnboundLocalError):
        name = getattr(exc, "name", None)
        if not name:
            m = _NOT_DEFINED.search(str(exc))
            name = m[1] if m else None
        if not name:
            return None
        pool = set(_user_names(ns)) | set(dir(builtins))
        among = "the live names"
        if inner is not None and inner.f_locals is not inner.f_globals:
            pool |= set(inner.f_locals)
            among = "the live names and the frame's locals"
        pool.discard(name)
        return Missing("name", name, among, tuple(_closest(name, pool)))
    if isinstance(exc, AttributeError):
        name = getattr(exc, "name", None)
        obj = getattr(exc, "obj", None)
        if not name or obj is None:
            return None
        try:
            attrs = [a for a in dir(obj) if not a.startswith("_") or name.startswith("_")]
        except Exception:
            return None
        among = f"the attributes of {type(obj).__name__}"
        return Missing("attribute", name, among, tuple(_closest(name, attrs)))
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        key = exc.args[0]
        found = _mapping_for(key, frames, user, source)
        if found is None:
            return None
        label, mapping = found
        try:
            keys = [k for k in islice(mapping.keys(), _MAX_KEYS) if isinstance(k, str)]
        except Exception:
            return None
        return Missing("key", key, f"the keys of {label}", tuple(_closest(key, keys)))
    return None


def _resolve(node: ast.AST, frame: FrameType) -> Any:
    """The value of a ``name`` or ``name.attr`` expression in ``frame`` (no calls run)."""
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals):
            if node.id in scope:
                return scope[node.id]
        raise NotFoundError(node.id)
    if isinstance(node, ast.Attribute):
        return getattr(_resolve(node.value, frame), node.attr)
    raise NotFoundError("not a plain name")


def _mapping_for(
    key: str,
    frames: list[tuple[FrameType, int]],
    user: list[tuple[FrameType, int]],
    source: str | None,
) -> tuple[str, Any] | None:
    """The mapping a ``KeyError`` came from: a ``x[key]`` / ``x.y[key]`` in the failing user
    line, else the innermost library frame's ``self`` that has ``keys()``."""
    if user:
        frame, lineno = user[-1]
        line = _source_line(frame, lineno, source)
        try:
            tree = ast.parse(line.rstrip(":"), mode="exec")
        except SyntaxError:
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.slice, ast.Constant)
                and node.slice.value == key
            ):
                try:
                    value = _resolve(node.value, frame)
                except Exception:
                    continue
                if callable(getattr(value, "keys", None)):
                    return ast.unparse(node.value), value
    for frame, _ in reversed(frames):
        candidate = frame.f_locals.get("self")
        if candidate is not None and callable(getattr(candidate, "keys", None)):
            return type(candidate).__name__, candidate
    return None


def build_autopsy(
    exc: BaseException,
    *,
    source: str,
    ns: Mapping[str, Any],
    cell_id: str | None = None,
    execution_count: int | None = None,
    max_chars: int = 4000,
    name_of: Callable[[str], str | None] = lambda _filename: None,
    describers: Describers | None = None,
) -> Autopsy:
    """The autopsy of ``exc`` raised by a cell whose source is ``source`` and namespace
    ``ns``. ``name_of(filename)`` may name a cell's code file (``Cell In[3]``); ``describers``
    summarise the frames' locals of the types registered in it. Never raises for a broken
    object in a frame (its summary says what failed)."""
    frames = _frames(exc.__traceback__)
    user = [(f, ln) for f, ln in frames if not is_library(f.f_code.co_filename)]
    inner_user = user[-MAX_USER_FRAMES:]
    secrets = set(secret_values(ns))
    for frame, _ in inner_user:
        if frame.f_locals is not frame.f_globals:
            secrets |= set(secret_values(frame.f_locals))
    ordered = sorted(secrets, key=len, reverse=True)
    summaries = []
    for frame, lineno in inner_user:
        filename = frame.f_code.co_filename
        where = f"{name_of(filename) or filename}, line {lineno}, in {frame.f_code.co_name}"
        summaries.append(_frame_locals(frame, lineno, where, source, max_chars, describers))
    try:
        missing = _missing(exc, frames, user, ns, source)
    except Exception:  # a broken object's dir() or keys(): no suggestion, still an autopsy
        missing = None
    links = _chain(exc)
    chain = tuple(
        _line(e)
        if i == 0
        else (
            "→ raised from it: " if e.__cause__ is links[i - 1] else "→ raised while handling it: "
        )
        + _line(e)
        for i, e in enumerate(links)
    )
    masked_frames = tuple(
        FrameLocals(
            mask(f.where, ordered),
            mask(f.line, ordered),
            tuple((n, mask(s, ordered)) for n, s in f.locals),
        )
        for f in summaries
    )
    return Autopsy(
        cell_id=cell_id,
        execution_count=execution_count,
        source=mask(source, ordered),
        exception=mask(_line(exc), ordered),
        chain=tuple(mask(c, ordered) for c in chain),
        traceback=mask(_traceback_text(exc, name_of), ordered),
        frames=masked_frames,
        missing=missing,
        time=time.time(),
    )


class Autopsies:
    """The last autopsy of each failed cell, until that cell next succeeds (at most 100)."""

    def __init__(self, *, max_kept: int = MAX_KEPT) -> None:
        self.max_kept = max_kept
        self._kept: OrderedDict[str, Autopsy] = OrderedDict()

    @staticmethod
    def key(cell_id: str | None, source: str) -> str:
        return f"id:{cell_id}" if cell_id else f"src:{source}"

    def add(self, autopsy: Autopsy) -> None:
        key = self.key(autopsy.cell_id, autopsy.source)
        self._kept.pop(key, None)
        self._kept[key] = autopsy
        while len(self._kept) > self.max_kept:
            self._kept.popitem(last=False)

    def succeeded(self, cell_id: str | None, source: str) -> None:
        """That cell ran without error: forget its autopsy."""
        self._kept.pop(self.key(cell_id, source), None)

    def last(self) -> Autopsy | None:
        """The most recent failure still kept."""
        return next(reversed(self._kept.values()), None)

    def all(self) -> list[Autopsy]:
        """Kept autopsies, newest first."""
        return list(reversed(self._kept.values()))

    def find(self, cell: str | int | None) -> Autopsy | None:
        """By cell id, execution count (``5`` or ``"[5]"``) or ``None``/``""``/``"last"``
        for the most recent failure."""
        if cell is None or cell == "" or cell == "last":
            return self.last()
        text = str(cell).strip()
        count = text.strip("[]")
        for autopsy in self.all():
            if autopsy.cell_id == text:
                return autopsy
            if count.isdigit() and autopsy.execution_count == int(count):
                return autopsy
        return None

    def describe_kept(self) -> str:
        """One line per kept failure (for errors that name what exists)."""
        return ", ".join(f"{a.title()}: {a.exception}" for a in self.all()[:5]) or "none"

    def __len__(self) -> int:
        return len(self._kept)
