"""``WidgetApproval``: the approval service (``ctx.approval``) that notebook views answer.

The tool pipeline calls ``await approval.request(execution, reason)`` for an ``Ask`` decision;
this service parks the request as a :class:`PendingApproval`, tells its observers (the
``ToolPoolView`` of that agent shows Approve/Deny buttons on the call) and returns the answer.
No answer within ``timeout`` seconds is a deny, so an unattended kernel never waits forever; that
deny says so (a ``Deny`` whose reason tells the model nobody answered), so it is never mistaken
for a person declining.
Pure asyncio: no widget code lives here, so it also works without a front end (call
``approve(call_id)`` / ``deny(call_id)`` from a cell).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..._disposer import Disposer
from ...tools import Deny

_log = logging.getLogger("agentloop_nb.jupyter")

DEFAULT_APPROVAL_TIMEOUT = 300.0

DetailRenderer = Callable[[str], "str | None"]
"""``renderer(arguments_json) -> html | None``: what an approval view shows under a pending
call of one tool (e.g. ``run_python``'s code, highlighted); ``None`` shows nothing."""


@dataclass(eq=False)
class PendingApproval:
    """One call waiting for a person: ``call_id``, tool ``name``, raw JSON ``arguments``,
    ``reason`` (from ``Ask``), the calling ``agent`` and the future the answer resolves."""

    call_id: str
    name: str
    arguments: str
    reason: str | None
    agent: Any
    future: asyncio.Future[bool] = field(repr=False)


class WidgetApproval:
    """Approval service answered by widget buttons (or ``approve``/``deny`` calls).

    ``request`` returns ``True`` only when someone approves; ``False`` when someone denies;
    on timeout a :class:`~agentloop_nb.tools.Deny` whose reason says nobody answered (the
    tool pipeline turns it into a ``DENIED`` result quoting that reason, with ``meta``
    ``{"approval": "timeout", "timeout": seconds}``). Cancelling the waiting call (the turn
    was aborted) withdraws the request.
    """

    def __init__(self, timeout: float = DEFAULT_APPROVAL_TIMEOUT) -> None:
        if timeout <= 0:
            raise ValueError(f"approval timeout must be > 0 seconds, got {timeout!r}")
        self.timeout = timeout
        # Keyed by (agent, call id): call ids are unique within one agent's session only (the
        # offline model numbers its calls), so two agents may wait on the same id at once.
        self._pending: dict[tuple[int, str], PendingApproval] = {}
        self._observers: list[Callable[[], None]] = []
        # Written only by register_detail and its disposer; read by the views.
        self._details: dict[str, DetailRenderer] = {}

    @property
    def pending(self) -> list[PendingApproval]:
        """Requests waiting for an answer, oldest first."""
        return list(self._pending.values())

    def pending_for(self, agent: Any) -> list[PendingApproval]:
        return [p for p in self._pending.values() if p.agent is agent]

    async def request(self, execution: Any, reason: str | None) -> bool | Deny:
        timeout = self.timeout  # the one this request waits for, even if changed meanwhile
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        call_id = str(execution.call_id)
        entry = PendingApproval(
            call_id, str(execution.name), str(execution.arguments), reason, execution.agent, fut
        )
        key = (id(execution.agent), call_id)
        self._pending[key] = entry
        self._notify()
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            asked = f" ({reason})" if reason else ""
            return Deny(
                reason=f"no one answered the approval request{asked} within {timeout:g} s; "
                "denied by default",
                info={"approval": "timeout", "timeout": timeout},
            )
        finally:
            if self._pending.get(key) is entry:
                del self._pending[key]
            self._notify()

    def approve(self, call_id: str, agent: Any = None) -> bool:
        """Answer yes; ``False`` when no such request is pending. ``agent`` picks the request
        when several agents wait on the same call id (a ``ValueError`` says so otherwise)."""
        return self._answer(call_id, agent, True)

    def deny(self, call_id: str, agent: Any = None) -> bool:
        """Answer no; ``False`` when no such request is pending (``agent``: as for
        :meth:`approve`)."""
        return self._answer(call_id, agent, False)

    def _answer(self, call_id: str, agent: Any, answer: bool) -> bool:
        entries = [
            p
            for p in self._pending.values()
            if p.call_id == call_id and (agent is None or p.agent is agent)
        ]
        if len(entries) > 1:
            names = ", ".join(repr(str(getattr(p.agent, "id", p.agent))) for p in entries)
            raise ValueError(
                f"call {call_id!r} is waiting for approval in several agents ({names}): "
                "pass agent=... to say which"
            )
        if not entries or entries[0].future.done():
            return False
        entries[0].future.set_result(answer)
        return True

    def register_detail(self, tool_name: str, renderer: DetailRenderer) -> Disposer:
        """Show ``renderer(arguments)`` under each pending call of ``tool_name`` (the tools
        that know their arguments register this, so the views need not import them). A later
        registration for the same tool replaces the earlier one until it is disposed."""
        if not callable(renderer):
            raise TypeError(f"renderer for {tool_name!r} must be callable, got {renderer!r}")
        previous = self._details.get(tool_name)
        self._details[tool_name] = renderer

        def remove() -> None:
            if self._details.get(tool_name) is renderer:
                if previous is None:
                    del self._details[tool_name]
                else:
                    self._details[tool_name] = previous

        return Disposer(remove)

    def detail_html(self, pending: PendingApproval) -> str | None:
        """The registered detail of ``pending`` as HTML, or ``None`` (no renderer, or it
        failed: a view must render even when a renderer raises, so that is logged)."""
        renderer = self._details.get(pending.name)
        if renderer is None:
            return None
        try:
            return renderer(pending.arguments)
        except Exception:
            _log.exception("approval detail renderer for %r failed", pending.name)
            return None

    def subscribe(self, observer: Callable[[], None]) -> Disposer:
        """Call ``observer()`` whenever the pending set changes."""
        self._observers.append(observer)

        def remove() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return Disposer(remove)

    def _notify(self) -> None:
        for observer in tuple(self._observers):
            try:
                observer()
            except Exception:
                _log.exception("approval observer failed")

    def __repr__(self) -> str:
        return f"<WidgetApproval pending={len(self._pending)} timeout={self.timeout}s>"


__all__ = ["DEFAULT_APPROVAL_TIMEOUT", "DetailRenderer", "PendingApproval", "WidgetApproval"]
