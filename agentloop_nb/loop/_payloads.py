"""Hook payloads and decisions of the agent loop (SPEC §6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._decision import Decision
from ..messages import UserMessage

if TYPE_CHECKING:
    from ..llm import ErrorFinish, RequestFacts, RetryPolicy
    from ..signals import AbortSignal
    from ._agent import Agent


class _Decision(Decision):
    pass


class Enter(_Decision):
    """`agent/pre-step` decision: run the step with exactly these messages entering it."""

    kind: Literal["enter"] = "enter"
    messages: tuple[UserMessage, ...] = ()


class Reject(_Decision):
    """`agent/pre-step` decision: end the turn `rejected` without a step."""

    kind: Literal["reject"] = "reject"
    reason: str | None = None


class Retry(_Decision):
    """`agent/request-error` decision: re-run the same step (input is not re-admitted)."""

    kind: Literal["retry"] = "retry"


class RequestConfig(_Decision):
    """The per-request configuration the `agent/request` waterfall may replace.

    Frozen: a listener returns ``payload.config.model_copy(update={...})``."""

    provider: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None


@dataclass(frozen=True, slots=True)
class AgentPayload:
    agent: Agent


@dataclass(frozen=True, slots=True)
class SessionStartPayload:
    agent: Agent
    source: Literal["startup", "resume"]


@dataclass(frozen=True, slots=True)
class StatusPayload:
    agent: Agent
    status: str


@dataclass(frozen=True, slots=True)
class ErrorPayload:
    agent: Agent
    turn: int
    step: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class InboxPayload:
    agent: Agent
    message: UserMessage


@dataclass(frozen=True, slots=True)
class ClaimedPayload:
    agent: Agent
    message: UserMessage
    turn: int


@dataclass(frozen=True, slots=True)
class PreStepPayload:
    agent: Agent
    messages: tuple[UserMessage, ...]
    turn: int
    step: int
    signal: AbortSignal


@dataclass(frozen=True, slots=True)
class RequestPayload:
    agent: Agent
    turn: int
    step: int
    config: RequestConfig
    signal: AbortSignal


@dataclass(frozen=True, slots=True)
class RequestErrorPayload:
    """``policy``: the prepared call's retry policy (``None`` when the route had no adapter or
    the registration has none). ``facts``: the failed request's provider, model, code, status
    and retry-after. ``attempt``: 1 for the step's first request, counting retries."""

    agent: Agent
    turn: int
    step: int
    failure: ErrorFinish
    signal: AbortSignal
    attempt: int = 1
    policy: RetryPolicy | None = None
    facts: RequestFacts | None = None


@dataclass(frozen=True, slots=True)
class TurnStoppingPayload:
    agent: Agent
    turn: int
    signal: AbortSignal


Cause = dict[str, Any]
