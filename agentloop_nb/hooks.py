"""The hook catalogue: every hook the core dispatches, its mode, payload and answer.

A hook is a named dispatch through a ``Context`` (``ctx.on(name, handler)`` subscribes). Each
handler receives **one payload object**; the dispatch mode decides what its return value means
(``emit``: ignored; ``waterfall``: the answer, see the ``answer`` column). ``HOOKS`` maps every
name to its ``HookSpec``; ``docs/hooks.md`` is generated from it
(``python -m agentloop_nb._docgen``).

Plugins import payload classes and decisions from here (or from the package root for the
decisions), never from private modules. The agent loop's payloads are defined in this module;
the payloads of the lower layers (tools, LLM, system prompt, sessions, context) are defined next
to the code that dispatches them and re-exported here.

The ``agent`` attribute of the loop's payloads is the ``agentloop_nb.Agent`` concerned, typed
with the :class:`AgentLike` protocol (its public surface) because this module sits below the
loop in the import graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Protocol

from ._creation import AgentOptions
from ._decision import Decision
from ._hook_names import (
    AGENT_CREATED,
    AGENT_DISPOSED,
    AGENT_ERROR,
    AGENT_INBOX_CLAIMED,
    AGENT_INBOX_DISCARDED,
    AGENT_INBOX_INSERTED,
    AGENT_PRE_STEP,
    AGENT_REQUEST,
    AGENT_REQUEST_ERROR,
    AGENT_SESSION_START,
    AGENT_STATUS,
    AGENT_TURN_STOPPING,
    INTERNAL_ERROR,
    LLM_STREAM,
    SESSION_CHUNK,
    SESSION_CREATED,
    SESSION_DISPOSED,
    SESSION_EVENT,
    SESSION_FLUSH,
    SYSTEM_PROMPT_ASSEMBLE,
    TOOLS_EXECUTE,
    TOOLS_POST_EXECUTE,
    TOOLS_PRE_EXECUTE,
    TOOLS_RESULT,
    TOOLS_SETTLED,
)
from .context import Context, ErrorReport
from .llm import ErrorFinish, LlmStreamPayload, RequestFacts, RetryPolicy
from .messages import UserMessage
from .prompt import AssemblePayload
from .session import Session, SessionChunkPayload, SessionEventPayload, SessionPayload
from .signals import AbortSignal
from .tools import (
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    PostExecutePayload,
    ToolExecution,
    ToolResultPayload,
    ToolSettledPayload,
)

__all__ = [
    "AGENT_CREATED",
    "AGENT_DISPOSED",
    "AGENT_ERROR",
    "AGENT_INBOX_CLAIMED",
    "AGENT_INBOX_DISCARDED",
    "AGENT_INBOX_INSERTED",
    "AGENT_PRE_STEP",
    "AGENT_REQUEST",
    "AGENT_REQUEST_ERROR",
    "AGENT_SESSION_START",
    "AGENT_STATUS",
    "AGENT_TURN_STOPPING",
    "HOOKS",
    "INTERNAL_ERROR",
    "LLM_STREAM",
    "SESSION_CHUNK",
    "SESSION_CREATED",
    "SESSION_DISPOSED",
    "SESSION_EVENT",
    "SESSION_FLUSH",
    "SYSTEM_PROMPT_ASSEMBLE",
    "TOOLS_EXECUTE",
    "TOOLS_POST_EXECUTE",
    "TOOLS_PRE_EXECUTE",
    "TOOLS_RESULT",
    "TOOLS_SETTLED",
    "Accept",
    "AgentLike",
    "AgentPayload",
    "Allow",
    "Ask",
    "AssemblePayload",
    "Block",
    "ClaimedPayload",
    "Deny",
    "DispatchMode",
    "Enter",
    "ErrorPayload",
    "ErrorReport",
    "HookSpec",
    "InboxPayload",
    "LlmStreamPayload",
    "PostExecutePayload",
    "PreStepPayload",
    "Reject",
    "RequestConfig",
    "RequestErrorPayload",
    "RequestPayload",
    "Retry",
    "SessionChunkPayload",
    "SessionEventPayload",
    "SessionPayload",
    "SessionStartPayload",
    "StatusPayload",
    "ToolExecution",
    "ToolResultPayload",
    "ToolSettledPayload",
    "TurnStoppingPayload",
]

# -- the agent loop's decisions --------------------------------------------------------------


class Enter(Decision):
    """``agent/pre-step`` decision: run the step with exactly these messages entering it."""

    kind: Literal["enter"] = "enter"
    messages: tuple[UserMessage, ...] = ()


class Reject(Decision):
    """``agent/pre-step`` decision: end the turn ``rejected`` without a step."""

    kind: Literal["reject"] = "reject"
    reason: str | None = None


class Retry(Decision):
    """``agent/request-error`` decision: re-run the same step (input is not re-admitted)."""

    kind: Literal["retry"] = "retry"


class RequestConfig(Decision):
    """The per-request configuration the ``agent/request`` waterfall may replace.

    Frozen: a listener returns ``payload.config.model_copy(update={...})``."""

    provider: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None


# -- the agent loop's payloads ---------------------------------------------------------------


class AgentLike(Protocol):
    """The public surface of ``agentloop_nb.Agent`` as a payload's ``agent`` offers it (a
    protocol, so this module names it without importing the loop). See ``docs/loop.md``."""

    @property
    def id(self) -> str: ...
    @property
    def session(self) -> Session: ...
    @property
    def ctx(self) -> Context: ...
    @property
    def options(self) -> AgentOptions: ...
    @property
    def status(self) -> str: ...
    @property
    def turn(self) -> int: ...
    @property
    def inbox(self) -> Any: ...
    def send(
        self,
        content: Any,
        *,
        target: Literal["next-turn", "next-step"] = "next-turn",
        wakeup: bool = True,
        source: Any = None,
    ) -> UserMessage: ...
    def followup(self, content: Any, *, source: Any = None) -> UserMessage: ...
    def steer(self, content: Any, *, source: Any = None) -> UserMessage: ...
    def inject(self, content: Any, *, source: Any = None) -> UserMessage: ...
    def cancel(self, cause: Any = "user", *, keep_inbox: bool = False) -> bool: ...
    def cancel_tool(self, call_id: str) -> bool: ...
    async def ask(self, content: Any, *, timeout: float | None = None) -> str: ...  # noqa: ASYNC109
    async def when_idle(self) -> None: ...


@dataclass(frozen=True, slots=True)
class AgentPayload:
    """Payload of ``agent/created`` and ``agent/disposed``."""

    agent: AgentLike


@dataclass(frozen=True, slots=True)
class SessionStartPayload:
    """Payload of ``agent/session-start``: ``source`` says whether the session is new."""

    agent: AgentLike
    source: Literal["startup", "resume"]


@dataclass(frozen=True, slots=True)
class StatusPayload:
    """Payload of ``agent/status``: the status the agent just took."""

    agent: AgentLike
    status: str


@dataclass(frozen=True, slots=True)
class ErrorPayload:
    """Payload of ``agent/error``: the failure that ended a turn ``error``."""

    agent: AgentLike
    turn: int
    step: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class InboxPayload:
    """Payload of ``agent/inbox/inserted`` and ``agent/inbox/discarded``."""

    agent: AgentLike
    message: UserMessage


@dataclass(frozen=True, slots=True)
class ClaimedPayload:
    """Payload of ``agent/inbox/claimed``: a pending message a turn took."""

    agent: AgentLike
    message: UserMessage
    turn: int


@dataclass(frozen=True, slots=True)
class PreStepPayload:
    """Payload of the ``agent/pre-step`` waterfall: the messages about to enter the step."""

    agent: AgentLike
    messages: tuple[UserMessage, ...]
    turn: int
    step: int
    signal: AbortSignal


@dataclass(frozen=True, slots=True)
class RequestPayload:
    """Payload of the ``agent/request`` waterfall: the proposed request configuration."""

    agent: AgentLike
    turn: int
    step: int
    config: RequestConfig
    signal: AbortSignal


@dataclass(frozen=True, slots=True)
class RequestErrorPayload:
    """Payload of the ``agent/request-error`` waterfall: the failed attempt's error finish
    (``attempt`` counts the attempts of this step, from 1). ``policy``: the prepared call's
    retry policy (``None`` when the route had no adapter or the registration has none).
    ``facts``: the failed request's provider, model, code, status and retry-after."""

    agent: AgentLike
    turn: int
    step: int
    failure: ErrorFinish
    signal: AbortSignal
    attempt: int = 1
    policy: RetryPolicy | None = None
    facts: RequestFacts | None = None


