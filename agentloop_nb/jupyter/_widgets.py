"""Live widgets: ``SessionView``, ``ToolPoolView`` and ``AgentView`` (ipywidgets).

Views only read: each one is derived from the session log (``session/event``), folded into a
shared :class:`Transcript` (O(1) per streamed chunk), plus the ``tools/settled`` hook (a tool
body settled; its result is committed later, in model order). Nothing here takes part in running
the agent or its tools. A view re-renders through a :class:`Throttle`, so front-end traffic is
bounded (≈ ``1 / interval`` renders per second, each sending only the widgets whose value
changed) however fast tokens arrive; the trailing render guarantees the final state is shown.
A view built for an existing (e.g. resumed) session renders its history from the log at once.

The transcript is split into one ``HTML`` widget per turn, so a render sends the current turn
only. ``repr`` of every view is a readable text transcript, which is what a console or a test
without a front end sees. No widget state ever holds provider configuration or keys: views
show only session events, which never contain them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as widgets

from .._disposer import Disposer
from ._approval import WidgetApproval
from ._item import Item
from ._kernel_tools import approval_detail_html
from ._render import pretty_args, reason_text
from ._throttle import DEFAULT_INTERVAL, Throttle
from ._transcript import Transcript

SETTLED = "tools/settled"
"""The hook a tool body's settling is announced on (before its result is committed)."""
_POOL_TYPES = frozenset({"assistant/message", "tool/call", "tool/result", "turn/end", SETTLED})
_STATUS_TYPES = frozenset({"turn/start", "turn/end", "assistant/message"})
_TICK = 0.25  # seconds between re-renders of running calls' live durations
_MIN_BAR = 1.0  # % of the timeline: the narrowest bar drawn, so an instant call stays visible
_COLOURS = {
    "queued": "#bbb",
    "streaming": "#bbb",
    "running": "#1f77b4",
    "awaiting approval": "#9467bd",
    "done": "#2ca02c",
    "failed": "#d62728",
    "denied": "#8c564b",
    "invalid": "#d62728",
    "aborted": "#ff7f0e",
    "dropped": "#ddd",
}


class SessionFeed:
    """A session folded into a :class:`Transcript`, telling observers the type of each change.

    It listens to ``session/event`` (every logged event) and ``tools/settled`` (a tool body of
    this session's agent settled: the call shows finished at once, although its ``tool/result``
    is committed later, in model order); observers get the event type, or ``"tools/settled"``.
    Views built together share one feed, so a chunk is folded once however many views show it.

    ``ctx`` is the context to subscribe through (default: the session store's dispatcher);
    subscribing through ``agent.ctx`` ties the subscriptions to the agent's scope.
    """

    def __init__(self, session: Any, ctx: Any = None) -> None:
        self.session = session
        self.transcript = Transcript()
        self.transcript.feed_all(session.events)
        self._observers: list[Callable[[str], None]] = []
        ctx = ctx if ctx is not None else session.store.dispatch
        if ctx is None:
            raise ValueError(f"session {session.id!r} has no dispatcher to subscribe to; pass ctx=")
        self._offs: list[Disposer] = [
            ctx.on("session/event", self._on_event),
            ctx.on(SETTLED, self._on_settled),
        ]

    def _on_event(self, payload: Any) -> None:
        if payload.session is not self.session:
            return
        event = payload.event
        self.transcript.feed(event)
        self._tell(event.type)

    def _on_settled(self, payload: Any) -> None:
        execution = payload.execution
        if getattr(execution.agent, "session", None) is not self.session:
            return
        result = payload.result
        error = result.error
        settled = self.transcript.settle(
            str(execution.call_id),
            time.time(),
            is_error=bool(result.is_error),
            code=None if error is None else str(error.code),
        )
        if settled:
            self._tell(SETTLED)

    def _tell(self, kind: str) -> None:
        for observer in self._observers:
            observer(kind)

    def observe(self, observer: Callable[[str], None]) -> None:
        self._observers.append(observer)

    def close(self) -> None:
        self._observers.clear()
        offs, self._offs = self._offs, []
        for off in offs:
            off()


