"""``TurnState``: everything one agent's driver knows about its running (or next) turn.

Who may mutate it (the invariant; ``tests/test_state_writers.py`` checks the first half):

- Every module other than this one and ``_driver`` changes it only through the transition
  methods below: ``attach_requests`` (the creation, once), ``publish`` / ``withdraw`` (the
  creation's publication and its rollback), ``mark_disposed`` (the only place ``disposed`` is
  set), ``request_wake`` (``Agent.send``), ``cancel`` (``Agent.cancel``, the disposal) and
  ``record_failure`` (a flush that failed for good).
- The driver (``_driver``) owns the running turn: it writes ``task``, ``controller`` (a fresh
  one per cancelled turn), ``wake`` (cleared at each claim) and the per-step fields (``step``,
  ``step_open``, ``claimed``, ``max_tokens``, ``end``/``detail``) directly, because these are
  written on every step and a method call each would cost the hot path; ``open_turn`` and
  ``set_status`` are its multi-field transitions.
- Everyone may read it.

All of it lives on the event loop's thread. It imports nothing that knows about agents, so
every other loop module may depend on it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Literal

from ..signals import AbortController

if TYPE_CHECKING:
    from ..messages import UserMessage
    from ..session import PersistenceError
    from ._request import RequestPath

Status = Literal["idle", "running"]


class TurnState:
    """The driver-owned state of one agent.

    Lifecycle flags: ``published`` (entered the registries; events may be emitted), ``disposed``
    (no new turn may start). Driver: ``task`` (``None`` while idle), ``status``, ``wake`` (a
    waking send is pending), ``controller`` (aborts the current admission or turn). Turn:
    ``turn`` (number of the last turn opened), ``step``, ``step_open``, ``claimed`` (the input
    entered in this turn), ``max_tokens``, ``end``/``detail`` (a non-error end decided by a
    hook). ``requests``: the agent's :class:`RequestPath` (its request proposal and last
    logged header), set once the agent exists; ``resumed``: the session continues a log.
    ``failure``: the ``PersistenceError`` a flush of the agent's session raised; once set,
    every later turn is refused (the session can no longer be written: dispose the agent and
    resume the session once the cause is fixed). ``calls``: the running tool calls' own
    controllers by call id (``Agent.cancel_tool``); ``asks``: the pending ``Agent.ask`` waits.
    """

    __slots__ = (
        "asks",
        "calls",
        "claimed",
        "controller",
        "detail",
        "disposed",
        "end",
        "failure",
        "idle_waiters",
        "max_tokens",
        "published",
        "requests",
        "resumed",
        "status",
        "step",
        "step_open",
        "task",
        "turn",
        "wake",
    )

    def __init__(self, *, turn: int = 0, resumed: bool = False) -> None:
        self.published = False
        self.disposed = False
        self.task: asyncio.Task[None] | None = None
        self.status: Status = "idle"
        self.wake = False
        self.controller = AbortController()
        self.idle_waiters: list[asyncio.Future[None]] = []
        self.turn = turn
        self.step = 0
        self.step_open = False
        self.claimed: list[UserMessage] = []
        self.max_tokens = False
        self.end = "completed"
        self.detail: str | None = None
        self.resumed = resumed
        self.requests: RequestPath | None = None
        self.failure: PersistenceError | None = None
        self.calls: dict[str, AbortController] = {}
        self.asks = AskWaits()

    # -- transitions for the other modules (see the module docstring) -----------------------

    def attach_requests(self, requests: RequestPath) -> None:
        """Set the agent's request path, once, when the agent exists."""
        self.requests = requests

    def publish(self) -> None:
        """The agent entered the registries: events may be emitted, the driver may start."""
        self.published = True

    def withdraw(self) -> None:
        """A publication failed and was rolled back: unpublished, and disposed for good."""
        self.published = False
        self.mark_disposed()

    def mark_disposed(self) -> None:
        """Refuse every new turn from now on (idempotent). The one place ``disposed`` is set."""
        self.disposed = True

    def request_wake(self) -> None:
        """A waking send is pending: the driver opens (or continues) a turn for it."""
        self.wake = True

    def cancel(self, cause: Any) -> None:
        """Drop a pending wake and abort the current admission or turn with ``cause`` (the
        first cause of a turn wins: the controller keeps it)."""
        self.wake = False
        self.controller.abort(cause)

    def record_failure(self, error: PersistenceError) -> None:
        """The session can no longer be written: every later turn is refused with ``error``."""
        self.failure = error

    # -- the driver's own transitions ---------------------------------------------------------

    def open_turn(self) -> int:
        """Start the next turn's bookkeeping; return its number."""
        self.turn += 1
        self.step = 0
        self.step_open = False
        self.claimed = []
        self.max_tokens = False
        self.end = "completed"
        self.detail = None
        return self.turn

    def set_status(self, status: Status) -> bool:
        """Record ``status``; return whether it changed. Going idle releases ``when_idle``."""
        if status == self.status:
            return False
        self.status = status
        if status == "idle":
            waiters, self.idle_waiters = self.idle_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        return True

    async def when_idle(self) -> None:
        """Return once idle (at once if already). Safe to cancel."""
        if self.status == "idle":
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.idle_waiters.append(fut)
        await fut