@dataclass(frozen=True, slots=True)
class TurnStoppingPayload:
    """Payload of the ``agent/turn-stopping`` serial dispatch."""

    agent: AgentLike
    turn: int
    signal: AbortSignal


# -- the catalogue ---------------------------------------------------------------------------

DispatchMode = Literal["emit", "emit_strict", "parallel", "serial", "bail", "waterfall"]
"""How a hook is dispatched (see ``Context``): ``emit`` contains listener errors;
``emit_strict`` lets the first one propagate (a veto); ``parallel`` awaits all listeners at once;
``serial`` awaits them in order; ``waterfall`` chains them as middleware around a default."""


@dataclass(frozen=True, slots=True)
class HookSpec:
    """One hook: its name, dispatch mode, payload class, what a handler answers, and what it
    is for. ``dispatcher`` names the part of the package that dispatches it; ``decisions``
    are the decision classes a handler may answer with (empty when the answer is not a
    decision)."""

    name: str
    mode: DispatchMode
    payload: type
    answer: str
    dispatcher: str
    description: str
    decisions: tuple[type[Decision], ...] = ()


def _hook(
    name: str,
    mode: DispatchMode,
    payload: type,
    description: str,
    *,
    answer: str = "—",
    dispatcher: str = "loop",
    decisions: tuple[type[Decision], ...] = (),
) -> HookSpec:
    return HookSpec(name, mode, payload, answer, dispatcher, description, decisions)


