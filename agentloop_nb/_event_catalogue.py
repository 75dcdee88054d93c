"""The durable event catalogue's shapes and specs, behind ``agentloop_nb.events``.

``agentloop_nb.events`` is the public module: it hands out the type names at once and loads this
module at the first use of one of the names below (the ``TypedDict`` data shapes, ``EVENTS``,
``TURN_END_REASONS``), so a plugin that writes an event by its name does not build the
catalogue (start-up cost: thirty ``TypedDict``s). A leaf: it imports only ``_event_names``.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, NotRequired, TypedDict

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
    TOOL_APPROVAL,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)

__all__ = [
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
]

# -- turn-end reasons ------------------------------------------------------------------------


class CompletedReason(TypedDict):
    """The model stopped and nothing was pending."""

    kind: Literal["completed"]


class MaxTokensReason(TypedDict):
    """A step of the turn hit the output-token limit (its tool calls were dropped)."""

    kind: Literal["max-tokens"]


class _RejectedRequired(TypedDict):
    kind: Literal["rejected"]


class RejectedReason(_RejectedRequired, total=False):
    """An ``agent/pre-step`` listener answered ``Reject`` (its reason, when given)."""

    reason: str


class AbortedReason(TypedDict):
    """``agent.cancel(cause)`` stopped the turn; the first cause wins."""

    kind: Literal["aborted"]
    cause: dict[str, Any]


class ErrorReason(TypedDict):
    """A plugin or the model failed; ``code`` is an ``LlmError`` code or ``UNKNOWN``."""

    kind: Literal["error"]
    message: str
    code: str


class DisposedReason(TypedDict):
    """The agent was disposed while the turn ran."""

    kind: Literal["disposed"]


class InterruptedReason(TypedDict):
    """Written by crash repair for a turn the log left open."""

    kind: Literal["interrupted"]


TurnEndReason = (
    CompletedReason
    | MaxTokensReason
    | RejectedReason
    | AbortedReason
    | ErrorReason
    | DisposedReason
    | InterruptedReason
)


@dataclass(frozen=True, slots=True)
class ReasonSpec:
    """One turn-end reason kind: its ``kind``, data shape and what it means."""

    kind: str
    shape: type
    description: str


def _reason(kind: str, shape: type) -> ReasonSpec:
    return ReasonSpec(kind, shape, _first_line(shape))


def _first_line(obj: object) -> str:
    return (obj.__doc__ or "").strip().splitlines()[0]


# -- data shapes -----------------------------------------------------------------------------


class _InboxSplicedRequired(TypedDict):
    target: Literal["next-turn", "next-step"]
    start: int
    removed_count: int
    inserted: list[dict[str, Any]]


class InboxSplicedData(_InboxSplicedRequired, total=False):
    """``inserted``: user messages as JSON; ``outcome: "canceled"`` when input is dropped
    (no outcome: input claimed by a turn or a step)."""

    outcome: Literal["canceled"]


class TurnStartData(TypedDict):
    turn: int


class TurnEndData(TypedDict):
    turn: int
    reason: TurnEndReason


class StepData(TypedDict):
    """Data of ``step/start`` and ``step/end``."""

    turn: int
    step: int


class UserMessageData(TypedDict):
    """``message``: ``{id, role: "user", content, source}`` as JSON."""

    message: dict[str, Any]


class RequestHeader(TypedDict):
    """What a request is built from besides the messages."""

    config: dict[str, Any]
    system: str
    tools: list[dict[str, Any]]


class RequestHeaderData(TypedDict):
    header: RequestHeader
    reason: Literal["initial", "resume", "change"]


class AssistantChunkData(TypedDict):
    """``chunk``: one stream chunk as JSON (``type`` plus its fields). Logged coalesced (log
    version 2): consecutive text (or reasoning) deltas of a block are one delta of their
    joined text, and a tool-call block is one ``block-end`` carrying the assembled block,
    logged when the block completes; every chunk is announced live on ``session/chunk``.
    Since version 3 a response's last ``usage`` chunk and its ``finish`` are not logged when
    the ``assistant/message`` implies them (it holds that usage; the finish is ``tool-calls``
    when it holds a tool call, else ``stop``) and the response logs another chunk; any other
    finish is logged. Version-1 logs hold every chunk as streamed, in the same form."""

    turn: int
    step: int
    chunk: dict[str, Any]


class _AssistantMessageRequired(TypedDict):
    turn: int
    step: int
    message: dict[str, Any]


class AssistantMessageData(_AssistantMessageRequired, total=False):
    """``message``: ``{role: "assistant", content}``; ``interrupted`` when cancellation cut it."""

    usage: dict[str, Any]
    interrupted: bool


class AssistantAttemptData(TypedDict):
    """``chunks``: the seqs of the failed attempt's ``assistant/chunk`` events; ``failure``:
    its error finish."""

    turn: int
    step: int
    chunks: list[int]
    failure: dict[str, Any]


class ToolCallData(TypedDict):
    """``arguments`` is the raw JSON string the model produced."""

    turn: int
    step: int
    call_id: str
    name: str
    arguments: str


class _ToolApprovalRequired(TypedDict):
    turn: int
    step: int
    call_id: str
    state: Literal["asked", "approved", "edited", "denied", "aborted", "failed"]


class ToolApprovalData(_ToolApprovalRequired, total=False):
    """``state``: ``asked`` when the approval service is asked (``reason`` from ``Ask``), then
    the answer: ``approved``, ``edited`` (approved with edited arguments), ``denied`` (a person
    declined, or the service denied, e.g. nobody answered in time), ``aborted`` (the call was
    stopped while waiting) or ``failed`` (the approval service raised). The time between the
    two events is the wait for a person, not the call's own run time."""

    reason: str


