"""Invariant companion: every request the loop sends must be reproducible from the session log
alone, and the requests of one turn must be strict prefix extensions of each other (so a
provider's KV cache stays valid).

It wraps ``llm/stream``. Only the loop's own requests are checked: a request whose
``session_id`` names a session with an open step that has not received its assistant message
yet. One-shot ``ctx.llm.stream`` calls (outside a turn, or from a tool body) pass unchecked.
For a checked request it compares the messages with the session's derived messages and the
header with the last ``request/header`` event, then checks the prefix extension against the
previous request of the same turn; a compaction replace (a ``compaction/summary`` event with a
replace surface op) logged since then restarts the prefix check, any other replace does not.

A violation never raises out of the stream: the request gets one terminal error finish with
code ``INVARIANT`` instead, so the turn ends ``error`` with that code.

The check is incremental: it walks back only over the current step's events, and compares
messages by identity first (the loop builds its request from the session's derived messages).
"""

from __future__ import annotations

import json
import operator
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import AgentloopError
from ..events import (
    ASSISTANT_ATTEMPT,
    ASSISTANT_MESSAGE,
    COMPACTION_SUMMARY,
    STEP_END,
    STEP_START,
    TURN_END,
    TURN_START,
)
from ..hooks import LLM_STREAM
from ..llm import ErrorFinish, Finish
from ..messages import Message
from ..session import SURFACE_TYPES, Session, parse_node

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import LlmStreamPayload

INVARIANT = "INVARIANT"


class InvariantError(AssertionError, AgentloopError):
    """What the loop sent differs from what its log can reproduce (``code`` is ``INVARIANT``)."""

    code = INVARIANT


def rebuild_messages(session: Session) -> list[Message]:
    """Derive the model-visible messages from ``session.events`` in one pass from the start (a
    diagnostic, independent of the session's incremental derivation)."""
    surface: list[Message] = []
    for event in session.events:
        if event.type not in SURFACE_TYPES:
            continue
        node = parse_node(event.type, event.data, event.seq)
        op = event.surface_op
        if op is None or isinstance(op, str):
            if node is not None:
                surface.append(node)
        else:
            surface[op["start"] : op["end"] + 1] = [node] if node is not None else []
    return surface


def _canon(value: Any) -> str:
    # sorted keys: a canonical form to compare, not an encoding
    return json.dumps(value, sort_keys=True, default=list)


@dataclass(slots=True)
class _Last:
    turn: int
    step: int
    attempts: int
    messages: tuple[Message, ...]
    seen: int  # the log length when it was checked: later events are "since"


@dataclass(frozen=True, slots=True)
class _Where:
    """Where the loop is in the session when it sends a request."""

    turn: int
    step: int
    attempts: int  # assistant/attempt events of this step (retries resend the same request)


def _loop_request(events: Sequence[Any]) -> _Where | None:
    """The open step awaiting its model answer, or ``None`` (then it is not the loop's
    request). Walks back over the current step only."""
    attempts = 0
    for i in range(len(events) - 1, -1, -1):
        event = events[i]
        kind = event.type
        if kind == STEP_START:
            return _Where(int(event.data["turn"]), int(event.data["step"]), attempts)
        if kind == ASSISTANT_ATTEMPT:
            attempts += 1
        elif kind in (ASSISTANT_MESSAGE, STEP_END, TURN_END, TURN_START):
            return None
    return None


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Element-wise equality, by identity first (C speed), by value when that fails."""
    if len(a) != len(b):
        return False
    return all(map(operator.is_, a, b)) or list(a) == list(b)


class _Checker:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.last: dict[str, _Last] = {}

    async def on_stream(self, payload: LlmStreamPayload, next: Callable[[], Awaitable[Any]]) -> Any:
        options = payload.options
        session = self.ctx.sessions.get(options.session_id) if options.session_id else None
        if session is not None:
            try:
                self.check(session, options)
            except InvariantError as exc:
                return _refuse(str(exc))
        return await next()

    def check(self, session: Session, options: Any) -> None:
        """Check one request against ``session``; a no-op for requests the loop did not send.
        Raises :class:`InvariantError` naming the first difference."""
        events = session.events
        where = _loop_request(events)
        if where is None:
            return
        label = f"session {session.id!r}"
        messages = tuple(options.messages)
        derived = session.derive_messages()
        if not _same(messages, derived):
            raise InvariantError(
                f"{label}: the request's messages differ from a rebuild from the log "
                f"({len(messages)} sent, {len(derived)} rebuilt)"
            )
        _check_header(label, session, options)
        self._check_prefix(session, where, messages, len(events))

    def _check_prefix(
        self, session: Session, where: _Where, messages: tuple[Message, ...], seen: int
    ) -> None:
        last = self.last.get(session.id)
        self.last[session.id] = _Last(where.turn, where.step, where.attempts, messages, seen)
        if last is None or last.turn != where.turn or _compacted(session.events, last.seen):
            return
        n = len(last.messages)
        retried = where.step == last.step and where.attempts > last.attempts
        extends = len(messages) >= n and (
            all(map(operator.is_, last.messages, messages)) or messages[:n] == last.messages
        )
        if not extends or (len(messages) == n and not retried):
            raise InvariantError(
                f"session {session.id!r} turn {where.turn}: a request is not a strict prefix "
                "extension of the previous one (the provider's KV cache would be invalidated)"
            )


def _check_header(label: str, session: Session, options: Any) -> None:
    header = session.request_header()
    if header is None:
        raise InvariantError(f"{label}: a request was sent before any request/header")
    config = dict(header.get("config", {}))
    sent = {
        "provider": options.provider,
        "model": options.model,
        "max_tokens": options.max_tokens,
        "temperature": options.temperature,
        "reasoning_effort": options.reasoning_effort,
    }
    for key, value in sent.items():
        if config.get(key) != value:
            raise InvariantError(
                f"{label}: request {key}={value!r} but the logged header says {config.get(key)!r}"
            )
    if header.get("system") != options.system:
        raise InvariantError(f"{label}: the request's system prompt is not the logged one")
    if _canon(header.get("tools", ())) != _canon(list(options.tools)):
        raise InvariantError(f"{label}: the request's tools are not the logged ones")


def _compacted(events: Sequence[Any], since: int) -> bool:
    """Whether a compaction replace was logged at or after index ``since``."""
    for i in range(since, len(events)):
        event = events[i]
        if event.type == COMPACTION_SUMMARY and isinstance(event.surface_op, dict):
            return True
    return False


async def _refuse(message: str) -> AsyncIterator[Any]:
    yield Finish(reason=ErrorFinish(code=INVARIANT, message=message))


def invariants(ctx: Context, config: Any = None) -> None:
    """Plugin: ``ctx.plugin(invariants)`` or ``App(invariants=True)``."""
    checker = _Checker(ctx)
    ctx.on(LLM_STREAM, checker.on_stream, prepend=True)


invariants.name = "invariants"  # type: ignore[attr-defined]

__all__ = ["INVARIANT", "InvariantError", "invariants", "rebuild_messages"]