TurnEnd = tuple[int, dict[str, Any]]


class AskWaits:
    """Pending ``Agent.ask`` waits: each follows one queued message to the turn that claims it,
    then to that turn's ``turn/end``. The driver reports claims, discards and turn ends
    synchronously, so a turn that ends without yielding is never missed."""

    __slots__ = ("by_message", "by_turn", "limbo")

    def __init__(self) -> None:
        self.by_message: dict[str, asyncio.Future[TurnEnd]] = {}
        self.by_turn: dict[int, list[asyncio.Future[TurnEnd]]] = {}
        # discarded, but an edit (``Inbox.replace``) re-inserts the same id right after
        self.limbo: dict[str, asyncio.Future[TurnEnd]] = {}

    def watch(self, message_id: str) -> asyncio.Future[TurnEnd]:
        """A future resolved with ``(turn, reason)`` when the turn claiming the message ends;
        resolved with turn 0 and reason ``{"kind": "discarded"}`` when the message is removed
        from the inbox unclaimed."""
        fut: asyncio.Future[TurnEnd] = asyncio.get_running_loop().create_future()
        self.by_message[message_id] = fut
        return fut

    def forget(self, fut: asyncio.Future[TurnEnd]) -> None:
        """Drop a wait that its caller abandoned (timeout, cancellation)."""
        for waits in (self.by_message, self.limbo):
            for key, value in list(waits.items()):
                if value is fut:
                    del waits[key]
        for turn, futs in list(self.by_turn.items()):
            if fut in futs:
                futs.remove(fut)
                if not futs:
                    del self.by_turn[turn]

    def claimed(self, message_id: str, turn: int) -> None:
        fut = self.by_message.pop(message_id, None)
        if fut is not None:
            self.by_turn.setdefault(turn, []).append(fut)

    def discarded(self, message_id: str) -> None:
        fut = self.by_message.pop(message_id, None)
        if fut is not None:
            self.limbo[message_id] = fut
            fut.get_loop().call_soon(self._drop, message_id)

    def inserted(self, message_id: str) -> None:
        fut = self.limbo.pop(message_id, None)
        if fut is not None:  # edited in place: still the same follow-up
            self.by_message[message_id] = fut

    def _drop(self, message_id: str) -> None:
        fut = self.limbo.pop(message_id, None)
        if fut is not None and not fut.done():
            fut.set_result((0, {"kind": "discarded"}))

    def ended(self, turn: int, reason: dict[str, Any]) -> None:
        for fut in self.by_turn.pop(turn, ()):
            if not fut.done():
                fut.set_result((turn, dict(reason)))
