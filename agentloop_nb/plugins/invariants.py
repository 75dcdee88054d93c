"""Invariant companion (SPEC §4.7): every request the loop sends must be reproducible from the
session log alone, and the requests of one turn must be strict prefix extensions of each other
(so a provider's KV cache stays valid).

It wraps ``llm/stream``: before a request reaches the adapter it rebuilds the messages from the
log *from scratch* (independently of the session's incremental derivation) and the header from
the last ``request/header`` event, and compares. A violation raises :class:`InvariantError`,
which the LLM runtime turns into an error finish, so the turn ends ``error``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..messages import Message
from ..session import SURFACE_TYPES, Session
from ..session._session import parse_node

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import LlmStreamPayload


class InvariantError(AssertionError):
    """What the loop sent differs from what its log can reproduce."""


def rebuild_messages(session: Session) -> list[Message]:
    """Derive the model-visible messages from ``session.events`` in one pass from the start."""
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
    return json.dumps(value, sort_keys=True, default=list)


@dataclass(slots=True)
class _Last:
    turn: int
    messages: tuple[Message, ...]
    attempts: int


class _Checker:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.last: dict[str, _Last] = {}

    async def on_stream(self, payload: LlmStreamPayload, next: Callable[[], Awaitable[Any]]) -> Any:
        options = payload.options
        session = self.ctx.sessions.get(options.session_id) if options.session_id else None
        if session is not None:
            self.check(session, options)
        return await next()

    def check(self, session: Session, options: Any) -> None:
        where = f"session {session.id!r}"
        rebuilt = rebuild_messages(session)
        if list(options.messages) != rebuilt:
            raise InvariantError(
                f"{where}: the request's messages differ from a rebuild from the log "
                f"({len(options.messages)} sent, {len(rebuilt)} rebuilt)"
            )
        header = session.request_header()
        if header is None:
            raise InvariantError(f"{where}: a request was sent before any request/header")
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
                    f"{where}: request {key}={value!r} but the logged header says {config.get(key)!r}"
                )
        if header.get("system") != options.system:
            raise InvariantError(f"{where}: the request's system prompt is not the logged one")
        if _canon(header.get("tools", ())) != _canon(list(options.tools)):
            raise InvariantError(f"{where}: the request's tools are not the logged ones")
        self._check_prefix(session, tuple(options.messages))

    def _check_prefix(self, session: Session, messages: tuple[Message, ...]) -> None:
        turn, attempts = _turn_state(session.events)
        last = self.last.get(session.id)
        self.last[session.id] = _Last(turn, messages, attempts)
        if last is None or last.turn != turn:
            return
        n = len(last.messages)
        retried = attempts > last.attempts  # a retried step resends the same request
        if messages[:n] != last.messages or (len(messages) == n and not retried):
            raise InvariantError(
                f"session {session.id!r} turn {turn}: a request is not a strict prefix "
                "extension of the previous one (the provider's KV cache would be invalidated)"
            )


def _turn_state(events: Sequence[Any]) -> tuple[int, int]:
    attempts = 0
    for event in reversed(events):
        if event.type == "assistant/attempt":
            attempts += 1
        elif event.type == "turn/start":
            return int(event.data["turn"]), attempts
    return 0, attempts


def invariants(ctx: Context, config: Any = None) -> None:
    """Plugin: ``ctx.plugin(invariants)`` or ``App(invariants=True)``."""
    checker = _Checker(ctx)
    ctx.on("llm/stream", checker.on_stream, prepend=True)


invariants.name = "invariants"  # type: ignore[attr-defined]

__all__ = ["InvariantError", "invariants", "rebuild_messages"]
