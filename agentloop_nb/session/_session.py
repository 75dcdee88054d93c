"""``Session``: one append-only event log and the model messages derived from it."""

from __future__ import annotations

import logging
import time as _time
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .._event_names import REQUEST_HEADER, SURFACE_TYPES
from .._hook_names import SESSION_CHUNK, SESSION_EVENT, SESSION_FLUSH
from .._record import Record, set_field
from ..context import listened
from ..errors import InvalidTypeError, InvalidValueError, UsageError
from ..messages import Message
from ._events import (
    EVENT_TYPES,
    SessionEvent,
    SessionHeader,
    _Event,
    freeze_data,
    normalize_source_seqs,
    normalize_surface_op,
)
from ._frozen import FrozenDict
from ._nodes import EventLog, parse_node

if TYPE_CHECKING:
    from ._chunklog import ChunkLog, Resolve

__all__ = [
    "Session",
    "SessionChunkPayload",
    "SessionDispatch",
    "SessionEventPayload",
    "SessionOwner",
    "SessionPayload",
    "SessionState",
]

_log = logging.getLogger("agentloop_nb")
_type = type
_now = _time.time
_NOBODY: frozenset[str] = frozenset()  # what an unpublished session announces to

SessionState = Literal["prepared", "published", "detached"]


class SessionDispatch(Protocol):
    """What a ``SessionStore`` needs to announce session events (the root ``Context`` fits).

    ``emit`` contains listener errors; ``emit_strict`` lets the first one propagate (a veto);
    ``parallel`` runs every listener concurrently and raises an ``ExceptionGroup`` after all
    settle. ``listened`` holds the names that have a listener now and must stay live (the
    session reads it once when published): an append builds its ``SessionEventPayload`` and
    calls ``emit`` only while ``"session/event"`` is in it, so an unobserved append costs one
    membership test. A dispatcher that cannot tell returns a container holding every name.
    """

    @property
    def listened(self) -> Container[str]: ...

    def emit(self, name: str, payload: Any, /) -> object: ...

    def emit_strict(self, name: str, payload: Any, /) -> object: ...

    def parallel(self, name: str, payload: Any, /) -> Awaitable[object]: ...


class SessionOwner(Protocol):
    """What a ``Session`` needs from the store that built it (``SessionStore`` fits): the
    dispatcher its events are announced through, or ``None`` to announce nothing."""

    @property
    def dispatch(self) -> SessionDispatch | None: ...


class SessionPayload(Record):
    """Payload of ``session/created``, ``session/disposed`` and ``session/flush``."""

    __slots__ = ("session",)
    __match_args__ = ("session",)

    session: Session

    def __init__(self, session: Session) -> None:
        set_field(self, "session", session)


class SessionEventPayload(Record):
    """Payload of ``session/event``: the session and the event just appended."""

    __slots__ = ("event", "session")
    __match_args__ = ("session", "event")

    session: Session
    event: SessionEvent

    def __init__(self, session: Session, event: SessionEvent) -> None:
        set_field(self, "session", session)
        set_field(self, "event", event)


class SessionChunkPayload(Record):
    """Payload of ``session/chunk``: one streamed chunk of step ``step`` of turn ``turn``, as
    frozen JSON, announced as it arrives. The log holds it later, coalesced (see
    ``ChunkLog``): a live view folds these and skips the ``assistant/chunk`` events; a view
    built from the log folds those."""

    __slots__ = ("chunk", "session", "step", "turn")
    __match_args__ = ("session", "turn", "step", "chunk")

    session: Session
    turn: int
    step: int
    chunk: FrozenDict

    def __init__(self, session: Session, turn: int, step: int, chunk: FrozenDict) -> None:
        set_field(self, "session", session)
        set_field(self, "turn", turn)
        set_field(self, "step", step)
        set_field(self, "chunk", chunk)


_new_object = object.__new__
_set_payload_session = SessionEventPayload.__dict__["session"].__set__
_set_payload_event = SessionEventPayload.__dict__["event"].__set__


_set_field = object.__setattr__  # fills a frozen payload built with ``object.__new__``


_UNSET: Any = object()


