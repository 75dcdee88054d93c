"""``ChunkLog``: one streamed model response, announced chunk by chunk, logged coalesced.

Live and durable are two paths. Every chunk is announced at once on ``session/chunk`` (views
fold it as it streams); the durable log gets the same content in fewer ``assistant/chunk``
events, each still ``{turn, step, chunk}`` with one chunk, in stream order, where

- consecutive text (or reasoning) deltas of one block are one delta of their joined text;
- a tool-call block is held until its ``block-end`` and logged as that one ``block-end``
  carrying the assembled block (``resolve(index)`` gives it: the loop's assembler, so the log
  keeps exactly the block the model's message holds); a tool-call block the stream never ended
  is logged as streamed when the response closes (it is dropped from the message, the view
  shows it dropped), and is lost with the tail if the process dies first;
- every other chunk (block starts and ends of text, usage, finish) is kept as is, except
- the response's tail (its last ``usage`` chunk and its ``finish``) when the caller closes it
  as implied (log version 3): the ``assistant/message`` that follows holds that usage, and the
  finish is the one its content implies (``tool-calls`` with tool calls, else ``stop``).

Folding the logged chunks through a ``BlockAssembler`` gives the same message as folding the
stream; a response closed as implied needs its tail back from its message first
(``ReplayModel`` does that).

What is held is logged when the response closes (:meth:`close`), when the session's
durability barrier runs (``Session.flush``), about :data:`FLUSH_AFTER` seconds after its first
held chunk (so a slow stream is durable within that bound) and when :data:`MAX_HELD` chunks
are held. The time bound is one timer per event loop shared by every open response (armed
while any holds chunks), not a timer per response: a response that streams within one loop
iteration (a zero-latency model) costs no timer at all. A crash loses at most the chunks not
logged yet; crash repair closes the step and turn as before, and a rebuilt view shows what the
log holds.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Container, Mapping
from typing import Any, Protocol

from .._event_names import ASSISTANT_CHUNK
from .._hook_names import SESSION_CHUNK
from ._frozen import FrozenDict, wrap_frozen


class _Owner(Protocol):
    """The slice of ``Session`` a ``ChunkLog`` uses (a Protocol: no import circle)."""

    @property
    def state(self) -> str: ...

    def append(self, type: str, data: Any = None) -> Any: ...

    def announce_chunk(self, log: ChunkLog, chunk: FrozenDict) -> None: ...

    def close_chunks(self, log: ChunkLog) -> None: ...


__all__ = ["FLUSH_AFTER", "MAX_HELD", "ChunkLog"]

FLUSH_AFTER = 0.1
"""Seconds a streamed chunk waits at most before it is logged (while the loop runs)."""
MAX_HELD = 1024
"""Chunks held at most before they are logged."""

_DELTAS = frozenset({"text-delta", "reasoning-delta"})
_BLOCK_TYPES = frozenset({"block-start", "tool-call-delta", "block-end"})
_now = time.monotonic
_new_dict = dict.__new__
_init_dict = dict.__init__


class _Flusher:
    """The time bound of the open responses of one event loop: those holding chunks, by the
    time their first held chunk arrived (insertion order is time order), and one timer that
    flushes those older than ``FLUSH_AFTER``. Keyed by loop (:func:`_flusher`), so a timer
    only ever flushes responses of its own loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: dict[ChunkLog, float] = {}
        self.timer: asyncio.TimerHandle | None = None

    def hold(self, log: ChunkLog) -> None:
        self.waiting[log] = _now()
        if self.timer is None:
            self.timer = self.loop.call_later(FLUSH_AFTER, self.fire)

    def fire(self) -> None:
        self.timer = None
        now = _now()
        waiting = self.waiting
        for log, since in list(waiting.items()):
            if now - since < FLUSH_AFTER:
                break
            waiting.pop(log, None)
            if not log.closed and log.writable():
                log.flush()
        if waiting and not self.loop.is_closed():
            delay = FLUSH_AFTER - (now - next(iter(waiting.values())))
            self.timer = self.loop.call_later(max(delay, 0.0), self.fire)


_FLUSHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Flusher] = (
    weakref.WeakKeyDictionary()
)


# The flusher asked for last: a response asks once, so consecutive responses of one loop find
# theirs without the weak dictionary's Python-level ``get`` (benchmarks/README.md "Step
# (session 12)"). It keeps no loop alive that ``_FLUSHERS`` does not (a flusher holds its loop).
_last: _Flusher | None = None


def _flusher() -> _Flusher | None:
    """The running loop's flusher (``None`` without a running loop: a synchronous caller,
    bounded by close, the barrier and ``MAX_HELD``)."""
    global _last
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    flusher = _last
    if flusher is not None and flusher.loop is loop:
        return flusher
    flusher = _FLUSHERS.get(loop)
    if flusher is None:
        flusher = _FLUSHERS[loop] = _Flusher(loop)
    _last = flusher
    return flusher


Resolve = Callable[[int], Mapping[str, Any] | None]
"""``resolve(index)``: the assembled block ``index`` as JSON, or ``None`` when unknown."""


class ChunkLog:
    """The durable side of one streamed response of ``session`` (see the module docstring).

    Built by ``Session.open_chunks(turn, step, resolve)``; :meth:`add` each chunk (frozen
    JSON) in stream order, then :meth:`close` (idempotent) for the seqs of the events logged.
    """

    __slots__ = (
        "_flusher",
        "_held",
        "_listened",
        "_open_tools",
        "_pending",
        "_run",
        "_run_key",
        "_session",
        "appending",
        "closed",
        "resolve",
        "seqs",
        "step",
        "turn",
    )

    def __init__(
        self,
        session: _Owner,
        turn: int,
        step: int,
        resolve: Resolve,
        listened: Container[str] = frozenset(),
    ) -> None:
        self._session = session
        self._listened = listened  # the session's live listened names (``session/chunk``?)
        self.turn = turn
        self.step = step
        self.resolve = resolve
        self.seqs: list[int] = []
        self.closed = False
        # True only while flush appends held chunks: the ``session/event`` of each was
        # announced on ``session/chunk`` already (or is in a late view's ``held()``), so a
        # live view skips it; any other ``assistant/chunk`` append is folded as logged.
        self.appending = False
        self._pending: list[Any] = []  # coalesced chunks not logged yet
        self._run: list[str] = []  # texts of the delta run being coalesced
        self._run_key: tuple[str, int] | None = None  # (type, index) of that run
        self._open_tools: dict[int, list[Any]] = {}  # tool-call blocks held until their end
        self._held = 0  # chunks added since the last flush
        self._flusher: _Flusher | None = None  # the time bound of its loop, once it held any

    def add(self, chunk: FrozenDict) -> None:
        """Announce ``chunk`` live (``session/chunk``) and hold it until it is logged."""
        if SESSION_CHUNK in self._listened:  # fast path: nobody watches, no payload
            self._session.announce_chunk(self, chunk)
        ctype = chunk["type"]
        if ctype in _DELTAS and len(chunk) == 3:  # exactly type, index, text: coalescable
            key = (ctype, chunk["index"])
            if key != self._run_key:
                self._end_run()
                self._run_key = key
            self._run.append(chunk["text"])
        else:
            if self._run_key is not None:
                self._end_run()
            if ctype in _BLOCK_TYPES:
                self._hold(ctype, chunk)
            else:  # usage, finish: as streamed
                self._pending.append(chunk)
        held = self._held = self._held + 1
        if held == 1:
            self._wait()
        elif held >= MAX_HELD:
            self.flush()

    def add_tool_part(
        self, ctype: str, index: int, raw: Any, freeze: Callable[[Any], FrozenDict]
    ) -> None:
        """``add(freeze(raw))`` for a tool-call block's part: its ``block-start`` (``ctype``)
        or a ``tool-call-delta`` of block ``index``. While ``session/chunk`` has no listener
        the part is held as it came and frozen only if it is ever needed as streamed (its
        block has no assembled form or never ends, or :meth:`held` is asked): a block that
        ends is logged as its assembled block, so its parts are never frozen (benchmarks/
        README.md "Step (session 11)"). ``raw`` must not change afterwards."""
        if SESSION_CHUNK in self._listened:
            self.add(freeze(raw))
            return
        if self._run_key is not None:
            self._end_run()
        tools = self._open_tools
        part = (freeze, raw)
        if ctype == "block-start":
            tools[index] = [part]
        else:
            parts = tools.get(index)  # (not ``setdefault``: a list made and dropped a delta)
            if parts is None:
                tools[index] = [part]
            else:
                parts.append(part)
        held = self._held = self._held + 1
        if held == 1:
            self._wait()
        elif held >= MAX_HELD:
            self.flush()

    def end_tool_block(self, index: int, raw: Any, freeze: Callable[[Any], FrozenDict]) -> bool:
        """``add(freeze(raw))`` for ``raw``, the ``block-end`` of block ``index`` carrying no
        block of its own, when that block is a held tool-call block and ``session/chunk`` has
        no listener: the block is logged as its assembled form, so ``raw`` is frozen only when
        there is none (benchmarks/README.md "Step (session 14)"). Answers whether it did;
        ``False`` (nothing done) means: ``add`` the frozen chunk instead."""
        if SESSION_CHUNK in self._listened:
            return False
        parts = self._open_tools.pop(index, None)
        if parts is None:
            return False
        if self._run_key is not None:
            self._end_run()
        if not self._ended(index, parts):
            self._pending.append(freeze(raw))
        held = self._held = self._held + 1
        if held == 1:
            self._wait()
        elif held >= MAX_HELD:
            self.flush()
        return True

    def _hold(self, ctype: str, chunk: FrozenDict) -> None:
        index: int = chunk.get("index", -1)
        tools = self._open_tools
        if ctype == "block-start" and chunk.get("block_type") == "tool-call":
            tools[index] = [chunk]
        elif ctype == "tool-call-delta":
            tools.setdefault(index, []).append(chunk)
        elif ctype == "block-end" and index in tools:
            parts = tools.pop(index)
            if chunk.get("block") is not None:
                self._pending.append(chunk)  # the adapter's block replaces the deltas
            elif not self._ended(index, parts):
                self._pending.append(chunk)
        else:
            self._pending.append(chunk)

    def _ended(self, index: int, parts: list[Any]) -> bool:
        """Log held tool-call block ``index`` as the ``block-end`` carrying its assembled
        block, and answer ``True``; with nothing to fold ``parts`` into, log them as they came
        and answer ``False`` (the caller logs the end as streamed)."""
        block = self.resolve(index)
        if block is None:  # nothing to fold them into: keep the stream as it came
            self._pending.extend(_frozen(parts))
            return False
        # (``wrap_frozen`` inlined: once per tool call of the response)
        end: FrozenDict = _new_dict(FrozenDict)
        _init_dict(end, {"type": "block-end", "index": index, "block": block})
        self._pending.append(end)
        return True

    def _end_run(self) -> None:
        key = self._run_key
        if key is not None:
            text = self._run[0] if len(self._run) == 1 else "".join(self._run)
            self._pending.append(wrap_frozen({"type": key[0], "index": key[1], "text": text}))
            self._run = []
            self._run_key = None

    def _wait(self) -> None:
        """Start the time bound of the chunks now held."""
        flusher = self._flusher
        if flusher is None:
            flusher = self._flusher = _flusher()
            if flusher is None:
                return
        flusher.hold(self)

    def writable(self) -> bool:
        """Whether the session still takes appends (it is not detached)."""
        return self._session.state != "detached"

    def held(self) -> list[Any]:
        """The chunks announced but not logged yet, coalesced, in the order a fold needs them
        (what a view that starts mid-stream folds after the log)."""
        out = list(self._pending)
        key = self._run_key
        if key is not None:
            out.append(wrap_frozen({"type": key[0], "index": key[1], "text": "".join(self._run)}))
        for raw in self._open_tools.values():
            out.extend(_frozen(raw))
        return out

    def flush(self) -> None:
        """Log what is held (except open tool-call blocks), one ``assistant/chunk`` per
        coalesced chunk; a no-op when nothing is. Raises like ``Session.append``."""
        if self._run_key is not None:  # (``_end_run``'s own test, without its frame)
            self._end_run()
        flusher = self._flusher
        if flusher is not None:
            flusher.waiting.pop(self, None)
        pending = self._pending
        # Tool chunks still open stay held: their block is logged once, when it ends.
        open_tools = self._open_tools
        self._held = sum(map(len, open_tools.values())) if open_tools else 0
        if self._held:
            self._wait()
        if not pending:
            return
        self._pending = []
        append, seqs, turn, step = self._session.append, self.seqs, self.turn, self.step
        self.appending = True
        try:
            for chunk in pending:
                # fast path (benchmarks/bench_loop.py ingest): frozen here, not by append's
                # walk (turn and step are the loop's own ints, each chunk is frozen JSON;
                # ``wrap_frozen`` inlined, a frame per logged chunk)
                data: FrozenDict = _new_dict(FrozenDict)
                _init_dict(data, {"turn": turn, "step": step, "chunk": chunk})
                seqs.append(append(ASSISTANT_CHUNK, data).seq)
        finally:
            self.appending = False

    def close(self, implied: str | None = None) -> list[int]:
        """Log everything held (a tool-call block that never ended as streamed), stop, and
        return the seqs of the ``assistant/chunk`` events logged. Idempotent.

        ``implied``: the finish reason kind (``"tool-calls"`` or ``"stop"``) the response's
        message implies, given when the stream ended normally and that message (logged next,
        carrying the usage) stands for the tail: a finish of exactly that reason still held as
        the last chunk is not logged, nor a ``usage`` chunk held right before it. Whatever a
        flush logged already stays logged, with a tool-call block still open nothing is left
        out (its parts would follow the finish), and neither is the tail of a response that
        would then have logged no chunk at all (a message without chunks is seeded history)."""
        if not self.closed:
            self.closed = True
            if implied is not None and not self._open_tools:
                self._drop_tail(implied)
            for raw in self._open_tools.values():
                self._end_run()
                self._pending.extend(_frozen(raw))
            self._open_tools.clear()
            try:
                if self._session.state != "detached":  # ``writable()``, without its frame
                    self.flush()
            finally:
                if self._flusher is not None:
                    self._flusher.waiting.pop(self, None)
                self._session.close_chunks(self)
        return self.seqs

    def _drop_tail(self, kind: str) -> None:
        pending = self._pending
        if self._run_key is not None or not pending:
            return  # (a delta after the finish, or nothing held)
        last = pending[-1]
        if last["type"] != "finish" or len(last) != 2 or last["reason"] != {"kind": kind}:
            return
        cut = 2 if len(pending) > 1 and pending[-2]["type"] == "usage" else 1
        # A response that would log no chunk at all keeps its tail: a message with chunk seqs
        # is a model call's, one without is history a caller seeded (``ReplayModel``).
        if len(pending) > cut or self.seqs:
            del pending[-cut:]

    def __repr__(self) -> str:
        return f"<ChunkLog turn={self.turn} step={self.step} logged={len(self.seqs)}>"


def _frozen(parts: list[Any]) -> list[FrozenDict]:
    """A held tool-call block's parts as logged: each ``(freeze, raw)`` part of
    :meth:`ChunkLog.add_tool_part` frozen now, in place (once), the rest as added."""
    for i, part in enumerate(parts):
        if type(part) is tuple:
            parts[i] = part[0](part[1])
    return parts