_ALL = (
    _hook(
        AGENT_CREATED,
        "emit_strict",
        AgentPayload,
        "An agent is being published; a raising listener vetoes its creation.",
    ),
    _hook(
        AGENT_SESSION_START,
        "emit",
        SessionStartPayload,
        "A published agent's session starts (`startup`) or continues (`resume`).",
    ),
    _hook(AGENT_DISPOSED, "emit", AgentPayload, "An agent left the registry after disposal."),
    _hook(AGENT_STATUS, "emit", StatusPayload, "An agent's status flipped (`idle`/`running`)."),
    _hook(
        AGENT_ERROR,
        "emit",
        ErrorPayload,
        "A plugin or model failure ended a turn `error` (emitted once per failure).",
    ),
    _hook(AGENT_INBOX_INSERTED, "emit", InboxPayload, "Input was queued in the inbox."),
    _hook(
        AGENT_INBOX_DISCARDED,
        "emit",
        InboxPayload,
        "Queued input was dropped (cancel, `inbox.remove`, `inbox.replace`).",
    ),
    _hook(AGENT_INBOX_CLAIMED, "emit", ClaimedPayload, "A turn took queued input."),
    _hook(
        AGENT_PRE_STEP,
        "waterfall",
        PreStepPayload,
        "Decides which messages enter the next step, or rejects the turn.",
        answer="`Enter(messages)` (default: the claimed messages) or `Reject(reason)`",
        decisions=(Enter, Reject),
    ),
    _hook(
        AGENT_REQUEST,
        "waterfall",
        RequestPayload,
        "Shapes the request configuration of a step.",
        answer="a `RequestConfig` (default: the proposed one)",
        decisions=(RequestConfig,),
    ),
    _hook(
        AGENT_REQUEST_ERROR,
        "waterfall",
        RequestErrorPayload,
        "A provider call ended in an error finish; answer `Retry()` to re-run the step.",
        answer="`Retry()` or `None` (default: the turn ends `error`)",
        decisions=(Retry,),
    ),
    _hook(
        AGENT_TURN_STOPPING,
        "serial",
        TurnStoppingPayload,
        "The turn is about to end; a listener may steer or inject to continue it.",
    ),
    _hook(
        TOOLS_PRE_EXECUTE,
        "waterfall",
        ToolExecution,
        "Decides whether a tool call may run (before guards and approval).",
        answer="`Allow()` (default), `Deny(reason)` or `Ask(reason)`",
        decisions=(Allow, Deny, Ask),
        dispatcher="tools",
    ),
    _hook(
        TOOLS_EXECUTE,
        "waterfall",
        ToolExecution,
        "Wraps the dispatch of a tool body (the default runs it).",
        answer="a `ToolResult`",
        dispatcher="tools",
    ),
    _hook(
        TOOLS_POST_EXECUTE,
        "waterfall",
        PostExecutePayload,
        "Accepts or blocks a tool result, for every call (early errors included).",
        answer="`Accept(content=None, additional_contexts=())` (default) or `Block(feedback)`",
        decisions=(Accept, Block),
        dispatcher="tools",
    ),
    _hook(
        TOOLS_SETTLED,
        "emit",
        ToolSettledPayload,
        "A call's outcome is final, before the model-order commit (for live views).",
        dispatcher="tools",
    ),
    _hook(
        TOOLS_RESULT,
        "emit",
        ToolResultPayload,
        "A tool call's final result (observe only).",
        dispatcher="tools",
    ),
    _hook(
        LLM_STREAM,
        "waterfall",
        LlmStreamPayload,
        "Wraps a model call: wrap, record, replay or replace the chunk stream.",
        answer="an async iterator of `StreamChunk`s (default: the adapter's stream)",
        dispatcher="llm",
    ),
    _hook(
        SYSTEM_PROMPT_ASSEMBLE,
        "waterfall",
        AssemblePayload,
        "Edits the assembled system prompt sections and tool schemas of a step.",
        answer="an `Assembly` (default: the assembled one)",
        dispatcher="prompt",
    ),
    _hook(
        SESSION_CREATED,
        "emit_strict",
        SessionPayload,
        "A session is being published; a raising listener vetoes it.",
        dispatcher="session",
    ),
    _hook(
        SESSION_DISPOSED, "emit", SessionPayload, "A session was detached.", dispatcher="session"
    ),
    _hook(
        SESSION_EVENT,
        "emit",
        SessionEventPayload,
        "An event was appended to a published session (synchronously, once per event).",
        dispatcher="session",
    ),
    _hook(
        SESSION_CHUNK,
        "emit",
        SessionChunkPayload,
        "A chunk of a model response streamed (live, before the log holds it coalesced).",
        dispatcher="session",
    ),
    _hook(
        SESSION_FLUSH,
        "parallel",
        SessionPayload,
        "The durability barrier: listeners return once every appended event is stored.",
        dispatcher="session",
    ),
    _hook(
        INTERNAL_ERROR,
        "emit",
        ErrorReport,
        "A contained listener or teardown failure (never dispatched recursively).",
        dispatcher="context",
    ),
)

HOOKS: Mapping[str, HookSpec] = MappingProxyType({spec.name: spec for spec in _ALL})
"""Every hook the package dispatches, by name."""
