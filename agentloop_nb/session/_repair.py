"""Crash repair: close what a crash left open so no provider sees a dangling call."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .._event_names import (
    ASSISTANT_MESSAGE,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
)
from ._events import SessionEvent
from ._session import Session

if TYPE_CHECKING:  # the data shapes' catalogue is not loaded to write them (start-up cost)
    from ..events import StepData, ToolCallData, ToolResultData, TurnEndData

__all__ = ["TOOL_OUTCOME_UNKNOWN", "repair"]

_log = logging.getLogger("agentloop_nb")

TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
_UNKNOWN_TEXT = "Error: tool outcome unknown (the session ended before the tool finished)"
_UNKNOWN_MESSAGE = (
    "the session ended before this tool call finished; it may or may not have taken effect"
)
_UNDISPATCHED_MESSAGE = (
    "the session ended after the model asked for this tool call but before it was dispatched"
)


class _Call:
    __slots__ = ("arguments", "call_id", "logged", "name", "resolved", "step", "turn")

    def __init__(
        self, call_id: str, turn: Any, step: Any, name: Any, arguments: Any, logged: bool
    ) -> None:
        self.call_id = call_id
        self.turn = turn
        self.step = step
        self.name = name
        self.arguments = arguments
        self.logged = logged  # a ``tool/call`` event exists
        self.resolved = False  # a ``tool/result`` event exists


class _Calls:
    """Tool calls by id *and occurrence*: a model may reuse an id, so the n-th ``tool/call``
    (and ``tool/result``) of an id belongs to the n-th call announced with it."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.order: list[_Call] = []
        self.by_id: dict[str, list[_Call]] = {}

    def announce(self, seq: int, call: _Call) -> None:
        same = self.by_id.setdefault(call.call_id, [])
        if not call.call_id or same:
            _log.warning(
                "session %r seq %d: tool call id %r is %s; repair pairs calls and results by "
                "id and occurrence",
                self.session_id,
                seq,
                call.call_id,
                "empty" if not call.call_id else "reused",
            )
        same.append(call)
        self.order.append(call)

    def logged(self, seq: int, call: _Call) -> None:
        pending = next((c for c in self.by_id.get(call.call_id, ()) if not c.logged), None)
        if pending is None:
            self.announce(seq, call)
        else:
            pending.logged = True

    def resolve(self, call_id: str) -> None:
        call = next((c for c in self.by_id.get(call_id, ()) if not c.resolved), None)
        if call is not None:
            call.resolved = True


def _message_tool_calls(data: Any) -> list[dict[str, Any]]:
    message = data.get("message")
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if not isinstance(content, tuple):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool-call"]


def repair(session: Session) -> list[SessionEvent]:
    """Append the events a crash left missing and return them (empty when nothing is open).

    In log order: every tool call without a ``tool/result`` (whether logged as ``tool/call`` or
    only present in an ``assistant/message`` that was never dispatched, which first gets a
    synthetic ``tool/call``) gets an error ``tool/result`` with code ``TOOL_OUTCOME_UNKNOWN``;
    then every open step gets ``step/end`` and every open turn ``turn/end{reason: {"kind":
    "interrupted"}}``. Calls pair with results by id and occurrence (the n-th result of an id
    answers its n-th call), so a model that reuses an id is repaired too; an empty or reused id
    is logged as a warning. Idempotent: a second call appends nothing. Works on prepared (resumed,
    not yet published) and published sessions; raises like ``Session.append`` when detached.
    """
    calls = _Calls(session.id)
    open_steps: dict[tuple[Any, Any], None] = {}
    open_turns: dict[Any, None] = {}
    for event in session.events:
        kind, data = event.type, event.data
        if kind == TOOL_CALL:
            call_id = data.get("call_id")
            if isinstance(call_id, str):
                turn, step, name = data.get("turn"), data.get("step"), data.get("name")
                calls.logged(
                    event.seq, _Call(call_id, turn, step, name, data.get("arguments", ""), True)
                )
        elif kind == TOOL_RESULT:
            call_id = data.get("call_id")
            if isinstance(call_id, str):
                calls.resolve(call_id)
        elif kind == ASSISTANT_MESSAGE:
            for block in _message_tool_calls(data):
                call_id = block.get("id")
                if isinstance(call_id, str):
                    turn, step = data.get("turn"), data.get("step")
                    call = _Call(
                        call_id, turn, step, block.get("name"), block.get("arguments", ""), False
                    )
                    calls.announce(event.seq, call)
        elif kind == STEP_START:
            open_steps[(data.get("turn"), data.get("step"))] = None
        elif kind == STEP_END:
            open_steps.pop((data.get("turn"), data.get("step")), None)
        elif kind == TURN_START:
            open_turns[data.get("turn")] = None
        elif kind == TURN_END:
            open_turns.pop(data.get("turn"), None)

    appended: list[SessionEvent] = []
    for call in calls.order:
        if call.resolved:
            continue
        if not call.logged:
            call_data: ToolCallData = {
                "turn": call.turn,
                "step": call.step,
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            }
            appended.append(session.append(TOOL_CALL, call_data))
        result: ToolResultData = {
            "turn": call.turn,
            "step": call.step,
            "call_id": call.call_id,
            "content": _UNKNOWN_TEXT,
            "is_error": True,
            "error": {
                "code": TOOL_OUTCOME_UNKNOWN,
                "message": _UNKNOWN_MESSAGE if call.logged else _UNDISPATCHED_MESSAGE,
            },
        }
        if isinstance(call.name, str):
            result["name"] = call.name
        appended.append(session.append(TOOL_RESULT, result))
    for turn, step in open_steps:
        ended_step: StepData = {"turn": turn, "step": step}
        appended.append(session.append(STEP_END, ended_step))
    for turn in open_turns:
        ended: TurnEndData = {"turn": turn, "reason": {"kind": "interrupted"}}
        appended.append(session.append(TURN_END, ended))
    return appended
