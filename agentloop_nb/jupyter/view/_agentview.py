"""``AgentView``: status + transcript + inbox + tool pool + controls, for one agent.

Views only read: each is derived from the session log through a shared
:class:`~._feed.SessionFeed` (O(1) per streamed chunk) and re-renders through a
:class:`~._throttle.Throttle`, so front-end traffic is bounded however fast tokens arrive; the
trailing render guarantees the final state is shown. A view built for an existing (e.g.
resumed) session renders its history from the log at once. ``repr`` of every view is a
readable text transcript, which is what a console or a test without a front end sees. No
widget state ever holds provider configuration or keys: views show only session events.

A displayed ``AgentView`` is two outputs: the live widget, and a static HTML transcript (with a
``text/plain`` twin) that is updated through its display handle at every turn end. A saved
notebook therefore keeps the conversation where there is no live widget (no kernel, a restart,
nbviewer): the static copy is hidden while its live widget is shown, and it hides the
"model not found" placeholder of a dead one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from html import escape
from typing import Any

import ipywidgets as widgets

from ..._disposer import Disposer
from ..fold import STYLE, SessionFeed, Transcript, end_label
from ._inboxview import InboxView
from ._pool import ToolPoolView
from ._sessionview import SessionView
from ._throttle import DEFAULT_INTERVAL, Throttle
from ._turnfork import OnFork
from ._viewbase import TextRepr, feed_for, style_widget

_STATUS_TYPES = frozenset({"turn/start", "turn/end", "assistant/message"})


class AgentView(TextRepr, widgets.VBox):
    """Status line (top and bottom: a spinner and the elapsed time while a turn runs, usage
    totals) + :class:`SessionView` + :class:`InboxView` + :class:`ToolPoolView` + controls: a
    follow-up box (Ctrl/Cmd+Enter sends) with Send, Steer, Inject and Cancel buttons (they
    call ``agent.followup/steer/inject/cancel``; a problem is shown under the controls, never
    raised into the front end).

    ``AgentView(agent, *, interval=0.1, name=None, feed=None, own=None, on_fork=None)``; ``close()``
    unsubscribes everything, ``freeze()`` unsubscribes but keeps the widgets on screen.
    ``name`` (the variable a magic bound the agent to; settable later) is what the header and
    ``repr`` call the agent; the long ``NAME-session-<uuid>`` id stays in the header's tooltip
    and at the end of ``repr``. Without a name both show the id. ``own`` limits the transcript
    to the turns of the given message ids (a ``%%agent`` cell's view; see :class:`SessionView`);
    messages sent from this view's controls join them. ``on_fork(agent) -> name`` names the
    agents the transcript's "fork from here" buttons create (see :class:`SessionView`).
    """

    def __init__(
        self,
        agent: Any,
        *,
        interval: float = DEFAULT_INTERVAL,
        name: str | None = None,
        feed: SessionFeed | None = None,
        own: Iterable[str] | None = None,
        on_fork: OnFork | None = None,
    ) -> None:
        super().__init__()
        self.add_class("agentloop-agent")
        self.add_class("agentloop-root")
        self.agent = agent
        self._name = name
        self.feed, self._owns_feed = feed_for(agent.session, agent.ctx, feed)
        self.status = widgets.HTML()
        # The bottom status line shows the same widget model (a model may be displayed in any
        # number of places): one comm message per status change, not two.
        self.status_bottom = widgets.Box([self.status], _dom_classes=("agentloop-status-bottom",))
        self.session_view = SessionView(
            agent.session, interval=interval, feed=self.feed, own=own, on_fork=on_fork
        )
        self.inbox_view = InboxView(agent, interval=interval)
        self.pool_view = ToolPoolView(agent, interval=interval, feed=self.feed, own=own)
        from ._prompt import PromptBox  # anywidget loads with the first view (see view/__init__)

        self.prompt = PromptBox(placeholder="message the agent… (Ctrl/Cmd+Enter sends)")
        self.prompt.layout.width = "60%"
        self.prompt.on_submit(lambda _text: self._submit("followup"))
        self.send_button = widgets.Button(description="Send", button_style="primary")
        self.steer_button = widgets.Button(description="Steer")
        self.inject_button = widgets.Button(description="Inject")
        # Neutral while idle (nothing to cancel); the warning colour only while a turn runs.
        self.cancel_button = widgets.Button(description="Cancel")
        for b, what in (
            (self.send_button, "send"),
            (self.steer_button, "steer"),
            (self.inject_button, "inject"),
            (self.cancel_button, "cancel"),
        ):
            b.add_class(f"agentloop-{what}")
        self.send_button.on_click(lambda _b: self._submit("followup"))
        self.steer_button.on_click(lambda _b: self._submit("steer"))
        self.inject_button.on_click(lambda _b: self._submit("inject"))
        self.cancel_button.on_click(lambda _b: self._cancel())
        self.notice = widgets.HTML()
        buttons = [self.send_button, self.steer_button, self.inject_button, self.cancel_button]
        self.controls = widgets.HBox([self.prompt, *buttons])
        self.style_sheet = style_widget()  # completed below with the rule hiding its static copy
        self.children = (
            self.style_sheet,
            self.status,
            self.session_view,
            self.inbox_view,
            self.pool_view,
            self.controls,
            self.notice,
            self.status_bottom,
        )
        self.style_sheet.value = f"<style>{STYLE}{self._hide_static_rule()}</style>"
        self._handles: list[Any] = []
        self.throttle = Throttle(self._render_status, interval)
        self._offs: list[Disposer] = [
            self.feed.observe(self._changed),
            agent.ctx.on("agent/status", self._on_status),
        ]
        self._render_status()

    # -- status -------------------------------------------------------------------------------

    def _changed(self, kind: str, _turns: frozenset[int]) -> None:
        if kind in _STATUS_TYPES:
            self.throttle.poke()
        if kind == "turn/end":
            self.update_static()

    def _on_status(self, payload: Any) -> None:
        if payload.agent is self.agent:
            self.throttle.poke()

    @property
    def name(self) -> str | None:
        """The name shown for the agent (``None``: the id is shown)."""
        return self._name

    @name.setter
    def name(self, value: str | None) -> None:
        self._name = value
        self._render_status()

    def status_html(self, *, live: bool = True) -> str:
        """The status line: a pill (with a spinner and the elapsed time while a turn runs,
        when ``live``), the agent's name, the turn, the last turn's end, token totals and,
        when ``ctx.budgets`` sets limits for the agent, the budget line (see
        :func:`budget_text`)."""
        a = self.agent
        t = self.transcript
        status = str(a.status)
        if not live and status == "running" and t.turn_ended is not None:
            status = "idle"  # a snapshot taken at a turn's end: that turn is over
        pill = escape(status)
        if live and status == "running":
            started = t.turn_started if t.turn_ended is None else None
            clock = "" if started is None else f" {_clock(time.time() - started)}"
            pill = f'<span class="agentloop-spinner"></span>{pill}{clock}'
        last = f" · last turn: {escape(end_label(t.last_end))}" if t.last_end else ""
        agent_id = escape(str(a.id))
        who = (
            f'<span class="agentloop-agent-name" title="{agent_id}">{escape(self._name)}</span>'
            if self._name
            else f'<span class="agentloop-agent-id">{agent_id}</span>'
        )
        budget = budget_text(a)
        budget_html = f' · <span class="agentloop-budget">{escape(budget)}</span>' if budget else ""
        return (
            f'<span class="agentloop-status agentloop-status-{escape(status)}">{pill}</span> '
            f"{who} · turn {t.turn}{last} · tokens in {t.usage['input_tokens']}, "
            f"out {t.usage['output_tokens']}{budget_html}"
        )

    def _render_status(self) -> None:
        html = self.status_html()
        if self.status.value != html:
            self.status.value = html
        style = "warning" if str(self.agent.status) == "running" else ""
        if self.cancel_button.button_style != style:
            self.cancel_button.button_style = style

    @property
    def transcript(self) -> Transcript:
        return self.feed.transcript

    # -- controls -----------------------------------------------------------------------------

    def _submit(self, how: str) -> None:
        text = self.prompt.value.strip()
        if not text:
            self._notice("type a message first")
            return
        try:
            message = getattr(self.agent, how)(text)
        except Exception as exc:  # shown, not raised: a button has no cell to raise into
            self._notice(f"{how} failed: {exc}")
            return
        message_id = getattr(message, "id", None)
        if how != "inject" and message_id is not None:
            self.session_view.own_message(str(message_id))
            self.pool_view.own_message(str(message_id))
        self.prompt.value = ""
        self._notice("")

    def _cancel(self) -> None:
        try:
            cancelled = self.agent.cancel("user")
        except Exception as exc:
            self._notice(f"cancel failed: {exc}")
            return
        self._notice("" if cancelled else "the agent is idle: nothing to cancel")

    def _notice(self, text: str) -> None:
        self.notice.value = f'<span class="agentloop-notice">{escape(text)}</span>' if text else ""

    # -- the static transcript ----------------------------------------------------------------

    def _hide_static_rule(self) -> str:
        return f'[data-agentloop-view="{self.model_id}"]{{display:none}}'

    def static_html(self) -> str:
        """The transcript this view shows as static HTML (what a saved notebook keeps)."""
        sv = self.session_view
        n = len(sv.earlier_turns())
        earlier = (
            f'<div class="agentloop-muted">({n} earlier turn{"" if n == 1 else "s"} not shown)'
            "</div>"
            if n
            else ""
        )
        # Where this copy shows, the output before it is this view's widget; if that widget
        # is dead (no kernel, a restart) it says "model not found": hide it.
        dead = (
            f'.jp-OutputArea-child:has(+ .jp-OutputArea-child [data-agentloop-view="'
            f'{self.model_id}"]):not(:has(.agentloop-agent)){{display:none}}'
        )
        return (
            f'<div class="agentloop-static agentloop-root" data-agentloop-view="{self.model_id}">'
            f"<style>{STYLE}{dead}</style>"
            f"<div>{self.status_html(live=False)}</div>{earlier}"
            f"{sv.static_html()}{self._queued_html()}</div>"
        )

    def _queued_html(self) -> str:
        """This view's messages still waiting in the inbox (not part of a turn yet)."""
        own = self.session_view.own
        if not own:
            return ""
        inbox = self.agent.inbox
        return "".join(
            f'<div class="agentloop-box agentloop-user agentloop-plain agentloop-queued">'
            f"<b>queued</b>: {escape(str(m.text))}</div>"
            for m in (*inbox.next_turn, *inbox.next_step)
            if m.id in own
        )

    def static_bundle(self) -> dict[str, str]:
        """``{"text/html": ..., "text/plain": ...}`` of :meth:`static_html` and ``repr``."""
        return {"text/html": self.static_html(), "text/plain": repr(self)}

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)
        self._handles.append(display(self.static_bundle(), raw=True, display_id=True))

    def update_static(self) -> None:
        """Refresh the static transcript of every place this view was displayed."""
        if not self._handles:
            return
        bundle = self.static_bundle()
        for handle in self._handles:
            handle.update(bundle, raw=True)

    # -- lifetime -----------------------------------------------------------------------------

    async def settled(self) -> None:
        """Return once every sub-view has rendered what it was told so far (no sleeping:
        e.g. ``await view.settled()`` in a later cell before reading widget values)."""
        await self.session_view.settled()
        for throttle in (self.pool_view.throttle, self.inbox_view.throttle, self.throttle):
            await throttle.settled()

    def flush(self) -> None:
        """Render everything pending now (tests; normally the throttles do it)."""
        self.session_view.flush()
        self.pool_view.throttle.flush()
        self.inbox_view.throttle.flush()
        self.throttle.flush()

    @property
    def text(self) -> str:
        return self.session_view.text

    def freeze(self) -> None:
        """Stop following the agent (e.g. it was disposed) but keep the widgets on screen
        with their last state; the static transcript gets a last update."""
        if not hasattr(self, "_offs"):
            return
        self.flush()
        self.update_static()
        self._stop()

    def _stop(self) -> None:
        self.throttle.close()
        offs, self._offs = self._offs, []
        for off in offs:
            off()
        for view in (self.session_view, self.pool_view, self.inbox_view):
            view.throttle.close()
        self.inbox_view.close_subscriptions()
        self.session_view.close_subscriptions()
        self.pool_view.close_subscriptions()
        if self._owns_feed:
            self.feed.close()

    def close(self) -> None:
        if hasattr(self, "_offs"):  # Widget.__del__ may call close on a half-built view
            self._stop()
            self.session_view.close()
            self.pool_view.close()
            self.inbox_view.close()
        super().close()

    def __repr__(self) -> str:
        a = self.agent
        head = (
            f"{self._name!r} {a.status} session={a.id!r}" if self._name else f"{a.id!r} {a.status}"
        )
        return f"<AgentView {head}>\n{self.text}"