class Session:
    """One append-only event log. Built by ``SessionStore.prepare``/``create``.

    ``append`` checks and freezes its input, assigns the next contiguous ``seq`` and, once the
    session is published, emits ``session/event`` synchronously (observer errors are the
    dispatcher's to contain). ``derive_messages`` folds surface events into model messages
    incrementally. ``durable_seq`` is the last seq known written by a persistence backend
    (``-1``: none) and ``header_durable`` whether its header is; both are maintained by the
    backend through ``mark_durable``.

    Life cycle (``state``): ``"prepared"`` → ``"published"`` → ``"detached"``. The owning
    ``SessionStore`` drives it through ``mark_published`` / ``mark_prepared`` /
    ``mark_detached``; everyone else publishes and detaches through the store
    (``SessionStore.enter`` / ``detach``), which also keeps its registry and announces the
    change.
    """

    __slots__ = (
        "__weakref__",
        "_chunks",
        "_derived",
        "_durable_seq",
        "_emit",
        "_events",
        "_header_durable",
        "_header_seq",
        "_listened",
        "_nodes",
        "_state",
        "_store",
        "_surface",
        "_view",
        "_watchers",
        "header",
        "id",
    )

    def __init__(self, store: SessionOwner, header: SessionHeader) -> None:
        self._store = store
        self.header = header
        self.id = header.id
        self._events: list[SessionEvent] = []
        self._view = EventLog(self._events)
        self._state: SessionState = "prepared"
        self._emit: Any = None  # the dispatcher's bound ``emit`` while published
        self._listened: Container[str] = _NOBODY  # the dispatcher's ``listened`` while published
        self._surface: list[Message] = []
        self._derived = 0  # events folded into ``_surface`` so far
        self._nodes: dict[int, Message | None] = {}  # nodes parsed at append, not yet folded
        self._header_seq: int | None = None
        self._durable_seq = -1
        self._header_durable = False
        self._chunks: ChunkLog | None = None  # the response streaming now, if any
        # ``(callback, unless)`` per watcher (``watch_appends``): called with the session after
        # each append while published, unless the session is in ``unless`` then. Written by
        # the loop thread only; cleared whenever the session stops being published.
        self._watchers: tuple[tuple[Callable[[Session], object], Container[Session]], ...] = ()

    # -- read side -------------------------------------------------------------------------

    @property
    def events(self) -> EventLog:
        """A read-only live view of the log."""
        return self._view

    @property
    def state(self) -> SessionState:
        """``"prepared"`` (not yet published), ``"published"`` or ``"detached"``."""
        return self._state

    @property
    def store(self) -> SessionOwner:
        """The store that built this session."""
        return self._store

    @property
    def durable_seq(self) -> int:
        """The highest seq a persistence backend has written (``-1``: none)."""
        return self._durable_seq

    @property
    def header_durable(self) -> bool:
        """Whether the header is already stored (true for sessions loaded from persistence)."""
        return self._header_durable

    def mark_durable(self, seq: int, *, header: bool = True) -> None:
        """Record that a persistence backend has written every event up to ``seq`` (and the
        header, unless ``header=False``). Never moves backwards. Safe from a writer thread:
        it only stores two plain values."""
        self._header_durable = self._header_durable or header
        if seq > self._durable_seq:
            self._durable_seq = seq

    @property
    def streaming(self) -> ChunkLog | None:
        """The response streaming now (its chunks announced, some not logged yet), or
        ``None``. A view that starts mid-stream folds the log, then ``streaming.held()``."""
        return self._chunks

    def request_header(self) -> dict[str, Any] | None:
        """``data["header"]`` of the last ``request/header`` event, or ``None``."""
        seq = self._header_seq
        if seq is None:
            return None
        header = self._events[seq].data.get("header")
        return header if isinstance(header, dict) else None

    def derive_messages(self) -> list[Message]:
        """The model-visible messages, as a fresh list (see ``agentloop_nb.events``: user
        messages, non-empty assistant messages and tool results, in log order).

        Incremental: only events appended since the last call are folded in (O(new events));
        a ``replace`` surface op swaps the inclusive span of already derived nodes for its own.
        Raises ``ValueError`` if a loaded surface event does not describe a message.
        """
        if self._derived != len(self._events):
            self._catch_up()
        return list(self._surface)

    def derive_messages_tuple(self) -> tuple[Message, ...]:
        """:meth:`derive_messages` as a tuple, what a request carries (one copy of the
        history, not a list and then a tuple of it)."""
        if self._derived != len(self._events):
            self._catch_up()
        return tuple(self._surface)

    def _catch_up(self) -> None:
        events, surface, nodes = self._events, self._surface, self._nodes
        index = start = self._derived
        end = len(events)
        try:
            while index < end:
                event = events[index]
                if event.type in SURFACE_TYPES:
                    node = nodes.pop(index, _UNSET)
                    if node is _UNSET:
                        node = parse_node(event.type, event.data, index)
                    op = event.surface_op
                    if op is None or isinstance(op, str):
                        if node is not None:
                            surface.append(node)
                    else:
                        # Loaded logs are trusted: slicing clamps an out-of-range span.
                        surface[op["start"] : op["end"] + 1] = [node] if node is not None else []
                index += 1
        finally:
            self._derived = index
        if index - start > 1024 and not nodes:
            # The nodes of a loaded log, all taken: drop the big emptied table with them.
            self._nodes = {}

    # -- write side ------------------------------------------------------------------------

    def append(
        self,
        type: str,
        data: Mapping[str, Any] | None = None,
        *,
        surface_op: str | dict[str, Any] | None = None,
        source_event_seqs: Sequence[int] | None = None,
        time: float | None = None,
        _node: Any = _UNSET,
    ) -> SessionEvent:
        """Append one event and return it (immutable; ``data`` deep-frozen).

        ``time`` (epoch seconds) defaults to now; pass it to keep the time of an event copied
        from another log (seeds, forks).

        ``_node`` is private to the loop (its ``assistant/message`` and ``user/message``): the
        message the event's ``data`` derives, built from the same fields as ``data`` by
        ``logged_message`` / ``logged_user``, so it is not parsed again. Nothing else may pass
        it: a node that disagrees with ``data`` would make the derived history disagree with
        the log.

        ``data`` must be a ``dict`` (the ``TypedDict``s of ``agentloop_nb.events`` are dicts).
        Raises, logging nothing: ``TypeError`` when ``data`` is not lossless JSON (naming the
        event type and the JSON path), ``ValueError`` for an empty type, a malformed
        ``surface_op`` / ``source_event_seqs``, a surface event whose data is not a message, or
        a replace span outside the derived surface; ``RuntimeError`` once detached.
        """
        # ``type`` and ``time`` are the parameters here (``_type``/``_now`` the builtins). This
        # runs once per streamed chunk: every line counts.
        if self._state == "detached":
            raise UsageError(
                f"session {self.id!r} is detached: it accepts no more events "
                "(resume it from persistence to continue)"
            )
        if _type(type) is not str or not type:
            raise InvalidValueError(f"session event type must be a non-empty str, got {type!r}")
        events = self._events
        seq = len(events)
        frozen = data if _type(data) is FrozenDict else freeze_data(type, data)
        op = None if surface_op is None else normalize_surface_op(surface_op, type)
        seqs = normalize_source_seqs(source_event_seqs, seq, type) if source_event_seqs else ()
        surface = type in SURFACE_TYPES
        if surface:
            node = parse_node(type, frozen, seq) if _node is _UNSET else _node
            if op is not None and not isinstance(op, str):
                self._check_span(type, op)
        # fast path (benchmarks/README.md "Step (session 14)"): the slots stored through the
        # event's twin, not a setter call each; its stores made here, not by its ``__init__``
        # (a class call runs ``__init__`` in a new C-level frame: about 800 instructions an
        # event). Keep in step with ``_Event.__init__`` (tests/test_twin.py compares both with
        # the constructor, slot by slot).
        event: Any = _new_object(_Event)  # a ``SessionEvent`` once its class is set
        event.type = type
        event.seq = seq
        event.time = _now() if time is None else time
        event.data = frozen
        event.surface_op = op
        event.source_event_seqs = seqs
        event.__class__ = SessionEvent
        events.append(event)
        if surface:
            self._nodes[seq] = node
        elif type == REQUEST_HEADER:
            self._header_seq = seq
        if self._watchers:
            # Watchers run before ``session/event``'s listeners: one of those may append from
            # its handler, and a writer must have seen the event that led to it first.
            for watch, unless in self._watchers:
                if self in unless:  # already told (the writer's usual case): no call
                    continue
                try:
                    watch(self)
                except Exception:  # the event is logged: a watcher's bug must not undo that
                    _log.exception("agentloop_nb: a watcher of session %r failed", self.id)
        # fast path (benchmarks/bench_ab.py, unobserved hooks): no payload, no emit call
        if SESSION_EVENT in self._listened:
            # The payload without the frozen dataclass's ``__init__`` (two
            # ``object.__setattr__`` lookups) and without a helper's frame: while a view or a
            # plugin listens, this runs once per logged event.
            payload: SessionEventPayload = _new_object(SessionEventPayload)
            _set_payload_session(payload, self)
            _set_payload_event(payload, event)
            self._emit(SESSION_EVENT, payload)
        return event

    def watch_appends(
        self, callback: Callable[[Session], object], *, unless: Container[Session] = ()
    ) -> None:
        """Call ``callback(session)`` after each append from now on, while the session stays
        published, before ``session/event`` is emitted (the persistence seam: a write-behind
        backend watches each session it writes, so a logged event costs it one call, not an
        announcement). An append skips the call while the session is in ``unless`` (a live
        container the watcher keeps, read at each append: a writer's set of sessions it has
        been told about and not yet served, so a logged event usually costs it no call at
        all). Unpublishing or detaching the session drops every watcher; watching twice with
        the same callback is one watcher (the first ``unless`` stays). Errors are logged,
        never raised: the event is already in the log. Raises ``UsageError`` unless
        published."""
        if self._state != "published":
            raise UsageError(
                f"session {self.id!r} is {self._state}: only a published session is watched"
            )
        if all(watch != callback for watch, _ in self._watchers):
            self._watchers = (*self._watchers, (callback, unless))

    def unwatch_appends(self, callback: Callable[[Session], object]) -> None:
        """Stop calling ``callback`` (a no-op when it does not watch)."""
        self._watchers = tuple(w for w in self._watchers if w[0] != callback)

    def open_chunks(self, turn: int, step: int, resolve: Resolve) -> ChunkLog:
        """Start logging a streamed response of step ``step`` of turn ``turn``: its chunks go
        through the returned ``ChunkLog`` (see its module). ``resolve(index)`` gives the
        assembled block ``index`` as JSON when a tool-call block ends. A response still open
        is closed first (its held chunks logged). Raises ``UsageError`` (a ``RuntimeError``) once
        detached."""
        if self._state == "detached":
            raise UsageError(
                f"session {self.id!r} is detached: it accepts no more events "
                "(resume it from persistence to continue)"
            )
        if self._chunks is not None:
            self._chunks.close()
        log = self._chunks = (_CHUNK_LOG or _chunk_log_class())(
            self, turn, step, resolve, self._listened
        )
        return log

    def close_chunks(self, log: ChunkLog) -> None:
        """Forget ``log`` as the streaming response (``ChunkLog.close`` calls it)."""
        if self._chunks is log:
            self._chunks = None

    def announce_chunk(self, log: ChunkLog, chunk: FrozenDict) -> None:
        """Emit ``session/chunk`` for ``chunk`` of ``log`` (``ChunkLog.add`` calls it while
        ``session/chunk`` has a listener)."""
        emit = self._emit
        if emit is not None:
            # Once per streamed chunk while a view listens: no frozen ``__init__``, no frame.
            payload: SessionChunkPayload = _new_object(SessionChunkPayload)
            _set_field(payload, "session", self)
            _set_field(payload, "turn", log.turn)
            _set_field(payload, "step", log.step)
            _set_field(payload, "chunk", chunk)
            emit(SESSION_CHUNK, payload)

    def _check_span(self, event_type: str, op: FrozenDict) -> None:
        if self._derived != len(self._events):
            self._catch_up()
        size = len(self._surface)
        if op["end"] >= size:
            raise InvalidValueError(
                f"session event {event_type!r}: replace span {op['start']}..{op['end']} is "
                f"outside the derived surface ({size} messages: valid indices 0..{size - 1})"
            )

    def adopt_durable(
        self,
        events: Sequence[SessionEvent],
        nodes: Mapping[int, tuple[SessionEvent, Message | None]] | None = None,
    ) -> None:
        """Take already-durable events (loaded from persistence) as the start of the log.

        Only for a session that has no events yet (``SessionStore.prepare`` calls it).
        ``nodes`` (``LoadedEvents.nodes``) are messages a loader already parsed from surface
        events, ``{seq: (event, message)}``; ``derive_messages`` uses each one whose event is
        the very object at that seq instead of parsing it again. Raises ``TypeError`` for
        items that are not ``SessionEvent``s, ``ValueError`` for seqs that are not contiguous
        from 0 or a log that is not empty."""
        if self._events:
            raise InvalidValueError(f"session {self.id!r}: loaded events must start an empty log")
        for index, event in enumerate(events):
            if _type(event) not in EVENT_TYPES:
                raise InvalidTypeError(f"session {self.id!r}: loaded events must be SessionEvents")
            if event.seq != index:
                raise InvalidValueError(
                    f"session {self.id!r}: loaded events must have contiguous seqs from 0; "
                    f"event {index} has seq {event.seq}"
                )
            if event.type == REQUEST_HEADER:
                self._header_seq = index
        self._events.extend(events)
        if nodes:
            count = len(events)
            self._nodes = {
                seq: node
                for seq, (event, node) in nodes.items()
                if seq < count and events[seq] is event
            }
        self._durable_seq = len(events) - 1
        self._header_durable = True

    async def flush(self) -> None:
        """The durability barrier: emit ``session/flush`` (parallel) and await its listeners,
        i.e. until persistence has written every event appended so far. A no-op for a session
        that is not published or whose store has no dispatcher. Listener failures propagate as
        an ``ExceptionGroup``; cancellation cancels the wait, not the writes."""
        dispatch = self._store.dispatch
        if self._state != "published" or dispatch is None:
            return
        if self._chunks is not None:
            self._chunks.flush()  # what streamed so far is part of "every event appended"
        if SESSION_FLUSH not in self._listened:
            # fast path (docs/architecture.md "Turn, session 14"): nobody listens anywhere,
            # so the dispatch would reach nobody (the loop flushes twice a turn)
            return
        await dispatch.parallel(SESSION_FLUSH, SessionPayload(self))

    def flush_waits(self) -> bool:
        """Whether :meth:`flush` would dispatch ``session/flush`` now (and so may suspend);
        when false it returns without suspending, so nothing can cancel it (asked live: a
        listener added later makes it true)."""
        return (
            SESSION_FLUSH in self._listened
            and self._state == "published"
            and self._store.dispatch is not None
        )

    # -- life cycle (driven by the owning store) --------------------------------------------

    def mark_published(self) -> None:
        """``"prepared"`` → ``"published"``: from now on appends emit ``session/event``
        through the store's dispatcher. Raises ``RuntimeError`` unless prepared."""
        if self._state != "prepared":
            raise UsageError(f"session {self.id!r} is {self._state}, not prepared")
        self._state = "published"
        dispatch = self._store.dispatch
        if dispatch is not None:
            self._emit = dispatch.emit
            self._listened = listened(dispatch)  # kept: the container is live

    def mark_prepared(self) -> None:
        """Undo ``mark_published`` (a vetoed publication): appends stop announcing. A no-op
        unless published."""
        if self._state == "published":
            self._state = "prepared"
            self._emit = None
            self._listened = _NOBODY
            self._watchers = ()

    def mark_detached(self) -> SessionState:
        """Move to ``"detached"`` (final: appends raise from now on) and return the state the
        session was in before. Idempotent. A response still streaming is closed first."""
        chunks = self._chunks
        if chunks is not None and self._state != "detached":
            chunks.close()
        before = self._state
        self._state = "detached"
        self._emit = None
        self._listened = _NOBODY
        self._watchers = ()
        return before

    def __repr__(self) -> str:
        return f"<Session {self.id!r} {self._state} events={len(self._events)}>"


# ``ChunkLog``, once the first streamed response has loaded it (``import agentloop_nb`` and a
# program that only reads or replays sessions do not need it); a global read per response after.
_CHUNK_LOG: type[ChunkLog] | None = None


def _chunk_log_class() -> type[ChunkLog]:
    global _CHUNK_LOG
    from ._chunklog import ChunkLog

    _CHUNK_LOG = ChunkLog
    return ChunkLog