class _TextRepr:
    """Full text transcript as the ``text/plain`` of the display bundle (ipywidgets cuts its
    plain-text repr at 110 characters; a console or a notebook without a front end should see
    the whole transcript)."""

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        data: dict[str, Any] | None = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if data is not None:
            data["text/plain"] = repr(self)
        return data


def _feed_for(session: Any, ctx: Any, feed: SessionFeed | None) -> tuple[SessionFeed, bool]:
    if feed is not None:
        return feed, False
    return SessionFeed(session, ctx), True


class SessionView(_TextRepr, widgets.VBox):
    """The live transcript of one session: user/steered/injected messages with their source,
    streaming assistant text and (collapsible) reasoning, tool calls with arguments, state and
    result, turn boundaries with end reasons, request errors, retries and token usage.

    ``SessionView(session, ctx=None, *, interval=0.1)``; ``close()`` unsubscribes.
    """

    def __init__(
        self,
        session: Any,
        ctx: Any = None,
        *,
        interval: float = DEFAULT_INTERVAL,
        feed: SessionFeed | None = None,
    ) -> None:
        super().__init__()
        self.add_class("agentloop-session")
        self.session = session
        self.feed, self._owns_feed = _feed_for(session, ctx, feed)
        self.transcript = self.feed.transcript
        self._turns: dict[int, widgets.HTML] = {}
        self.throttle = Throttle(self.render, interval)
        self.feed.observe(self._changed)
        self.render()  # history, at once

    def _changed(self, _kind: str) -> None:
        self.throttle.poke()

    def render(self) -> None:
        """Send the turns whose items changed since the last render (idempotent)."""
        transcript = self.transcript
        dirty = transcript.take_dirty()
        if not dirty:
            return
        items = transcript.items
        turns = {items[i].turn for i in dirty}
        added = False
        for turn in sorted(turns):
            html = transcript.turn_html(turn)
            w = self._turns.get(turn)
            if w is None:
                w = widgets.HTML(value=html)
                w.add_class("agentloop-turn")
                self._turns[turn] = w
                added = True
            elif w.value != html:
                w.value = html
        if added:
            self.children = tuple(self._turns[t] for t in sorted(self._turns))

    @property
    def text(self) -> str:
        """The plain-text transcript (every event folded so far, rendered or not)."""
        return self.transcript.text()

    def close(self) -> None:
        if hasattr(self, "throttle"):  # Widget.__del__ may call close on a half-built view
            self.throttle.close()
            if self._owns_feed:
                self.feed.close()
            for w in self._turns.values():
                w.close()
        super().close()

    def __repr__(self) -> str:
        return f"<SessionView {self.session.id!r}>\n{self.text}"


