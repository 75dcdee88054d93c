"""``Agent``: the public face of one running agent. It routes input, status and cancellation
to its inbox and its driver-owned :class:`TurnState`; the turn logic lives in ``_driver.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from .._creation import AgentOptions
from .._event_names import ASSISTANT_MESSAGE
from .._supervisor import require_running_loop
from ..errors import AgentloopError, InvalidTypeError, InvalidValueError, UsageError
from ..messages import AssistantMessage
from ..models import model_table
from ..tools import CALL_CANCELLED
from ..usage import UsageTotals, session_usage
from ._inbox import Inbox, Target, make_user_message
from ._state import Status, TurnState

if TYPE_CHECKING:
    from ..context import Context
    from ..messages import UserMessage
    from ..session import Session


def normalize_cause(cause: Any) -> dict[str, Any]:
    """A cancel cause as logged data. Raises ``ValueError`` / ``TypeError`` for a bad cause."""
    if isinstance(cause, str):
        if cause not in ("user", "parent", "disposed"):
            raise InvalidValueError(
                f"unknown cancel cause {cause!r}: use 'user', 'parent', 'disposed' "
                "or {'kind': 'hook', 'reason': ...}"
            )
        return {"kind": cause}
    if isinstance(cause, dict) and isinstance(cause.get("kind"), str):
        return dict(cause)
    raise InvalidTypeError(f"cancel cause must be a str or a dict with a 'kind', got {cause!r}")


class AgentTurnError(AgentloopError):
    """Raised by :meth:`Agent.ask` when the turn that took its message ended other than
    ``completed``. ``reason`` is that turn's logged ``turn/end`` reason (e.g.
    ``{"kind": "error", "code": ..., "message": ...}``, ``{"kind": "aborted", ...}``,
    ``{"kind": "rejected", ...}``), or ``{"kind": "discarded"}`` when the message left the
    inbox unclaimed (a cancel cleared it, or it was removed); ``turn`` is the turn's number
    (0 when none took the message)."""

    def __init__(self, reason: dict[str, Any], turn: int = 0) -> None:
        kind = reason.get("kind", "unknown")
        detail = reason.get("code") or reason.get("reason")
        where = f"turn {turn}" if turn else "the message"
        super().__init__(f"{where} ended {kind}" + (f" ({detail})" if detail else ""))
        self.reason = reason
        self.turn = turn


class Agent:
    """One agent: its session, its scoped context, its inbox and (through ``start``) its driver.

    Synchronous methods (``send`` and friends, ``cancel``) only schedule work; they never block.
    ``when_idle()`` returns once the driver has nothing left to do. Agents are built by the
    agent loop (``ctx.agent_loop.create`` / ``ctx.agents.create``), never directly.
    """

    def __init__(
        self,
        session: Session,
        options: AgentOptions,
        inbox: Inbox,
        state: TurnState,
        *,
        scope: Callable[[Agent], Context],
        start: Callable[[], None],
    ) -> None:
        self.id = session.id
        self.session = session
        self.options = options
        self.inbox = inbox
        self._state = state
        self._start = start
        self.ctx = scope(self)

    # -- status -------------------------------------------------------------------------------

    @property
    def status(self) -> Status:
        return self._state.status

    @property
    def turn(self) -> int:
        """The number of the last turn opened (0 before the first)."""
        return self._state.turn

    @property
    def usage(self) -> UsageTotals:
        """Token usage and cost summed from the log (see ``UsageTotals``)."""
        return session_usage(self.session, model_table(self.ctx))[0]

    @property
    def usage_by_turn(self) -> list[UsageTotals]:
        """Usage per turn, from the log: item ``i`` is turn ``i + 1``."""
        return session_usage(self.session, model_table(self.ctx))[1]

    async def when_idle(self) -> None:
        """Return once the agent is idle (at once if it already is). Safe to cancel."""
        await self._state.when_idle()

    # -- input --------------------------------------------------------------------------------

    def send(
        self,
        content: str | list[Any] | UserMessage,
        *,
        target: Target = "next-turn",
        wakeup: bool = True,
        source: Any = None,
    ) -> UserMessage:
        """Queue input. ``target`` is ``"next-turn"`` (a follow-up prompt) or ``"next-step"``
        (steering / injected context); ``wakeup`` starts the driver when idle.

        Raises ``TypeError`` for content or source that is not JSON-safe (nothing is logged),
        ``ValueError`` for an unknown target, ``RuntimeError`` after disposal or, for a waking
        send while idle, without a running event loop."""
        if target not in ("next-turn", "next-step"):
            raise InvalidValueError(
                f"unknown send target {target!r}: use 'next-turn' or 'next-step'"
            )
        state = self._state
        if state.disposed:
            raise UsageError(f"agent {self.id!r} is disposed; create or resume a new agent")
        message = make_user_message(content, source)
        if wakeup and state.task is None:
            require_running_loop("Agent.send")
        message = self.inbox.insert(target, message)
        if wakeup:
            state.request_wake()
            self._start()
        return message

    def followup(self, content: Any, *, source: Any = None) -> UserMessage:
        return self.send(content, target="next-turn", wakeup=True, source=source)

    def steer(self, content: Any, *, source: Any = None) -> UserMessage:
        return self.send(content, target="next-step", wakeup=True, source=source or "steer")

    def inject(self, content: Any, *, source: Any = None) -> UserMessage:
        return self.send(content, target="next-step", wakeup=False, source=source or "inject")

    async def ask(self, content: Any, *, timeout: float | None = None) -> str:  # noqa: ASYNC109
        """Queue ``content`` as a follow-up and return the final assistant text of *its* turn:
        the turn that claims this message from the inbox. Follow-ups queued earlier are claimed
        one per turn first, so their turns run (and end) before this one.

        Raises :class:`AgentTurnError` when that turn ends other than ``completed`` (or the
        message is discarded unclaimed), ``TimeoutError`` after ``timeout`` seconds (the turn
        itself is left running), and what :meth:`send` raises. Cancelling the call stops the
        wait only, never the turn."""
        message = self.send(content, target="next-turn", wakeup=True)
        waits = self._state.asks
        fut = waits.watch(message.id)
        try:
            with anyio.fail_after(timeout):
                turn, reason = await fut
        finally:
            waits.forget(fut)
        if reason.get("kind") != "completed":
            raise AgentTurnError(reason, turn)
        return self._final_text(turn)

    def _final_text(self, turn: int) -> str:
        for event in reversed(self.session.events):
            if event.type == ASSISTANT_MESSAGE and event.data.get("turn") == turn:
                return AssistantMessage.model_validate(event.data["message"]).text
        return ""

    # -- cancellation -------------------------------------------------------------------------

    def cancel(self, cause: Any = "user", *, keep_inbox: bool = False) -> bool:
        """Stop the current turn (or the one a pending wake is about to open). Clears the inbox
        unless ``keep_inbox``. Returns ``False`` (and does nothing) when the agent is idle. The
        first cause of a turn wins. Raises ``ValueError`` / ``TypeError`` for a bad cause."""
        normalized = normalize_cause(cause)
        state = self._state
        if state.task is None:
            return False
        if not keep_inbox:
            self.inbox.clear()
        state.cancel(normalized)
        return True

    def cancel_tool(self, call_id: str) -> bool:
        """Cancel one running tool call: its body's ``execution.signal`` aborts, its result is
        the error ``CANCELLED`` ("cancelled by the user"), and the turn and the other calls go
        on (the model sees that result). Returns ``False`` (doing nothing) when no call with
        that id is running (unknown, not started, or its body already settled)."""
        controller = self._state.calls.get(call_id)
        if controller is None:
            return False
        return controller.abort(CALL_CANCELLED)

    # -- undo -------------------------------------------------------------------------------

    def undo(self, calls: int = 1) -> Any:
        """Undo what this agent's last ``calls`` runs of code changed, through the ``undo``
        service of the environment the agent acts on (the notebook extension provides one that
        restores the kernel's namespace: see ``agentloop_nb.jupyter.undo``). Returns that
        service's report. The loop itself keeps no snapshots: it only delegates.

        Raises ``RuntimeError`` when no ``undo`` service is provided, and what the service
        raises (``ValueError`` for ``calls`` < 1)."""
        try:
            service = self.ctx.undo
        except AttributeError:
            raise UsageError(
                "agent.undo() needs an 'undo' service and none is provided: load the notebook "
                "extension (%load_ext agentloop_nb), whose kernel tools' runs it can undo"
            ) from None
        return service.undo(self, calls)

    def __repr__(self) -> str:
        return (
            f"<Agent {self.id!r} {self.status} provider={self.options.provider!r} "
            f"model={self.options.model!r} events={len(self.session.events)}>"
        )


# The public paths (``agentloop_nb.Agent``, ``agentloop_nb.AgentTurnError``), as the package
# root's eager names report: reprs, docs and pickles name them whichever home loads them.
Agent.__module__ = AgentTurnError.__module__ = "agentloop_nb"
