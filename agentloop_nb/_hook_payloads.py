"""The agent loop's hook payloads (records).

Public through :mod:`agentloop_nb.hooks`, which re-exports every name here; this module holds
them apart from the catalogue (``HOOKS``, built at first use by ``_hook_catalogue``), so the
catalogue can import them without importing ``hooks`` back. Plugins import these from
``agentloop_nb.hooks``, never from here. ``RequestErrorPayload`` is in ``_request_error``: its
``failure`` is an ``ErrorFinish``, a stream-chunk model that loads with the first stream.
The loop's decisions (``Enter``, ``Reject``, ``Retry``, ``RequestConfig``) and the
``agent/request`` payload are in ``_step_decisions``: they load with the first agent."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from ._creation import AgentOptions
from ._record import Record, set_field
from .context import Context
from .messages import UserMessage
from .session import Session
from .signals import AbortSignal

__all__ = [
    "AgentLike",
    "AgentPayload",
    "ClaimedPayload",
    "DispatchMode",
    "ErrorPayload",
    "InboxPayload",
    "PreStepPayload",
    "SessionStartPayload",
    "StatusPayload",
    "TurnStoppingPayload",
]

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


class AgentPayload(Record):
    """Payload of ``agent/created`` and ``agent/disposed``."""

    __slots__ = ("agent",)
    __match_args__ = ("agent",)

    agent: AgentLike

    def __init__(self, agent: AgentLike) -> None:
        set_field(self, "agent", agent)


class SessionStartPayload(Record):
    """Payload of ``agent/session-start``: ``source`` says whether the session is new."""

    __slots__ = ("agent", "source")
    __match_args__ = ("agent", "source")

    agent: AgentLike
    source: Literal["startup", "resume"]

    def __init__(self, agent: AgentLike, source: Literal["startup", "resume"]) -> None:
        set_field(self, "agent", agent)
        set_field(self, "source", source)


class StatusPayload(Record):
    """Payload of ``agent/status``: the status the agent just took."""

    __slots__ = ("agent", "status")
    __match_args__ = ("agent", "status")

    agent: AgentLike
    status: str

    def __init__(self, agent: AgentLike, status: str) -> None:
        set_field(self, "agent", agent)
        set_field(self, "status", status)


class ErrorPayload(Record):
    """Payload of ``agent/error``: the failure that ended a turn ``error``."""

    __slots__ = ("agent", "error", "step", "turn")
    __match_args__ = ("agent", "turn", "step", "error")

    agent: AgentLike
    turn: int
    step: int
    error: BaseException

    def __init__(self, agent: AgentLike, turn: int, step: int, error: BaseException) -> None:
        set_field(self, "agent", agent)
        set_field(self, "turn", turn)
        set_field(self, "step", step)
        set_field(self, "error", error)


class InboxPayload(Record):
    """Payload of ``agent/inbox/inserted`` and ``agent/inbox/discarded``."""

    __slots__ = ("agent", "message")
    __match_args__ = ("agent", "message")

    agent: AgentLike
    message: UserMessage

    def __init__(self, agent: AgentLike, message: UserMessage) -> None:
        set_field(self, "agent", agent)
        set_field(self, "message", message)


class ClaimedPayload(Record):
    """Payload of ``agent/inbox/claimed``: a pending message a turn took."""

    __slots__ = ("agent", "message", "turn")
    __match_args__ = ("agent", "message", "turn")

    agent: AgentLike
    message: UserMessage
    turn: int

    def __init__(self, agent: AgentLike, message: UserMessage, turn: int) -> None:
        set_field(self, "agent", agent)
        set_field(self, "message", message)
        set_field(self, "turn", turn)


class PreStepPayload(Record):
    """Payload of the ``agent/pre-step`` waterfall: the messages about to enter the step."""

    __slots__ = ("agent", "messages", "signal", "step", "turn")
    __match_args__ = ("agent", "messages", "turn", "step", "signal")

    agent: AgentLike
    messages: tuple[UserMessage, ...]
    turn: int
    step: int
    signal: AbortSignal

    def __init__(
        self,
        agent: AgentLike,
        messages: tuple[UserMessage, ...],
        turn: int,
        step: int,
        signal: AbortSignal,
    ) -> None:
        set_field(self, "agent", agent)
        set_field(self, "messages", messages)
        set_field(self, "turn", turn)
        set_field(self, "step", step)
        set_field(self, "signal", signal)


# The slots' own setters (a C call each: ``set_field``, ``object.__setattr__``, builds two
# argument tuples and looks the name up on the type first). A field added to the record must
# be set in ``pre_step_payload`` too: tests/test_loop_turns.py compares every field with the
# constructor's.
_pre_agent, _pre_messages, _pre_turn, _pre_step, _pre_signal = (
    PreStepPayload.__dict__[name].__set__ for name in PreStepPayload.__match_args__
)
_new = object.__new__


def pre_step_payload(
    agent: AgentLike,
    messages: tuple[UserMessage, ...],
    turn: int,
    step: int,
    signal: AbortSignal,
) -> PreStepPayload:
    """``PreStepPayload(agent, messages, turn, step, signal)``, built as its ``__init__`` builds
    it (every slot set, nothing else runs): the loop's payload, once per observed step
    (docs/architecture.md "Step, session 13"; compaction, on by default, listens)."""
    payload: PreStepPayload = _new(PreStepPayload)
    _pre_agent(payload, agent)
    _pre_messages(payload, messages)
    _pre_turn(payload, turn)
    _pre_step(payload, step)
    _pre_signal(payload, signal)
    return payload


class TurnStoppingPayload(Record):
    """Payload of the ``agent/turn-stopping`` serial dispatch."""

    __slots__ = ("agent", "signal", "turn")
    __match_args__ = ("agent", "turn", "signal")

    agent: AgentLike
    turn: int
    signal: AbortSignal

    def __init__(self, agent: AgentLike, turn: int, signal: AbortSignal) -> None:
        set_field(self, "agent", agent)
        set_field(self, "turn", turn)
        set_field(self, "signal", signal)


# -- the catalogue ---------------------------------------------------------------------------

DispatchMode = Literal["emit", "emit_strict", "parallel", "serial", "bail", "waterfall"]
"""How a hook is dispatched (see ``Context``): ``emit`` contains listener errors;
``emit_strict`` lets the first one propagate (a veto); ``parallel`` awaits all listeners at once;
``serial`` awaits them in order; ``waterfall`` chains them as middleware around a default."""