class ToolErrorData(TypedDict):
    code: str
    message: str


class _ToolResultRequired(TypedDict):
    turn: int
    step: int
    call_id: str
    content: Any
    is_error: bool


class ToolResultData(_ToolResultRequired, total=False):
    """``error`` is present on error results; ``meta`` is the tool's extra data. ``content``
    is a string, or a list of blocks (``{"type": "text", "text"}``, ``{"type": "image",
    "media_type", "data"}`` with base64 data) when the tool returned images."""

    name: str
    error: ToolErrorData
    meta: dict[str, Any]


class LlmRetryData(TypedDict):
    """``delay`` in seconds before the retry; ``provider`` the provider that failed."""

    code: str
    attempt: int
    delay: float
    turn: int
    step: int
    provider: NotRequired[str]


class _CompactionSummaryRequired(TypedDict):
    start: int
    end: int
    summary: str
    tokens_before: int
    tokens_after_estimate: int
    model: str
    message: dict[str, Any]


class CompactionSummaryData(_CompactionSummaryRequired, total=False):
    """Surface indices ``start..end`` (inclusive) were summarised into ``message`` (a user
    message beginning ``Summary of the earlier conversation:``; ``summary`` is its text after
    that line). ``tokens_*`` are estimates of the request size; ``model`` made the summary and
    ``usage`` is that call's reported usage; ``reason`` is ``"pressure"``, ``"overflow"`` or
    ``"forced"``."""

    usage: dict[str, Any]
    reason: str
    turn: int
    step: int


class BudgetReachedData(TypedDict):
    """A budget limit was reached at ``agent/pre-step``: ``limit`` is the setting's name (e.g.
    ``"max_steps_per_turn"``), ``value`` its current value, ``used`` the amount used and
    ``scope`` ``"agent"`` or ``"app"``."""

    limit: str
    value: float
    used: float
    scope: Literal["agent", "app"]


# -- the catalogue ---------------------------------------------------------------------------

