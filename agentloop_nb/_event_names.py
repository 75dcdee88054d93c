"""The durable event type names as constants (a leaf any layer may import; public through
``events``, whose catalogue of data shapes loads at its first import: the writers need only
the names, start-up cost)."""

from __future__ import annotations

__all__ = [
    "AGENT_INBOX_SPLICED",
    "ASSISTANT_ATTEMPT",
    "ASSISTANT_CHUNK",
    "ASSISTANT_MESSAGE",
    "BUDGET_REACHED",
    "COMPACTION_SUMMARY",
    "LLM_RETRY",
    "REQUEST_HEADER",
    "STEP_END",
    "STEP_START",
    "SURFACE_TYPES",
    "TOOL_APPROVAL",
    "TOOL_CALL",
    "TOOL_RESULT",
    "TURN_END",
    "TURN_START",
    "USER_MESSAGE",
]

AGENT_INBOX_SPLICED = "agent/inbox/spliced"
TURN_START = "turn/start"
TURN_END = "turn/end"
STEP_START = "step/start"
STEP_END = "step/end"
USER_MESSAGE = "user/message"
REQUEST_HEADER = "request/header"
ASSISTANT_CHUNK = "assistant/chunk"
ASSISTANT_MESSAGE = "assistant/message"
ASSISTANT_ATTEMPT = "assistant/attempt"
TOOL_CALL = "tool/call"
TOOL_RESULT = "tool/result"
TOOL_APPROVAL = "tool/approval"
LLM_RETRY = "llm/retry"
COMPACTION_SUMMARY = "compaction/summary"
BUDGET_REACHED = "budget/reached"

SURFACE_TYPES = frozenset((USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT, COMPACTION_SUMMARY))
"""Event types that derive model-visible messages; every other type is log-only (the
catalogue's ``model_visible``: ``events.EVENTS``; a test checks the two agree)."""
