"""``SessionFeed``: one session folded into a :class:`Transcript` for every view that shows it.

Views only read: the feed listens to ``session/event`` (every logged event), to
``session/chunk`` (each streamed chunk as it arrives, before the log holds it coalesced) and to the
``tools/settled`` hook (a tool body of this session's agent settled; its ``tool/result`` is
committed later, in model order), folds each into the shared transcript once, and tells its
observers what changed: the event type (or ``"tools/settled"``) and the indices of the items
that changed. Each view keeps its own record of what it has not rendered yet, so any number of views
(a cell's view, ``%agent show``, ...) can share one feed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from ..._disposer import Disposer
from ...errors import InvalidValueError
from ...models import model_table
from ._routes import router
from ._transcript import Transcript

SETTLED = "tools/settled"
"""The hook a tool body's settling is announced on (before its result is committed)."""

Observer = Callable[[str, frozenset[int]], None]
"""``observer(kind, items)``: ``kind`` is the event type (or ``"tools/settled"``), ``items`` the
indices (in ``transcript.items``) of the items that changed (empty for an event that changes
no shown item)."""

_NONE: frozenset[int] = frozenset()


_session_of: Callable[[Any], Any] = attrgetter("session")
"""The key both routers of a feed use (C-level: no frame per streamed chunk)."""


class SessionFeed:
    """A session folded into a :class:`Transcript`, telling observers each change.

    ``SessionFeed(session, ctx=None)``: logged events are read from the session store's
    dispatcher (else ``ctx``); ``tools/settled`` through ``ctx`` (e.g. ``agent.ctx``, which ties
    that subscription to the agent's scope; default: the dispatcher). Raises ``ValueError`` when
    there is neither. ``close()`` unsubscribes.
    """

    def __init__(self, session: Any, ctx: Any = None) -> None:
        self.session = session
        self.transcript = Transcript(model_table(ctx))
        self.transcript.feed_all(session.events)
        streaming = getattr(session, "streaming", None)
        if streaming is not None:  # mid-stream: what was announced but is not logged yet
            for chunk in streaming.held():
                self.transcript.feed_chunk(streaming.turn, streaming.step, chunk)
        self.transcript.take_dirty()  # history: every view renders it whole when built
        self._observers: list[Observer] = []
        store = getattr(session, "store", None)
        dispatch = getattr(store, "dispatch", None) or ctx
        ctx = ctx if ctx is not None else dispatch
        if dispatch is None:
            raise InvalidValueError(
                f"session {session.id!r} has no dispatcher to subscribe to; pass ctx="
            )
        # One ``session/event`` and one ``session/chunk`` listener per dispatcher, shared by
        # every feed (``_routes``).
        routed = router(dispatch, "session/event", _session_of).add(session, self._on_event)
        chunks = router(dispatch, "session/chunk", _session_of).add(session, self._on_chunk)
        self._offs: list[Disposer] = [routed, chunks, ctx.on(SETTLED, self._on_settled)]

    def _on_event(self, payload: Any) -> None:
        self.fold(payload.event)

    def _on_chunk(self, payload: Any) -> None:  # once per streamed chunk: fold_chunk, inlined
        # Most deltas tell nobody: their item was marked changed and no view has read it
        # since (``Transcript.feed_chunk``), so each view still has it in its pending set.
        if self.transcript.feed_chunk(payload.turn, payload.step, payload.chunk):
            self._tell("assistant/chunk")

    def fold(self, event: Any) -> None:
        """Fold one logged event of this session and tell the observers. The chunk of an
        ``assistant/chunk`` the session's ``ChunkLog`` logs was folded live already
        (:meth:`fold_chunk`), so it is skipped; one appended any other way is folded."""
        announced = False
        if event.type == "assistant/chunk":
            streaming = getattr(self.session, "streaming", None)
            announced = streaming is not None and streaming.appending
        self.transcript.feed(event, announced=announced)
        self._tell(event.type)

    def fold_chunk(self, turn: int, step: int, chunk: Any) -> None:
        """Fold one streamed chunk of this session as it arrives and tell the observers (a
        delta of an item they were told of and have not read since is not told again)."""
        if self.transcript.feed_chunk(turn, step, chunk):
            self._tell("assistant/chunk")

    def _on_settled(self, payload: Any) -> None:
        execution = payload.execution
        if getattr(execution.agent, "session", None) is not self.session:
            return
        result = payload.result
        error = result.error
        settled = self.transcript.settle(
            str(execution.call_id),
            time.time(),
            is_error=bool(result.is_error),
            code=None if error is None else str(error.code),
        )
        if settled:
            self._tell(SETTLED)

    def _tell(self, kind: str) -> None:
        dirty = self.transcript.dirty  # (take_dirty, without a new set per streamed chunk)
        if dirty:
            items = frozenset(dirty)
            dirty.clear()
        else:
            items = _NONE
        for observer in self._observers:
            observer(kind, items)

    def observe(self, observer: Observer) -> Disposer:
        """Call ``observer(kind, items)`` after each change; the returned ``Disposer`` stops."""
        self._observers.append(observer)

        def off() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return Disposer(off)

    def close(self) -> None:
        self._observers.clear()
        offs, self._offs = self._offs, []
        for off in offs:
            off()


__all__ = ["SETTLED", "Observer", "SessionFeed"]
