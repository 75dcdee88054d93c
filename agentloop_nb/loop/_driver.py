"""The driver: turns and steps. One :class:`Driver` per agent owns the agent's running turn
(its :class:`TurnState`) and its background task; this module only orchestrates, the pieces it
calls (inbox, scheduler, stream assembly, services) live elsewhere.

Idle/wake rule: a waking send while idle starts the driver, and the turn boundary it asked for
always opens, even when a ``cancel`` lands before the driver first runs (the turn then logs
``turn/start`` and ends ``aborted``). A cancel governs exactly one turn; queued input then waits,
and only a waking send latched after the abort runs without a further send.

Persistence rule: every turn flushes its session before and after ``turn/end``. The first
``PersistenceError`` ends that turn ``error`` (code ``PERSISTENCE``) and is kept on the
:class:`TurnState`; every later turn ends the same way at once, calling no model, until the
agent is disposed and its session resumed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container, Coroutine
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any

import anyio

from .._event_names import (
    ASSISTANT_MESSAGE,
    STEP_END,
    STEP_START,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
)
from .._hook_names import (
    AGENT_ERROR,
    AGENT_INBOX_CLAIMED,
    AGENT_INBOX_DISCARDED,
    AGENT_INBOX_INSERTED,
    AGENT_PRE_STEP,
    AGENT_STATUS,
    AGENT_TURN_STOPPING,
)
from .._hook_payloads import pre_step_payload
from .._model_slots import built
from .._step_decisions import Enter, Reject
from ..agents import INITIATOR
from ..context import Lazy, listened
from ..errors import InvalidTypeError
from ..hooks import (
    ClaimedPayload,
    ErrorPayload,
    InboxPayload,
    StatusPayload,
    TurnStoppingPayload,
)
from ..session import PersistenceError
from ..session._assistant_log import logged_message
from ..session._frozen import FrozenDict, wrap_frozen
from ..session._user_log import logged_user
from ..signals import AbortController, AbortError, cancel_scope
from ._inbox import Inbox, InboxChange, make_user_message
from ._request import Reply, flat_dump
from ._scheduler import open_body_scope, run_tool_calls
from ._state import Status, TurnState

if TYPE_CHECKING:
    from ..messages import UserMessage
    from ._agent import Agent
    from ._scheduler import BodyScope

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class Driver:
    """Owns one agent's turns: starts its background task on a waking send, runs turns while
    there is work, and flips the agent idle. ``dispose`` aborts with cause ``disposed`` and
    awaits the task to its end (the turn is closed and the log flushed)."""

    __slots__ = ("agent", "names", "spawn", "state")

    def __init__(self, state: TurnState, spawn: Spawn) -> None:
        self.state = state
        self.spawn = spawn
        self.agent: Agent | None = None  # bound once the agent exists (it needs ``start``)
        # the agent's context's ``listened`` (live): a hook nobody listens to gets no payload
        self.names: Container[str] = ()

    def bind(self, agent: Agent) -> None:
        self.agent = agent
        self.names = listened(agent.ctx)

    def emit(self, name: str, payload: Any) -> None:
        """Emit through the agent's context once it is published (never before)."""
        agent = self.agent
        if agent is not None and self.state.published:
            agent.ctx.emit(name, payload)

    def notify_inbox(self, change: InboxChange, message: UserMessage, turn: int) -> None:
        if change == "claimed":
            self.state.asks.claimed(message.id, turn)
        elif change == "discarded":
            self.state.asks.discarded(message.id)
        else:
            self.state.asks.inserted(message.id)
        agent = self.agent
        if agent is None or not self.state.published:
            return
        # (unobserved, no payload and no dispatch: twice a turn)
        if change == "claimed":
            if AGENT_INBOX_CLAIMED in self.names:
                agent.ctx.emit(AGENT_INBOX_CLAIMED, Lazy(ClaimedPayload, agent, message, turn))
        else:
            name = AGENT_INBOX_INSERTED if change == "inserted" else AGENT_INBOX_DISCARDED
            if name in self.names:
                agent.ctx.emit(name, Lazy(InboxPayload, agent, message))

    def set_status(self, status: Status) -> None:
        if self.state.set_status(status) and self.agent is not None and AGENT_STATUS in self.names:
            self.emit(AGENT_STATUS, Lazy(StatusPayload, self.agent, status))

    def start(self) -> None:
        """Start the driver task if idle (status flips to running synchronously)."""
        st = self.state
        agent = self.agent
        if st.task is not None or st.disposed or not st.published or agent is None:
            return
        self.set_status("running")
        st.task = self.spawn(self.drive(agent), f"agentloop_nb driver {agent.id}")

    async def dispose(self) -> None:
        """Refuse new turns, abort the running one with cause ``disposed`` and wait for the
        driver task to finish (tools drained, turn closed, log flushed). Idempotent."""
        st = self.state
        st.mark_disposed()
        task = st.task
        if task is None:
            return
        st.cancel({"kind": "disposed"})
        if not task.done():
            await asyncio.shield(task)

    async def drive(self, agent: Agent) -> None:
        """Run turns while there is work; then flip the agent to idle. Owned by the App
        supervisor; cancelling it (App teardown) closes the open turn ``disposed``."""
        st = self.state
        inbox = agent.inbox
        # ``AgentRegistry.with_initiator(agent)`` around the turns, without the generator
        # context manager (about 9 k instructions a wake)
        token = INITIATOR.set(agent)
        try:
            admitted = True  # the wake that started us opens its turn boundary, always
            allow_queue = True
            while True:
                if not admitted and st.controller.signal.aborted:
                    # A cancel governs exactly one turn: the one it hit, or (when it landed
                    # between turns) the one about to start. Queued input then waits; only
                    # a waking send latched after the abort runs now.
                    st.controller = AbortController()
                    allow_queue = False
                work = st.wake or (allow_queue and inbox.has_pending("next-turn"))
                # The admitted turn opens even when a cancel or a dispose landed first.
                if not admitted and (st.disposed or not work):
                    break
                if not st.controller.signal.aborted:
                    st.wake = False  # a wake latched after an abort waits for the next turn
                admitted = False
                reason = await run_turn(agent, st)
                if reason["kind"] == "disposed":
                    break
                allow_queue = reason["kind"] in ("completed", "max-tokens")
        finally:
            INITIATOR.reset(token)
            st.task = None
            self.set_status("idle")