_BUDGET_SCOPES = (("agent", "budget"), ("app", "app budget"))


def budget_text(agent: Any) -> str:
    """The budget line of ``agent``: each limit the ``budgets`` service (if the context has
    one) sets for the agent, then App-wide, with what is used, e.g.
    ``"budget: tokens 1200/10000, cost $0.0100/$1.00, ≤ 8 steps/turn"``; ``""`` when there is
    no budget. An unknown cost (a model without a price) reads ``?``."""
    try:
        budgets = getattr(agent.ctx, "budgets", None)
    except Exception:  # a context names a missing service in its own error
        return ""
    if budgets is None or not callable(getattr(budgets, "get", None)):
        return ""
    lines = []
    for scope, label in _BUDGET_SCOPES:
        limits = budgets.get(agent if scope == "agent" else None)
        parts = [_budget_part(budgets, agent, scope, k, v) for k, v in limits.items()]
        if parts:
            lines.append(f"{label}: {', '.join(parts)}")
    return "; ".join(lines)


def _budget_part(budgets: Any, agent: Any, scope: str, limit: str, value: float) -> str:
    if limit == "max_steps_per_turn":
        return f"≤ {value:g} steps/turn"
    used = budgets.used(agent, limit, scope)
    if limit == "max_tokens":
        return f"tokens {used}/{value:g}"
    shown = "?" if used is None else f"${used:.4f}"
    return f"cost {shown}/${value:.2f}"


def _clock(seconds: float) -> str:
    """A running turn's elapsed time (``m:ss``) that the browser advances by itself: the
    stylesheet's ``agentloop-clock`` animations count seconds and minutes from the negative
    delay, so a running view sends nothing once a second to keep its clock going (twenty
    views streaming would otherwise spend a third of the pacer's renders on their clocks).
    Each re-render of the status line restarts it from the kernel's figure."""
    delay = f"animation-delay:-{max(0.0, seconds):.3f}s"
    return f'<span class="agentloop-clock" style="{delay}"></span>'


__all__ = ["AgentView"]
