"""The durable event catalogue: every event type the core writes to a session log.

A session is an append-only log of ``SessionEvent(type, seq, time, data, ...)``. This module
names each type the core and its built-in plugins write, describes the shape of its ``data``
(a ``TypedDict``: a plain ``dict`` at run time, so writers pay nothing for it) and says whether
it is *model-visible* (derives a message the model sees) or log-only. ``EVENTS`` maps each type
to its ``EventSpec``; ``docs/events.md`` is generated from it (``python -m agentloop_nb._docgen``).

Plugins may append their own types; unknown types load fine and are never model-visible.

This module is a leaf: it imports nothing from the package but the type names
(``_event_names``) and, at the first use of a data shape, ``EVENTS`` or ``TURN_END_REASONS``,
the catalogue itself (``_event_catalogue``), so any layer may use it and a plugin that only
writes events by name does not build the catalogue. The core writes its events through the
names and does not import this module (start-up cost). ``SURFACE_TYPES`` (the model-visible
types) is defined with the names; it agrees with ``EVENTS``' ``model_visible``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._event_names import (
    AGENT_INBOX_SPLICED,
    ASSISTANT_ATTEMPT,
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    BUDGET_REACHED,
    COMPACTION_SUMMARY,
    LLM_RETRY,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    SURFACE_TYPES,
    TOOL_APPROVAL,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)
from ._lazy import LazyExports

if TYPE_CHECKING:
    from ._event_catalogue import (
        EVENTS,
        TURN_END_REASONS,
        AbortedReason,
        AssistantAttemptData,
        AssistantChunkData,
        AssistantMessageData,
        BudgetReachedData,
        CompactionSummaryData,
        CompletedReason,
        DisposedReason,
        ErrorReason,
        EventSpec,
        InboxSplicedData,
        InterruptedReason,
        LlmRetryData,
        MaxTokensReason,
        ReasonSpec,
        RejectedReason,
        RequestHeader,
        RequestHeaderData,
        StepData,
        ToolApprovalData,
        ToolCallData,
        ToolErrorData,
        ToolResultData,
        TurnEndData,
        TurnEndReason,
        TurnStartData,
        UserMessageData,
    )

# The data shapes and the specs load on first use (``_event_catalogue``).
_EXPORTS = LazyExports(
    __name__,
    {
        "agentloop_nb._event_catalogue": (
            "EVENTS",
            "TURN_END_REASONS",
            "AbortedReason",
            "AssistantAttemptData",
            "AssistantChunkData",
            "AssistantMessageData",
            "BudgetReachedData",
            "CompactionSummaryData",
            "CompletedReason",
            "DisposedReason",
            "ErrorReason",
            "EventSpec",
            "InboxSplicedData",
            "InterruptedReason",
            "LlmRetryData",
            "MaxTokensReason",
            "ReasonSpec",
            "RejectedReason",
            "RequestHeader",
            "RequestHeaderData",
            "StepData",
            "ToolApprovalData",
            "ToolCallData",
            "ToolErrorData",
            "ToolResultData",
            "TurnEndData",
            "TurnEndReason",
            "TurnStartData",
            "UserMessageData",
        ),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()


__all__ = [
    "AGENT_INBOX_SPLICED",
    "ASSISTANT_ATTEMPT",
    "ASSISTANT_CHUNK",
    "ASSISTANT_MESSAGE",
    "BUDGET_REACHED",
    "COMPACTION_SUMMARY",
    "EVENTS",
    "LLM_RETRY",
    "REQUEST_HEADER",
    "STEP_END",
    "STEP_START",
    "SURFACE_TYPES",
    "TOOL_APPROVAL",
    "TOOL_CALL",
    "TOOL_RESULT",
    "TURN_END",
    "TURN_END_REASONS",
    "TURN_START",
    "USER_MESSAGE",
    "AbortedReason",
    "AssistantAttemptData",
    "AssistantChunkData",
    "AssistantMessageData",
    "BudgetReachedData",
    "CompactionSummaryData",
    "CompletedReason",
    "DisposedReason",
    "ErrorReason",
    "EventSpec",
    "InboxSplicedData",
    "InterruptedReason",
    "LlmRetryData",
    "MaxTokensReason",
    "ReasonSpec",
    "RejectedReason",
    "RequestHeader",
    "RequestHeaderData",
    "StepData",
    "ToolApprovalData",
    "ToolCallData",
    "ToolErrorData",
    "ToolResultData",
    "TurnEndData",
    "TurnEndReason",
    "TurnStartData",
    "UserMessageData",
]
