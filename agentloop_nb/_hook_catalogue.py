"""The hook catalogue proper: ``HookSpec`` and ``HOOKS``, every hook the package dispatches.

Public through ``agentloop_nb.hooks`` (``hooks.HOOKS``, ``hooks.HookSpec``), which imports this
module at the first use of either name: the dispatchers need the names and payloads, not the
catalogue, so ``import agentloop_nb`` does not build it (start-up cost). ``docs/hooks.md`` is
generated from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

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
from ._hook_payloads import (
    AgentPayload,
    ClaimedPayload,
    DispatchMode,
    ErrorPayload,
    InboxPayload,
    PreStepPayload,
    SessionStartPayload,
    StatusPayload,
    TurnStoppingPayload,
)
from ._request_error import RequestErrorPayload
from ._step_decisions import Enter, Reject, RequestConfig, RequestPayload, Retry
from .context import ErrorReport
from .llm import LlmStreamPayload
from .prompt import AssemblePayload
from .session import SessionChunkPayload, SessionEventPayload, SessionPayload
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

__all__ = ["HOOKS", "HookSpec"]


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

HookSpec.__module__ = "agentloop_nb.hooks"  # its public home (reprs, docs)
