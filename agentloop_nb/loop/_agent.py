"""``Agent``: the public face of one running agent (SPEC §4.1). The turn logic lives in
``_driver.py``; this module only routes input, status and cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, PositiveInt

from .._supervisor import require_running_loop
from ..hooks import StatusPayload
from ..signals import AbortController
from ._inbox import Inbox, Target, make_user_message
from ._request import RequestPath

if TYPE_CHECKING:
    from ..context import Context
    from ..messages import UserMessage
    from ..session import Session
    from ._service import AgentLoop

Status = Literal["idle", "running"]


class AgentOptions(BaseModel):
    """What an agent talks to. ``provider`` and ``model`` may be left out when an
    ``agent/request`` listener supplies them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str | None = None
    model: str | None = None
    max_tokens: PositiveInt | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None


def normalize_cause(cause: Any) -> dict[str, Any]:
    if isinstance(cause, str):
        if cause not in ("user", "parent", "disposed"):
            raise ValueError(
                f"unknown cancel cause {cause!r}: use 'user', 'parent', 'disposed' "
                "or {'kind': 'hook', 'reason': ...}"
            )
        return {"kind": cause}
    if isinstance(cause, dict) and isinstance(cause.get("kind"), str):
        return dict(cause)
    raise TypeError(f"cancel cause must be a str or a dict with a 'kind', got {cause!r}")


class Agent:
    """One agent: its session, its scoped context, its inbox and its driver.

    Synchronous methods (``send`` and friends, ``cancel``) only schedule work; they never block.
    ``when_idle()`` returns once the driver has nothing left to do.
    """

    def __init__(
        self,
        loop: AgentLoop,
        session: Session,
        ctx: Context,
        options: AgentOptions,
        *,
        resumed: bool = False,
    ) -> None:
        self.id = session.id
        self.session = session
        self.ctx = ctx
        self.options = options
        self.inbox = Inbox(self)
        self._loop = loop
        self._status: Status = "idle"
        self._wake = False
        self._controller = AbortController()
        self._task: asyncio.Task[None] | None = None
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._disposed = False
        self._disposal: asyncio.Future[None] | None = None  # AgentLoop.dispose memo
        self._owner: Callable[[], Any] | None = None  # the owning scope's effect disposer
        self._published = False
        self._turn = 0
        # The model-request path's state (proposal, last header); the driver calls it.
        self._requests = RequestPath(self, resumed=resumed)

    # -- status -------------------------------------------------------------------------------

    @property
    def status(self) -> Status:
        return self._status

    @property
    def turn(self) -> int:
        """The number of the last turn opened (0 before the first)."""
        return self._turn

    def _set_status(self, status: Status) -> None:
        if status == self._status:
            return
        self._status = status
        self._emit("agent/status", StatusPayload(self, status))
        if status == "idle":
            waiters, self._idle_waiters = self._idle_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def when_idle(self) -> None:
        """Return once the agent is idle (at once if it already is). Safe to cancel."""
        if self._status == "idle":
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(fut)
        await fut

    def _emit(self, name: str, payload: Any) -> None:
        if self._published:
            self.ctx.emit(name, payload)

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
        ``ValueError`` for an unknown target, ``RuntimeError`` after disposal."""
        if target not in ("next-turn", "next-step"):
            raise ValueError(f"unknown send target {target!r}: use 'next-turn' or 'next-step'")
        if self._disposed:
            raise RuntimeError(f"agent {self.id!r} is disposed; create or resume a new agent")
        message = make_user_message(content, source)
        if wakeup and self._task is None:
            require_running_loop("Agent.send")
        message = self.inbox._insert(target, message)
        if wakeup:
            self._wake = True
            self._ensure_driver()
        return message

    def followup(self, content: Any, *, source: Any = None) -> UserMessage:
        return self.send(content, target="next-turn", wakeup=True, source=source)

    def steer(self, content: Any, *, source: Any = None) -> UserMessage:
        return self.send(content, target="next-step", wakeup=True, source=source or "steer")

    def inject(self, content: Any, *, source: Any = None) -> UserMessage:
        return self.send(content, target="next-step", wakeup=False, source=source or "inject")

    def _ensure_driver(self) -> None:
        if self._task is not None or self._disposed or not self._published:
            return
        self._set_status("running")  # flips synchronously: the caller sees "running" at once
        from ._driver import drive

        self._task = self._loop._spawn(drive(self), name=f"agentloop_nb driver {self.id}")

    # -- cancellation -------------------------------------------------------------------------

    def cancel(self, cause: Any = "user", *, keep_inbox: bool = False) -> bool:
        """Stop the current turn. Clears the inbox unless ``keep_inbox``. Returns ``False``
        (and does nothing) when the agent is idle. The first cause of a turn wins."""
        normalized = normalize_cause(cause)
        if self._task is None:
            return False
        if not keep_inbox:
            self.inbox._clear()
        self._wake = False
        self._controller.abort(normalized)
        return True

    async def _dispose(self) -> None:
        if self._disposed:
            return
        self._disposed = True
        task = self._task
        if task is not None:
            self._wake = False
            self._controller.abort({"kind": "disposed"})
            await asyncio.shield(task) if not task.done() else None

    def __repr__(self) -> str:
        return (
            f"<Agent {self.id!r} {self._status} provider={self.options.provider!r} "
            f"model={self.options.model!r} events={len(self.session.events)}>"
        )
