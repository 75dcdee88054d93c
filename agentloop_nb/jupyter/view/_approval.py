"""``WidgetApproval``: the approval service (``ctx.approval``) that notebook views answer.

The tool pipeline calls ``await approval.request(execution, reason)`` for an ``Ask`` decision;
this service parks the request as a :class:`PendingApproval`, tells its observers (the
``ToolPoolView`` of that agent shows Approve/Deny buttons on the call) and returns the answer.
No answer within ``timeout`` seconds is a deny, so an unattended kernel never waits forever; that
deny says so (a ``Deny`` whose reason tells the model nobody answered), so it is never mistaken
for a person declining.
Pure asyncio: no widget code lives here, so it also works without a front end (call
``approve(call_id)`` / ``deny(call_id)`` from a cell).

Approve with edits: a tool that registered an editable argument (``register_detail(name,
renderer, editable="source")``) can be approved with the person's version of its arguments,
``approve(call_id, arguments={...})``; the answer is then an
:class:`~agentloop_nb.tools.ApproveEdited` and the call runs with those arguments.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from ..._disposer import Disposer
from ..._record import MutableRecord, Record, set_field
from ...errors import InvalidTypeError, InvalidValueError
from ...tools import ApproveEdited, Deny

_log = logging.getLogger("agentloop_nb.jupyter")

DEFAULT_APPROVAL_TIMEOUT = 300.0

DetailRenderer = Callable[[str], "str | None"]
"""``renderer(arguments_json) -> html | None``: what an approval view shows under a pending
call of one tool (e.g. ``run_python``'s code, highlighted); ``None`` shows nothing."""


# A Record and a mutable record, not dataclasses: %load_ext imports this module (the approval
# service) and ``dataclass`` compiles each class's methods from source at import.
class CallAction(Record):
    """A button a view shows on each finished call of one tool (e.g. "Undo" on
    ``run_python``): ``label``; ``run(agent, call_id) -> str`` does it and returns a report the
    view shows; ``available(agent, call_id) -> bool`` says whether to offer it for that call."""

    __slots__ = ("available", "label", "run")
    __match_args__ = ("label", "run", "available")

    label: str
    run: Callable[[Any, str], str]
    available: Callable[[Any, str], bool]

    def __init__(
        self,
        label: str,
        run: Callable[[Any, str], str],
        available: Callable[[Any, str], bool],
    ) -> None:
        set_field(self, "label", label)
        set_field(self, "run", run)
        set_field(self, "available", available)


class PendingApproval(MutableRecord):
    """One call waiting for a person: ``call_id``, tool ``name``, raw JSON ``arguments``,
    ``reason`` (from ``Ask``), the calling ``agent`` and the future the answer resolves. Equal
    only to itself and hashed by identity; shown without its future."""

    __slots__ = ("agent", "arguments", "call_id", "future", "name", "reason")
    __match_args__ = ("call_id", "name", "arguments", "reason", "agent", "future")
    _repr_hidden = ("future",)

    def __init__(
        self,
        call_id: str,
        name: str,
        arguments: str,
        reason: str | None,
        agent: Any,
        future: asyncio.Future[bool | ApproveEdited],
    ) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments
        self.reason = reason
        self.agent = agent
        self.future = future

    # a request waiting for its answer is an entity, not a value (the ``eq=False`` dataclass it
    # was): equal only to itself and hashed by identity
    __eq__ = object.__eq__
    __hash__ = object.__hash__  # type: ignore[assignment]


class WidgetApproval:
    """Approval service answered by widget buttons (or ``approve``/``deny`` calls).

    ``request`` returns ``True`` only when someone approves (an
    :class:`~agentloop_nb.tools.ApproveEdited` when they approved edited arguments); a
    ``Deny`` saying "denied by the user" (meta ``{"approval": "denied"}``) when someone
    denies; on timeout a :class:`~agentloop_nb.tools.Deny` whose reason says nobody answered (the
    tool pipeline turns it into a ``DENIED`` result quoting that reason, with ``meta``
    ``{"approval": "timeout", "timeout": seconds}``). Cancelling the waiting call (the turn
    was aborted) withdraws the request.
    """

    def __init__(self, timeout: float = DEFAULT_APPROVAL_TIMEOUT) -> None:
        if timeout <= 0:
            raise InvalidValueError(f"approval timeout must be > 0 seconds, got {timeout!r}")
        self.timeout = timeout
        # Keyed by (agent, call id): call ids are unique within one agent's session only (the
        # offline model numbers its calls), so two agents may wait on the same id at once.
        self._pending: dict[tuple[int, str], PendingApproval] = {}
        self._observers: list[Callable[[], None]] = []
        # Written only by register_detail and its disposer; read by the views.
        self._details: dict[str, DetailRenderer] = {}
        self._editable: dict[str, str] = {}  # tool name -> the argument a person may edit
        # Written only by register_action and its disposer; read by the views.
        self._actions: dict[str, tuple[CallAction, ...]] = {}

    @property
    def pending(self) -> list[PendingApproval]:
        """Requests waiting for an answer, oldest first."""
        return list(self._pending.values())

    def pending_for(self, agent: Any) -> list[PendingApproval]:
        return [p for p in self._pending.values() if p.agent is agent]

    async def request(self, execution: Any, reason: str | None) -> bool | Deny | ApproveEdited:
        timeout = self.timeout  # the one this request waits for, even if changed meanwhile
        fut: asyncio.Future[bool | ApproveEdited] = asyncio.get_running_loop().create_future()
        call_id = str(execution.call_id)
        entry = PendingApproval(
            call_id, str(execution.name), str(execution.arguments), reason, execution.agent, fut
        )
        key = (id(execution.agent), call_id)
        self._pending[key] = entry
        self._notify()
        try:
            answer = await asyncio.wait_for(fut, timeout)
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
        if answer is False:  # a person said no: the model is told so, in those words
            asked = f" ({reason})" if reason else ""
            return Deny(reason=f"denied by the user{asked}", info={"approval": "denied"})
        return answer

    def approve(
        self, call_id: str, arguments: dict[str, Any] | str | None = None, *, agent: Any = None
    ) -> bool:
        """Answer yes; ``False`` when no such request is pending. With ``arguments`` (a dict
        or a JSON object string) the call runs with those instead of the model's (the tool
        pipeline checks them against the tool's schema). ``agent`` picks the request when
        several agents wait on the same call id (a ``ValueError`` says so otherwise). Raises
        ``ValueError`` for ``arguments`` that are not a JSON object."""
        if arguments is None:
            return self._answer(call_id, agent, True)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                raise InvalidValueError(f"edited arguments are not JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise InvalidValueError(
                f"edited arguments must be a JSON object, got {type(arguments).__name__}"
            )
        return self._answer(call_id, agent, ApproveEdited(args=arguments))

    def approve_edited(self, call_id: str, value: str, *, agent: Any = None) -> bool:
        """Approve a pending call after setting its editable argument (the one its tool
        registered with ``register_detail(..., editable=...)``) to ``value``; the other
        arguments stay the model's. ``False`` when no such request is pending. Raises
        ``ValueError`` when the call's tool has no editable argument."""
        entry = self._find(call_id, agent)
        if entry is None:
            return False
        name = self._editable.get(entry.name)
        if name is None:
            raise InvalidValueError(f"tool {entry.name!r} registered no editable argument")
        try:
            args = json.loads(entry.arguments or "{}")
        except ValueError:
            args = {}
        args = args if isinstance(args, dict) else {}
        return self.approve(call_id, {**args, name: value}, agent=entry.agent)

    def deny(self, call_id: str, *, agent: Any = None) -> bool:
        """Answer no; ``False`` when no such request is pending (``agent``: as for
        :meth:`approve`)."""
        return self._answer(call_id, agent, False)

    def _find(self, call_id: str, agent: Any) -> PendingApproval | None:
        """The pending request of ``call_id`` (of ``agent`` when given); ``ValueError`` when
        several agents wait on that id and ``agent`` does not say which."""
        entries = [
            p
            for p in self._pending.values()
            if p.call_id == call_id and (agent is None or p.agent is agent)
        ]
        if len(entries) > 1:
            names = ", ".join(repr(str(getattr(p.agent, "id", p.agent))) for p in entries)
            raise InvalidValueError(
                f"call {call_id!r} is waiting for approval in several agents ({names}): "
                "pass agent=... to say which"
            )
        return entries[0] if entries else None

    def _answer(self, call_id: str, agent: Any, answer: bool | ApproveEdited) -> bool:
        entry = self._find(call_id, agent)
        if entry is None or entry.future.done():
            return False
        entry.future.set_result(answer)
        return True

    def register_detail(
        self, tool_name: str, renderer: DetailRenderer, *, editable: str | None = None
    ) -> Disposer:
        """Show ``renderer(arguments)`` under each pending call of ``tool_name`` (the tools
        that know their arguments register this, so the views need not import them). A later
        registration for the same tool replaces the earlier one until it is disposed.

        ``editable`` names a string argument a person may change before approving (the views
        show an Edit button for it; see :meth:`approve_edited`)."""
        if not callable(renderer):
            raise InvalidTypeError(f"renderer for {tool_name!r} must be callable, got {renderer!r}")
        previous = self._details.get(tool_name)
        previous_editable = self._editable.get(tool_name)
        self._details[tool_name] = renderer
        if editable is None:
            self._editable.pop(tool_name, None)
        else:
            self._editable[tool_name] = editable

        def remove() -> None:
            if self._details.get(tool_name) is renderer:
                if previous is None:
                    del self._details[tool_name]
                else:
                    self._details[tool_name] = previous
                if previous_editable is None:
                    self._editable.pop(tool_name, None)
                else:
                    self._editable[tool_name] = previous_editable

        return Disposer(remove)

    def editable(self, pending: PendingApproval) -> tuple[str, str] | None:
        """``(argument name, current value)`` a person may edit in ``pending`` before
        approving, or ``None`` (no editable argument registered, or not a string)."""
        name = self._editable.get(pending.name)
        if name is None:
            return None
        try:
            value = json.loads(pending.arguments or "{}").get(name)
        except (ValueError, AttributeError):
            return None
        return (name, value) if isinstance(value, str) else None

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
            raise InvalidTypeError(
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