async def run_turn(agent: Agent, st: TurnState) -> dict[str, Any]:
    """One turn, errors contained: returns the logged ``turn/end`` reason (refused at once
    when the session could not be written, see the module docstring). Cancelling the task
    closes the turn ``disposed`` and propagates."""
    session = agent.session
    turn = st.open_turn()
    signal = st.controller.signal
    session.append(TURN_START, {"turn": turn})
    reason: dict[str, Any]
    try:
        signal.throw_if_aborted()
        if st.failure is not None:  # the session cannot be written: refuse, call no model
            raise _refusal(st.failure)
        # One body scope for the turn's lone calls (docs/architecture.md "Step, session 15"),
        # not an anyio scope each; nothing around a step stays open across its calls.
        scope = open_body_scope()
        try:
            await _run_steps(agent, st, scope)
        finally:
            scope.close()
        reason = {"kind": "max-tokens" if st.max_tokens else st.end}
        if st.detail is not None:
            reason["reason"] = st.detail
    except AbortError:
        reason = _abort_reason(signal.reason)
    except anyio.get_cancelled_exc_class():
        # The supervisor is tearing the driver down (App.aclose): close the log, then obey.
        _close(agent, st, {"kind": "disposed"})  # synchronous: nothing to shield
        raise
    except Exception as exc:
        if signal.aborted:
            reason = _abort_reason(signal.reason)
        else:
            reason = _error_reason(exc)
            _report(agent, st, exc)
    # Flushed before and after turn/end, shielded: a write failure found by either ends this
    # turn error PERSISTENCE (once) and refuses the later ones.
    session = agent.session
    closed = False
    if not session.flush_waits():
        # fast path (docs/architecture.md "Turn, session 16"): nobody listens to
        # ``session/flush``, so the flush returns without suspending: no cancellation can
        # reach it, and a shield (an anyio scope entered and left) would change nothing
        reason = await _flush_checked(agent, st, reason)
        _close(agent, st, reason)
        if not session.flush_waits():  # (a ``turn/end`` listener may start listening)
            return await _flush_checked(agent, st, reason)
        closed = True
    with cancel_scope(shield=True):
        if not closed:
            reason = await _flush_checked(agent, st, reason)
            _close(agent, st, reason)
        reason = await _flush_checked(agent, st, reason)
    return reason


def _error_reason(exc: BaseException) -> dict[str, Any]:
    """The ``turn/end`` reason of a failed turn. The message is the error's bare message when
    it has one (``LlmError.message``): its ``str`` repeats the code, which the reason carries
    separately."""
    bare = getattr(exc, "message", None)
    message = bare if isinstance(bare, str) and bare else str(exc)
    return {
        "kind": "error",
        "message": message or type(exc).__name__,
        "code": getattr(exc, "code", "UNKNOWN"),
    }


def _report(agent: Agent, st: TurnState, exc: Exception) -> None:
    if st.published:
        agent.ctx.emit(AGENT_ERROR, ErrorPayload(agent, st.turn, st.step, exc))


