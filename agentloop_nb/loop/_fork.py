"""The fork transaction's pure half: which events of a source session a fork starts from.

A fork is a new session seeded with the source's *surface history* (``user/message``,
``assistant/message``, ``tool/result``, compaction replaces included) up to event ``at_seq``,
then created through the one creation transaction like any other agent (see
``AgentLoop.fork``). Log-only events (chunks, headers, turn and step markers, inbox splices)
are not copied: the fork starts a fresh turn numbering, its first request logs a fresh
``request/header``, and its inbox is empty.

**The cut rule.** A fork never splits a tool call from its result. When ``at_seq`` falls inside
a step after the assistant message that asked for tool calls but before the last of their
results, the cut moves back to just before that assistant message: the fork keeps the step's
user input and drops the half-answered model reply with the results logged so far. A cut after
the last result (or in a step without tool calls) keeps everything up to ``at_seq``. The header
records the requested ``at_seq`` and the seq of the last copied source event (``cut_seq``;
``-1`` when nothing was copied).

The source is only read: a live session's events, or a stored one loaded from persistence
(reading never writes nor locks the file).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import uuid4

from .._event_names import ASSISTANT_MESSAGE, TOOL_RESULT
from .._record import Record, set_field
from ..errors import InvalidValueError
from ..session import SURFACE_TYPES, SessionEvent, SessionHeader

__all__ = ["ForkPlan", "plan_fork"]


class ForkPlan(Record):
    """What a fork creates: the new session id, its header meta and its seed events."""

    __slots__ = ("cut_seq", "meta", "seed", "session_id")
    __match_args__ = ("session_id", "meta", "seed", "cut_seq")

    session_id: str
    meta: dict[str, Any]
    seed: list[dict[str, Any]]
    cut_seq: int

    def __init__(
        self, session_id: str, meta: dict[str, Any], seed: list[dict[str, Any]], cut_seq: int
    ) -> None:
        set_field(self, "session_id", session_id)
        set_field(self, "meta", meta)
        set_field(self, "seed", seed)
        set_field(self, "cut_seq", cut_seq)


def plan_fork(
    header: SessionHeader,
    events: Sequence[SessionEvent],
    at_seq: int | None = None,
    session_id: str | None = None,
) -> ForkPlan:
    """Plan a fork of the session ``header``/``events`` at ``at_seq`` (default: its last event).

    Raises ``ValueError`` when ``at_seq`` is not the seq of one of its events (a session with
    no events can only be forked with ``at_seq=None``).
    """
    source_id = header.id
    if at_seq is None:
        at_seq = len(events) - 1
    elif type(at_seq) is not int or not 0 <= at_seq < len(events):
        span = f"events 0..{len(events) - 1}" if events else "no events"
        raise InvalidValueError(
            f"cannot fork session {source_id!r} at seq {at_seq!r}: it has {span}"
        )
    kept = _cut(events[: at_seq + 1])
    meta: dict[str, Any] = {
        "cwd": header.cwd,
        "forked_from": source_id,
        "at_seq": at_seq,
        "cut_seq": kept[-1].seq if kept else -1,
    }
    seed = [_seed_item(e) for e in kept]
    new_id = session_id if session_id is not None else f"{source_id}-fork-{uuid4().hex[:12]}"
    return ForkPlan(new_id, meta, seed, meta["cut_seq"])


def _cut(prefix: Sequence[SessionEvent]) -> list[SessionEvent]:
    """The surface events of ``prefix``, cut back before an assistant message whose tool calls
    are not all answered inside ``prefix``."""
    kept: list[SessionEvent] = []
    open_calls: set[str] = set()
    open_at = -1  # index in ``kept`` of the assistant message with open calls
    for event in prefix:
        if event.type not in SURFACE_TYPES:
            continue
        if event.type == ASSISTANT_MESSAGE:
            calls = _tool_call_ids(event)
            if calls:
                open_calls, open_at = set(calls), len(kept)
        elif event.type == TOOL_RESULT:
            open_calls.discard(str(event.data.get("call_id")))
        kept.append(event)
    if open_calls and open_at >= 0:
        del kept[open_at:]
    return kept


def _tool_call_ids(event: SessionEvent) -> list[str]:
    message = event.data.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, Sequence) or isinstance(content, str):
        return []
    return [
        str(block.get("id"))
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "tool-call"
    ]


def _seed_item(event: SessionEvent) -> dict[str, Any]:
    # ``source_event_seqs`` name chunks of the source log that the fork does not copy.
    item: dict[str, Any] = {"type": event.type, "data": event.data, "time": event.time}
    if event.surface_op is not None:
        item["surface_op"] = event.surface_op
    return item
