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


@dataclass(frozen=True)
class CallAction:
    """A button a view shows on each finished call of one tool (e.g. "Undo" on
    ``run_python``): ``label``; ``run(agent, call_id) -> str`` does it and returns a report the
    view shows; ``available(agent, call_id) -> bool`` says whether to offer it for that call."""

    label: str
    run: Callable[[Any, str], str]
    available: Callable[[Any, str], bool]


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
        self._pending: dict[str, PendingApproval] = {}
        self._observers: list[Callable[[], None]] = []
        # Written only by register_detail and its disposer; read by the views.
        self._details: dict[str, DetailRenderer] = {}
        # Written only by register_action and its disposer; read by the views.
        self._actions: dict[str, tuple[CallAction, ...]] = {}

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
        self._pending[call_id] = entry
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
            if self._pending.get(call_id) is entry:
                del self._pending[call_id]
            self._notify()

    def approve(self, call_id: str) -> bool:
        """Answer yes; ``False`` when no such request is pending."""
        return self._answer(call_id, True)

    def deny(self, call_id: str) -> bool:
        """Answer no; ``False`` when no such request is pending."""
        return self._answer(call_id, False)

    def _answer(self, call_id: str, answer: bool) -> bool:
        entry = self._pending.get(call_id)
        if entry is None or entry.future.done():
            return False
        entry.future.set_result(answer)
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

    def register_action(
        self,
        tool_name: str,
        label: str,
        run: Callable[[Any, str], str],
        available: Callable[[Any, str], bool],
    ) -> Disposer:
        """Offer a button ``label`` on each finished call of ``tool_name`` for which
        ``available(agent, call_id)`` holds; clicking calls ``run(agent, call_id)`` and shows
        the text it returns (the tool that can undo its calls registers this, so the views
        need not import it). Raises ``TypeError`` for a non-callable ``run``/``available``."""
        if not callable(run) or not callable(available):
            raise TypeError(
                f"action {label!r} of {tool_name!r}: run and available must be callable"
            )
        action = CallAction(label, run, available)
        self._actions[tool_name] = (*self._actions.get(tool_name, ()), action)
        self._notify()

        def remove() -> None:
            left = tuple(a for a in self._actions.get(tool_name, ()) if a is not action)
            if left:
                self._actions[tool_name] = left
            else:
                self._actions.pop(tool_name, None)
            self._notify()

        return Disposer(remove)

    def actions_for(self, agent: Any, tool_name: str, call_id: str) -> list[CallAction]:
        """The actions offered on that finished call (a failing ``available`` is logged and
        the action left out: a view must render whatever a tool does)."""
        offered = []
        for action in self._actions.get(tool_name, ()):
            try:
                if action.available(agent, call_id):
                    offered.append(action)
            except Exception:
                _log.exception("call action %r of %r failed", action.label, tool_name)
        return offered

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


__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "CallAction",
    "DetailRenderer",
    "PendingApproval",
    "WidgetApproval",
]