async def _flush_checked(agent: Agent, st: TurnState, reason: dict[str, Any]) -> dict[str, Any]:
    """Flush the session; the first ``PersistenceError`` of this agent becomes the turn's
    reason (error ``PERSISTENCE``, reported once on ``agent/error``) and is kept on ``st`` so
    every later turn is refused. Other flush failures propagate."""
    failure: PersistenceError | None = None
    try:
        await agent.session.flush()
    except* PersistenceError as group:
        failure = _first(group)
    if failure is None or st.failure is not None:
        return reason  # written; or a failure already reported (the backend repeats it)
    error = _refusal(failure)
    st.record_failure(error)
    _report(agent, st, error)
    return _error_reason(error)


def _first(group: BaseExceptionGroup[PersistenceError]) -> PersistenceError:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, PersistenceError)
    return leaf


def _refusal(failure: PersistenceError) -> PersistenceError:
    """The error a persistence failure ends (and refuses) turns with: the backend's message
    plus the rule that resolves it."""
    note = (
        " — this agent refuses further turns because its session can no longer be written; "
        "dispose the agent and resume the session once the cause is fixed"
    )
    message = str(failure)
    return PersistenceError(
        message if message.endswith(note) else message + note, id=failure.id, path=failure.path
    )


def _close(agent: Agent, st: TurnState, reason: dict[str, Any]) -> None:
    if st.step_open:
        agent.session.append(STEP_END, {"turn": st.turn, "step": st.step})
        st.step_open = False
    agent.session.append(TURN_END, {"turn": st.turn, "reason": reason})
    st.asks.ended(st.turn, reason)


def _abort_reason(cause: Any) -> dict[str, Any]:
    cause = dict(cause) if isinstance(cause, dict) else {"kind": "user"}
    if cause.get("kind") == "disposed":
        return {"kind": "disposed"}
    return {"kind": "aborted", "cause": cause}


async def _run_steps(agent: Agent, st: TurnState, scope: BodyScope) -> None:
    ctx = agent.ctx
    inbox: Inbox = agent.inbox
    signal = st.controller.signal
    turn = st.turn
    names = listened(ctx)  # live: asked once a turn, tested once a step
    requests = st.requests
    assert requests is not None, "the agent loop sets the request path at creation"
    generation: int = -1
    system_prompt: Any = None
    while True:
        if signal.aborted:  # (``throw_if_aborted`` inlined: ``aborted`` is a C-level getter)
            raise AbortError(signal.reason)
        claimed = inbox.claim("next-step", None, turn)
        if st.step == 0:
            claimed += inbox.claim("next-turn", 1, turn)
        st.wake = False  # this claim serves every waking send so far: no empty extra turn
        step = st.step + 1
        if generation != ctx.service_generation:  # resolved again only once it may differ
            generation, system_prompt = ctx.service_generation, ctx.system_prompt
        assembly = await system_prompt.assemble(agent, signal=signal)
        offered = tuple(claimed)
        if AGENT_PRE_STEP in names:
            decision = await ctx.waterfall(
                AGENT_PRE_STEP,
                # fast path (docs/architecture.md "Step, session 13"): the payload's slots
                # set by their own setters, no ``__init__`` frame
                Lazy(pre_step_payload, agent, offered, turn, step, signal),
                partial(_enter_claimed, offered) if offered else _enter_nothing,
                signal=signal,
            )
            # fast path (benchmarks/README.md "Step (session 12)"): the usual answer read
            # here, the rest checked by ``_entered``
            entered = decision.messages if type(decision) is Enter else _entered(decision)
        else:  # fast path (benchmarks/bench_ab.py, unobserved hooks): the answer, undispatched
            signal.throw_if_aborted()
            entered = offered
        if type(entered) is not tuple and isinstance(entered, Reject):
            st.end, st.detail = "rejected", entered.reason
            return
        if step == 1 and not entered:
            return  # nothing to say: the turn completes without a step
        st.step = step
        st.claimed.extend(entered)
        session = agent.session
        # Frozen here (the loop's own ints), not walked by append; one object serves the
        # step's start and end (equal data, immutable: no reader can tell it is shared).
        marker = wrap_frozen({"turn": turn, "step": step})
        session.append(STEP_START, marker)
        st.step_open = True
        for m in entered:
            _log_user(session, m)
        # The step: one model call (through the agent's request path) plus its tool calls.
        # (Here, not in a coroutine of its own: one coroutine a step fewer.)
        reply = await requests.request(turn, step, assembly, signal)
        kind = reply.kind
        interrupted = kind == "aborted" or kind is None
        message = reply.assembler.message(interrupted=interrupted)
        _log_message(session, reply, message, turn, step, interrupted)
        if kind == "max-tokens":
            st.max_tokens = True
        calls = message.tool_calls
        if calls:
            contexts = await run_tool_calls(agent, calls, turn, step, signal, st.calls, scope)
            for call, extras in zip(calls, contexts, strict=True):
                for extra in extras:
                    inbox.insert("next-step", _context_message(extra, call.id, call.name))
        if interrupted or signal.aborted:
            raise AbortError(signal.reason)
        session.append(STEP_END, marker)
        st.step_open = False
        if calls or inbox.has_pending("next-step"):
            continue
        if AGENT_TURN_STOPPING in names:
            await ctx.serial(
                AGENT_TURN_STOPPING, Lazy(TurnStoppingPayload, agent, turn, signal), signal=signal
            )
        elif signal.aborted:  # (the unobserved dispatch's answer: no payload, no coroutine)
            raise AbortError(signal.reason)
        if not inbox.has_pending("next-step"):
            return


