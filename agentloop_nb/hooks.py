"""The hook catalogue: every hook the core dispatches, its mode, payload and answer.

A hook is a named dispatch through a ``Context`` (``ctx.on(name, handler)`` subscribes). Each
handler receives **one payload object**; the dispatch mode decides what its return value means
(``emit``: ignored; ``waterfall``: the answer, see the ``answer`` column). ``HOOKS`` maps every
name to its ``HookSpec``; ``docs/hooks.md`` is generated from it
(``python -m agentloop_nb._docgen``). The catalogue is built at the first use of ``HOOKS`` or
``HookSpec``; the payloads are records (``agentloop_nb._record.Record``: frozen, compared,
hashed and shown by their fields, as frozen dataclasses are, without dataclasses' import cost).

Plugins import payload classes and decisions from here (or from the package root for the
decisions), never from private modules. The agent loop's payloads and decisions are defined in
``_hook_payloads`` (apart from the catalogue, which imports them); the payloads of the lower
layers (tools, LLM, system prompt, sessions, context) are defined next to the code that
dispatches them. All are re-exported here.

The ``agent`` attribute of the loop's payloads is the ``agentloop_nb.Agent`` concerned, typed
with the :class:`AgentLike` protocol (its public surface) because the payloads sit below the
loop in the import graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    AgentLike,
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
from .session import SessionChunkPayload, SessionEventPayload, SessionPayload

if TYPE_CHECKING:
    from ._error_report import ErrorReport
    from ._hook_catalogue import HOOKS, HookSpec
    from ._request_error import RequestErrorPayload
    from ._step_decisions import Enter, Reject, RequestConfig, RequestPayload, Retry
    from .llm import LlmStreamPayload
    from .prompt import AssemblePayload
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


# The loop's decisions and the ``agent/request`` payload load with the first agent.
_STEP_DECISIONS = ("Enter", "Reject", "RequestConfig", "RequestPayload", "Retry")
# The tool decisions load with the pipeline's first call, the tool payloads and the execution
# record with the first tool definition or call (``tools``).
_TOOL_NAMES = (
    "Accept",
    "Allow",
    "Ask",
    "Block",
    "Deny",
    "PostExecutePayload",
    "ToolExecution",
    "ToolResultPayload",
    "ToolSettledPayload",
)


def __getattr__(name: str) -> Any:
    # The catalogue (``HOOKS``, ``HookSpec``) is built at its first use: the dispatchers need
    # only the names and payloads above (start-up cost).
    if name in ("HOOKS", "HookSpec"):
        from . import _hook_catalogue

        return getattr(_hook_catalogue, name)
    # The system prompt's payload loads with its ``Assembly`` (see ``agentloop_nb.prompt``).
    if name == "AssemblePayload":
        from . import prompt

        return prompt.AssemblePayload
    if name == "LlmStreamPayload":  # loads with ``GenerateOptions`` (``agentloop_nb.llm``)
        from . import llm

        return llm.LlmStreamPayload
    if name in _TOOL_NAMES:  # see ``_TOOL_NAMES``
        from . import tools

        return getattr(tools, name)
    if name in _STEP_DECISIONS:  # load with the first agent (``_step_decisions``)
        from . import _step_decisions

        return getattr(_step_decisions, name)
    if name == "ErrorReport":  # loads with the first reported failure (``_bus``)
        from ._error_report import ErrorReport

        return ErrorReport
    if name == "RequestErrorPayload":  # loads with the stream-chunk models (``_request_error``)
        from ._request_error import RequestErrorPayload

        return RequestErrorPayload
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