Visibility = Literal["no", "yes", "non-empty"]


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One durable event type.

    ``model_visible``: ``"yes"`` (derives a model message), ``"non-empty"`` (only when its
    message has content) or ``"no"`` (log-only). ``writer``: who appends it.
    """

    type: str
    data: builtins.type
    model_visible: Visibility
    writer: str
    description: str


def _spec(
    name: str, data: type, description: str, visible: Visibility = "no", writer: str = "loop"
) -> EventSpec:
    return EventSpec(name, data, visible, writer, description)


_CORE = (
    _spec(
        AGENT_INBOX_SPLICED,
        InboxSplicedData,
        "Pending input changed: messages inserted into, claimed from or dropped from an inbox "
        "list (`next-turn` or `next-step`).",
    ),
    _spec(TURN_START, TurnStartData, "A turn opened (turn numbers count from 1 per session)."),
    _spec(TURN_END, TurnEndData, "A turn closed, with the reason it ended."),
    _spec(STEP_START, StepData, "A step (one model call and its tool calls) opened."),
    _spec(STEP_END, StepData, "A step closed; always before its turn's `turn/end`."),
    _spec(USER_MESSAGE, UserMessageData, "Input entered a step.", "yes"),
    _spec(
        REQUEST_HEADER,
        RequestHeaderData,
        "The request's config, system prompt and tool schemas, logged when they differ from "
        "the last header logged.",
    ),
    _spec(
        ASSISTANT_CHUNK,
        AssistantChunkData,
        "One chunk of a model response, logged coalesced (a text block's deltas joined, a "
        "tool-call block once, when it ends; the usage and finish its message implies left "
        "out); views see every chunk live on `session/chunk`.",
    ),
    _spec(
        ASSISTANT_MESSAGE,
        AssistantMessageData,
        "The assembled model response: exactly one per successful provider call; its "
        "`source_event_seqs` are the `assistant/chunk` events it was built from.",
        "non-empty",
    ),
    _spec(
        ASSISTANT_ATTEMPT,
        AssistantAttemptData,
        "A provider call that ended in an error finish (before `agent/request-error` runs).",
    ),
    _spec(TOOL_CALL, ToolCallData, "A tool call started (or was answered without starting)."),
    _spec(
        TOOL_APPROVAL,
        ToolApprovalData,
        "A started call's `Ask` went to the approval service (`state: asked`), then was "
        "answered (`state` is the answer); between the two, the call waits for a person.",
    ),
    _spec(
        TOOL_RESULT,
        ToolResultData,
        "A tool call's outcome, committed in model order; pairs with its call by `call_id`.",
        "yes",
    ),
    _spec(
        LLM_RETRY,
        LlmRetryData,
        "The retry plugin is about to re-run a failed step after `delay` seconds.",
        writer="plugins.retry",
    ),
    _spec(
        COMPACTION_SUMMARY,
        CompactionSummaryData,
        "The compaction plugin summarised surface messages `start..end`: logged with a replace "
        "surface op whose node is the summary user message.",
        "yes",
        writer="plugins.compaction",
    ),
    _spec(
        BUDGET_REACHED,
        BudgetReachedData,
        "A budget limit was reached; the agent pauses for approval before the step runs.",
        writer="plugins.budgets",
    ),
)

EVENTS: Mapping[str, EventSpec] = MappingProxyType({spec.type: spec for spec in _CORE})
"""Every durable event type the package writes, by type name."""


TURN_END_REASONS: Mapping[str, ReasonSpec] = MappingProxyType(
    {
        spec.kind: spec
        for spec in (
            _reason("completed", CompletedReason),
            _reason("max-tokens", MaxTokensReason),
            _reason("rejected", RejectedReason),
            _reason("aborted", AbortedReason),
            _reason("error", ErrorReason),
            _reason("disposed", DisposedReason),
            _reason("interrupted", InterruptedReason),
        )
    }
)
"""Every ``turn/end`` reason kind, by kind."""