def _entered(decision: Any) -> tuple[UserMessage, ...] | Reject:
    """The ``agent/pre-step`` waterfall's answer checked: the messages to enter, or the
    ``Reject``. (Not a coroutine of its own around the dispatch: one fewer per step.)"""
    if type(decision) is Enter:  # the usual answer, without two ABC checks on models
        return decision.messages
    if isinstance(decision, Reject):
        return decision
    if not isinstance(decision, Enter):
        raise InvalidTypeError(
            f"an agent/pre-step listener returned {decision!r}; return Enter(messages) or Reject()"
        )
    return decision.messages


def _log_user(session: Any, message: UserMessage) -> None:
    """Append ``user/message``: ``message.model_dump(mode="json")``."""
    logged = logged_user(message)
    if logged is None:
        session.append(USER_MESSAGE, {"message": message.model_dump(mode="json")})
        return
    # fast path (docs/architecture.md "Turn, session 14"): the frozen dump and the node the
    # session derives, built from the message's fields
    session.append(USER_MESSAGE, wrap_frozen({"message": logged[0]}), _node=logged[1])


def _log_message(
    session: Any, reply: Reply, message: Any, turn: int, step: int, interrupted: bool
) -> None:
    """Append the step's ``assistant/message``: ``message.model_dump(mode="json")``, the usage,
    the interrupted mark. What the reply's chunks logged of the same blocks and usage is
    shared, not frozen again (see ``Reply``)."""
    seqs = reply.chunk_seqs
    logged = logged_message(message, reply.block_dumps)
    dumped = message.model_dump(mode="json") if logged is None else logged[0]
    data: dict[str, Any] = {"turn": turn, "step": step, "message": dumped}
    reported = reply.assembler.usage
    usage: dict[str, Any] | None = None
    if reported is not None:
        kept = reply.usage_dump  # (what the usage chunk's data holds: its ``flat_dump``)
        usage = kept[1] if kept is not None and kept[0] is reported else flat_dump(reported)
    if usage is not None:
        data["usage"] = usage
    if interrupted:
        data["interrupted"] = True
    if logged is None:
        session.append(ASSISTANT_MESSAGE, data, source_event_seqs=seqs)
        return
    # fast path (benchmarks/README.md "Issue 28: a tool step's own work"): the dump and the
    # node the session derives are built from the message's fields (no serialiser, no
    # validation); with every value frozen the data is wrapped, not walked
    if usage is None or type(usage) is FrozenDict:
        data = wrap_frozen(data)
    session.append(ASSISTANT_MESSAGE, data, source_event_seqs=seqs, _node=logged[1])


# Decisions are frozen: one instance serves every empty claim (model_construct: no validator
# is built at import for this literal, valid instance).
_ENTER_NOTHING = Enter.model_construct()


#: The ``agent/pre-step`` default when nothing was claimed (most steps after the first):
#: ``_ENTER_NOTHING`` from a C-level call (a ``repeat``'s ``__next__`` answers it forever), no
#: Python frame per observed step (docs/architecture.md "Step, session 13").
_enter_nothing: Callable[[], Enter] = repeat(_ENTER_NOTHING).__next__


def _enter_claimed(claimed: tuple[UserMessage, ...]) -> Enter:
    """The ``agent/pre-step`` default: enter the claimed input. Built without validating the
    (already validated) messages, and shared when nothing was claimed (most steps after the
    first): building a decision costs more than the unobserved dispatch itself."""
    if not claimed:
        return _ENTER_NOTHING
    # fast path (docs/architecture.md "Turn, session 14"): what
    # ``Enter.model_construct(messages=claimed)`` builds (``model_construct`` walks every
    # field in Python: once a turn)
    decision: Enter = built(Enter, {"kind": "enter", "messages": claimed}, {"messages"})
    return decision


def _context_message(extra: Any, call_id: str, name: str) -> UserMessage:
    return make_user_message(extra, {"kind": "tool-context", "call_id": call_id, "tool": name})
