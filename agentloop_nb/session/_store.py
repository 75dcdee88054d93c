"""``SessionStore`` (the ``ctx.sessions`` service): prepare, publish, look up, fork, detach."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any
from uuid import uuid4

from .._hook_names import SESSION_CREATED, SESSION_DISPOSED
from ..errors import InvalidValueError, UsageError
from ._events import SessionEvent, SessionHeader
from ._frozen import FrozenDict
from ._session import Session, SessionDispatch, SessionPayload

__all__ = ["SessionStore"]

SeedItem = SessionEvent | Mapping[str, Any] | tuple[str, Mapping[str, Any] | None]


class SessionStore:
    """The registry of live sessions.

    ``dispatch`` (normally the app's root ``Context``) receives ``session/created`` through
    ``emit_strict`` (a raising listener vetoes), ``session/disposed`` and ``session/event``
    through ``emit``, and ``session/flush`` through ``parallel``. Without a dispatcher the store
    announces nothing (handy in tests). All methods are synchronous and never await.
    """

    def __init__(self, dispatch: SessionDispatch | None = None) -> None:
        self._dispatch = dispatch
        self._sessions: dict[str, Session] = {}

    @property
    def dispatch(self) -> SessionDispatch | None:
        return self._dispatch

    # -- building --------------------------------------------------------------------------

    def prepare(
        self,
        id: str | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        seed: Iterable[SeedItem] | None = None,
        header: SessionHeader | Mapping[str, Any] | None = None,
        events: Iterable[SessionEvent | Mapping[str, Any]] | None = None,
    ) -> Session:
        """Build an unpublished session (no events are announced until ``enter``).

        ``header``/``events`` describe a session loaded from persistence: ``events`` are
        already durable (contiguous seqs from 0) and a backend writes only what follows them.
        ``seed`` items (``(type, data)`` pairs, event dicts or ``SessionEvent``s) are appended
        through ``append`` after them, so they are checked and snapshotted; an item's ``time``
        is kept, its ``seq`` is reassigned. A new header takes ``cwd`` from ``meta["cwd"]`` when
        that is a string, else the process cwd. Raises ``ValueError``/``TypeError`` for invalid
        input; nothing is published on failure.
        """
        if header is not None:
            if meta is not None:
                raise InvalidValueError(
                    "pass either meta or header to SessionStore.prepare, not both"
                )
            if not isinstance(header, SessionHeader):
                header = SessionHeader.from_dict(header)
            if id is not None and id != header.id:
                raise InvalidValueError(
                    f"session id {id!r} does not match its header id {header.id!r}"
                )
        else:
            if events is not None:
                raise InvalidValueError(
                    "SessionStore.prepare: loaded events need the header they were stored with"
                )
            if id is None:
                id = f"session-{uuid4()}"
            cwd = meta.get("cwd") if meta is not None else None
            header = SessionHeader(
                id,
                cwd=cwd if isinstance(cwd, str) else os.getcwd(),
                meta=dict(meta) if meta is not None else None,
            )
        session = Session(self, header)
        if events is not None:
            session.adopt_durable(
                [e if isinstance(e, SessionEvent) else SessionEvent.from_dict(e) for e in events],
                getattr(events, "nodes", None),  # a LoadedEvents' messages, parsed at load
            )
        for item in seed or ():
            _append_seed(session, item)
        return session

    def enter(self, session: Session) -> Session:
        """Publish a prepared session and emit ``session/created`` (strict).

        Raises ``ValueError`` when a live session already has the id (nothing changes), and
        ``RuntimeError`` for a session of another store or one already detached. A raising
        ``session/created`` listener vetoes: the session is unpublished (back to "prepared",
        its id free again) and the exception propagates.
        """
        if session.store is not self:
            raise UsageError(f"session {session.id!r} belongs to another SessionStore")
        if session.state == "detached":
            raise UsageError(f"session {session.id!r} was detached and cannot be re-entered")
        if session.id in self._sessions:
            raise InvalidValueError(
                f"session {session.id!r} already exists in this store; "
                "choose another id or detach the live session first"
            )
        self._sessions[session.id] = session
        session.mark_published()
        dispatch = self._dispatch
        if dispatch is None:
            return session
        try:
            dispatch.emit_strict(SESSION_CREATED, SessionPayload(session))
        except BaseException:
            if self._sessions.get(session.id) is session:
                del self._sessions[session.id]
            session.mark_prepared()
            raise
        return session

    def create(
        self,
        id: str | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        seed: Iterable[SeedItem] | None = None,
    ) -> Session:
        """``prepare`` + ``enter``: a new published session (id minted when ``None``)."""
        return self.enter(self.prepare(id, meta=meta, seed=seed))

    def detach(self, session: Session) -> None:
        """Unpublish ``session`` and emit ``session/disposed`` (contained). Idempotent; a
        session that was never published is just closed. A detached session refuses appends.
        Only the exact entered object is removed, never a later session with the same id."""
        state = session.mark_detached()
        if state != "published":
            return
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        if self._dispatch is not None:
            self._dispatch.emit(SESSION_DISPOSED, SessionPayload(session))

    # -- lookup ----------------------------------------------------------------------------

    def get(self, id: str) -> Session | None:
        """The live (published) session with this id, or ``None``."""
        return self._sessions.get(id)

    def list(self) -> list[Session]:
        """Live sessions, in publication order."""
        return [*self._sessions.values()]

    def __contains__(self, id: object) -> bool:
        return id in self._sessions

    # -- fork ------------------------------------------------------------------------------

    def fork(self, session: Session, at_seq: int, *, id: str | None = None) -> Session:
        """Create (and publish) a new session seeded with ``session``'s events ``0..at_seq``.

        The child keeps the parent's cwd and meta plus ``meta["fork"] = {"parent_id",
        "at_seq"}``; seeded events keep their time and (frozen, shared) data. Raises
        ``ValueError`` when ``at_seq`` is not the seq of an existing event. The prefix is copied
        as is: run ``repair`` on the child if the cut leaves a tool call or turn open.
        """
        size = len(session.events)
        if type(at_seq) is not int or not 0 <= at_seq < size:
            raise InvalidValueError(
                f"cannot fork session {session.id!r} at seq {at_seq!r}: it has events 0..{size - 1}"
                if size
                else f"cannot fork session {session.id!r}: it has no events"
            )
        meta = dict(session.header.meta)
        meta["fork"] = {"parent_id": session.id, "at_seq": at_seq}
        header = SessionHeader(
            id if id is not None else f"{session.id}-fork-{uuid4().hex[:12]}",
            cwd=session.header.cwd,
            meta=meta,
        )
        child = self.prepare(header=header, seed=session.events[: at_seq + 1])
        return self.enter(child)


def _append_seed(session: Session, item: SeedItem) -> None:
    if isinstance(item, SessionEvent):
        session.append(
            item.type,
            item.data,
            surface_op=item.surface_op,
            source_event_seqs=item.source_event_seqs,
            time=item.time,
        )
        return
    if isinstance(item, Mapping) and not isinstance(item, FrozenDict):
        unknown = set(item) - {"type", "data", "surface_op", "source_event_seqs", "time", "seq"}
        if "type" not in item or unknown:
            raise InvalidValueError(
                "a seed event dict needs 'type' (and optionally 'data', 'surface_op', "
                f"'source_event_seqs', 'time'); got keys {sorted(item)}"
            )
        when = item.get("time")
        if when is not None and (not isinstance(when, int | float) or isinstance(when, bool)):
            raise InvalidValueError(f"seed event {item['type']!r}: time must be epoch seconds")
        session.append(
            item["type"],
            item.get("data"),
            surface_op=item.get("surface_op"),
            source_event_seqs=item.get("source_event_seqs"),
            time=None if when is None else float(when),
        )
        return
    if isinstance(item, tuple) and len(item) == 2:
        session.append(item[0], item[1])
        return
    raise InvalidValueError(
        f"invalid seed item {item!r}: expected a (type, data) pair, an event dict or a SessionEvent"
    )