class ToolPoolView(_TextRepr, widgets.VBox):
    """The current step's tool calls: queued / running / awaiting approval / done / failed /
    aborted / denied / invalid, durations and a per-call timeline (bars positioned by start and
    end time, so parallel calls overlap visibly). Pending ``Ask`` approvals get Approve/Deny
    buttons.

    Derived from the log, never from inside tool execution: a call starts at its ``tool/call``
    event and ends when its body settles (``tools/settled``) or, failing that, at its committed
    ``tool/result``. A call whose body never ran (invalid arguments, unknown tool, denied,
    aborted before dispatch or while awaiting approval) shows neither duration nor bar, since
    its log times only measure the wait for its turn to be committed; the time a call waits
    for a person's answer is not counted either.

    ``ToolPoolView(agent, *, interval=0.1, approval=None)``; the approval service defaults to
    ``agent.ctx.approval`` when it is a :class:`WidgetApproval`.
    """

    def __init__(
        self,
        agent: Any,
        *,
        interval: float = DEFAULT_INTERVAL,
        approval: WidgetApproval | None = None,
        feed: SessionFeed | None = None,
    ) -> None:
        super().__init__()
        self.add_class("agentloop-pool")
        self.agent = agent
        self.feed, self._owns_feed = _feed_for(agent.session, agent.ctx, feed)
        self.transcript = self.feed.transcript
        self.table = widgets.HTML()
        self.approvals = widgets.VBox()
        self.children = (self.table, self.approvals)
        self.throttle = Throttle(self.render, interval)
        self._asking: set[str] = set()  # call ids waiting for a person's answer
        self._answered: dict[str, float] = {}  # call id -> when the answer came (epoch s)
        self._tick: asyncio.TimerHandle | None = None
        self._buttons: dict[str, tuple[widgets.Button, widgets.Button]] = {}
        self.feed.observe(self._changed)
        self.approval = approval if approval is not None else _approval_of(agent)
        self._off_approval = (
            self.approval.subscribe(self._approvals_changed) if self.approval is not None else None
        )
        self.render()
        self._approvals_changed()

    def _span(self, item: Item, call_id: str, state: str) -> tuple[float | None, float | None]:
        """``(start, end or None while running)``; ``(None, None)`` when the body has not run
        (yet, or at all)."""
        d = item.data
        started = d.get("started")
        if started is None or d.get("ran") is False or state == "awaiting approval":
            return None, None
        answered = self._answered.get(call_id)
        start = started if answered is None else max(started, answered)
        return start, None if state == "running" else d.get("ended")

    def _changed(self, kind: str) -> None:
        if kind in _POOL_TYPES:
            self.throttle.poke()

    def _state(self, item: Item) -> str:
        state = str(item.data["state"])
        approval = self.approval
        call_id = item.data.get("call_id")
        if state != "running" or approval is None:
            return state
        if any(p.call_id == call_id for p in approval.pending_for(self.agent)):
            return "awaiting approval"
        return state

    def render(self) -> None:
        pool = self.transcript.pool
        now = time.time()
        rows, spans = [], []
        running = False
        for item in pool:
            call_id = str(item.data.get("call_id", ""))
            state = self._state(item)
            start, end = self._span(item, call_id, state)
            if state in ("running", "awaiting approval"):
                running = True
            spans.append((start, end))
            rows.append((item, call_id, state, start, end))
        if len(self._answered) > len(rows):  # forget answers of earlier steps' calls
            shown = {call_id for _, call_id, *_ in rows}
            self._answered = {c: t for c, t in self._answered.items() if c in shown}
        starts = [s for s, _ in spans if s is not None]
        t0 = min(starts) if starts else now
        t1 = max([e if e is not None else now for s, e in spans if s is not None] or [now])
        width = t1 - t0
        turn, step = self.transcript.pool_key
        parts = [
            f'<div class="agentloop-pool-title" style="font-size:85%;color:#666">'
            f"tools · turn {turn} step {step} · {len(pool)} call(s)</div>"
            '<table class="agentloop-pool-table" style="font-size:85%;width:100%">'
        ]
        for item, call_id, state, start, end in rows:
            colour = _COLOURS.get(state, "#999")
            if start is None:
                bar, dur = "", ""
            else:
                stop = end if end is not None else now
                if width > 0:
                    w = max(100.0 * (stop - start) / width, _MIN_BAR)
                    left = min(100.0 * (start - t0) / width, 100.0 - w)
                else:  # every timed call started and ended at the same instant
                    left, w = 0.0, 100.0
                bar = (
                    f'<div class="agentloop-bar agentloop-bar-{state.replace(" ", "-")}" '
                    f'style="position:absolute;left:{left:.2f}%;width:{w:.2f}%;top:0;bottom:0;'
                    f'background:{colour}"></div>'
                )
                dur = f"{stop - start:.2f}s"
            args = pretty_args(item.text)
            args = args if len(args) <= 80 else args[:80] + "…"
            parts.append(
                f'<tr class="agentloop-pool-row agentloop-pool-{state.replace(" ", "-")}" '
                f'data-call-id="{escape(call_id)}"><td><b>{escape(str(item.data.get("name")))}</b>'
                f"<code>({escape(args)})</code></td>"
                f'<td class="agentloop-pool-state" style="color:{colour}">{escape(state)}</td>'
                f'<td class="agentloop-pool-duration">{dur}</td>'
                f'<td style="width:40%"><div style="position:relative;height:10px;'
                f'background:#f3f3f3">{bar}</div></td></tr>'
            )
        parts.append("</table>")
        html = "".join(parts) if pool else '<div class="agentloop-pool-empty"></div>'
        if self.table.value != html:
            self.table.value = html
        self._schedule_tick(running)

    def _schedule_tick(self, running: bool) -> None:
        if not running or self._tick is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._tick = loop.call_later(_TICK, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        self.throttle.poke()

    def _approvals_changed(self) -> None:
        if self.approval is None:
            return
        pending = self.approval.pending_for(self.agent)
        asking = {p.call_id for p in pending}
        now = time.time()
        for call_id in self._asking - asking:  # answered (or withdrawn) just now
            self._answered[call_id] = now
        self._asking = asking
        rows, buttons = [], {}
        for p in pending:
            approve = widgets.Button(description="Approve", button_style="success")
            deny = widgets.Button(description="Deny", button_style="danger")
            approve.add_class("agentloop-approve")
            deny.add_class("agentloop-deny")
            approve.on_click(lambda _b, cid=p.call_id: self.approval.approve(cid))
            deny.on_click(lambda _b, cid=p.call_id: self.approval.deny(cid))
            why = f" — {p.reason}" if p.reason else ""
            label = widgets.HTML(
                f'<span class="agentloop-approval">approve <b>{escape(p.name)}</b>'
                f"<code>({escape(pretty_args(p.arguments)[:200])})</code>{escape(why)}?</span>"
            )
            row = widgets.HBox([label, approve, deny])
            detail = approval_detail_html(p.name, p.arguments)  # run_python: the code
            rows.append(widgets.VBox([row, widgets.HTML(detail)]) if detail else row)
            buttons[p.call_id] = (approve, deny)
        old = self.approvals.children
        self._buttons = buttons
        self.approvals.children = tuple(rows)
        for w in old:
            w.close()
        self.throttle.poke()

    def approval_buttons(self, call_id: str) -> tuple[widgets.Button, widgets.Button] | None:
        """The ``(Approve, Deny)`` buttons shown for a pending call, or ``None``."""
        return self._buttons.get(call_id)

    @property
    def text(self) -> str:
        lines = []
        for item in self.transcript.pool:
            lines.append(
                f"{item.data.get('name')} [{self._state(item)}] {item.data.get('call_id')}"
            )
        return "\n".join(lines)

    def close(self) -> None:
        if hasattr(self, "_off_approval"):  # Widget.__del__ may call close on a half-built view
            self.throttle.close()
            if self._tick is not None:
                self._tick.cancel()
            if self._off_approval is not None:
                self._off_approval()
            if self._owns_feed:
                self.feed.close()
        super().close()

    def __repr__(self) -> str:
        return f"<ToolPoolView {self.agent.id!r}>\n{self.text}"


def _approval_of(agent: Any) -> WidgetApproval | None:
    try:
        service = agent.ctx.approval
    except Exception:
        return None
    return service if isinstance(service, WidgetApproval) else None


class AgentView(_TextRepr, widgets.VBox):
    """Status badge + :class:`SessionView` + :class:`ToolPoolView` + controls: a follow-up box
    with Send, Steer, Inject and Cancel buttons (they call ``agent.followup/steer/inject/
    cancel``; a problem is shown under the controls, never raised into the front end).

    ``AgentView(agent, *, interval=0.1, name=None)``; ``close()`` unsubscribes everything.
    ``name`` (the variable a magic bound the agent to; settable later) is what the header and
    ``repr`` call the agent; the long ``NAME-session-<uuid>`` id stays in the header's tooltip
    and at the end of ``repr``. Without a name both show the id.
    """

    def __init__(
        self, agent: Any, *, interval: float = DEFAULT_INTERVAL, name: str | None = None
    ) -> None:
        super().__init__()
        self.add_class("agentloop-agent")
        self.agent = agent
        self._name = name
        self.feed = SessionFeed(agent.session, agent.ctx)
        self.status = widgets.HTML()
        self.session_view = SessionView(agent.session, interval=interval, feed=self.feed)
        self.pool_view = ToolPoolView(agent, interval=interval, feed=self.feed)
        self.prompt = widgets.Textarea(
            placeholder="message the agent…", layout=widgets.Layout(width="60%")
        )
        self.send_button = widgets.Button(description="Send", button_style="primary")
        self.steer_button = widgets.Button(description="Steer")
        self.inject_button = widgets.Button(description="Inject")
        self.cancel_button = widgets.Button(description="Cancel", button_style="warning")
        for b, name in (
            (self.send_button, "send"),
            (self.steer_button, "steer"),
            (self.inject_button, "inject"),
            (self.cancel_button, "cancel"),
        ):
            b.add_class(f"agentloop-{name}")
        self.send_button.on_click(lambda _b: self._submit("followup"))
        self.steer_button.on_click(lambda _b: self._submit("steer"))
        self.inject_button.on_click(lambda _b: self._submit("inject"))
        self.cancel_button.on_click(lambda _b: self._cancel())
        self.notice = widgets.HTML()
        self.controls = widgets.HBox(
            [
                self.prompt,
                self.send_button,
                self.steer_button,
                self.inject_button,
                self.cancel_button,
            ]
        )
        self.children = (self.status, self.session_view, self.pool_view, self.controls, self.notice)
        self.throttle = Throttle(self._render_status, interval)
        self.feed.observe(self._changed)
        self._off_status = agent.ctx.on("agent/status", self._on_status)
        self._render_status()

    def _changed(self, kind: str) -> None:
        if kind in _STATUS_TYPES:
            self.throttle.poke()

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

    def _render_status(self) -> None:
        a = self.agent
        t = self.transcript
        status = str(a.status)
        last = f" · last turn: {escape(reason_text(t.last_end))}" if t.last_end else ""
        agent_id = escape(str(a.id))
        who = (
            f'<span class="agentloop-agent-name" title="{agent_id}">{escape(self._name)}</span>'
            if self._name
            else f'<span class="agentloop-agent-id">{agent_id}</span>'
        )
        html = (
            f'<span class="agentloop-status agentloop-status-{escape(status)}" '
            f'style="padding:1px 6px;border-radius:8px;color:white;background:'
            f'{"#1f77b4" if status == "running" else "#888"}">{escape(status)}</span> '
            f"{who}"
            f" · turn {t.turn}{last} · tokens in {t.usage['input_tokens']}, "
            f"out {t.usage['output_tokens']}"
        )
        if self.status.value != html:
            self.status.value = html

    @property
    def transcript(self) -> Transcript:
        return self.feed.transcript

    def _submit(self, how: str) -> None:
        text = self.prompt.value.strip()
        if not text:
            self._notice("type a message first")
            return
        try:
            getattr(self.agent, how)(text)
        except Exception as exc:  # shown, not raised: a button has no cell to raise into
            self._notice(f"{how} failed: {exc}")
            return
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
        self.notice.value = (
            f'<span class="agentloop-notice" style="color:#d62728">{escape(text)}</span>'
            if text
            else ""
        )

    async def settled(self) -> None:
        """Return once every sub-view has rendered what it was told so far (no sleeping:
        e.g. ``await view.settled()`` in a later cell before reading widget values)."""
        for throttle in (self.session_view.throttle, self.pool_view.throttle, self.throttle):
            await throttle.settled()

    def flush(self) -> None:
        """Render everything pending now (tests; normally the throttles do it)."""
        self.session_view.throttle.flush()
        self.pool_view.throttle.flush()
        self.throttle.flush()

    @property
    def text(self) -> str:
        return self.transcript.text()

    def close(self) -> None:
        if hasattr(self, "_off_status"):  # Widget.__del__ may call close on a half-built view
            self.throttle.close()
            self._off_status()
            self.session_view.close()
            self.pool_view.close()
            self.feed.close()
        super().close()

    def __repr__(self) -> str:
        a = self.agent
        head = (
            f"{self._name!r} {a.status} session={a.id!r}" if self._name else f"{a.id!r} {a.status}"
        )
        return f"<AgentView {head}>\n{self.text}"


__all__ = ["AgentView", "SessionFeed", "SessionView", "ToolPoolView"]
