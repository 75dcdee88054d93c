"""``ToolPoolView``: the current step's tool calls as a live table with a per-call timeline.

Derived from the log (through a shared :class:`SessionFeed`), never from inside tool
execution; colours come from the view's stylesheet (JupyterLab theme variables).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from html import escape
from typing import Any

import ipywidgets as widgets

from ..fold import SETTLED, Item, SessionFeed, pretty_args
from ._approval import WidgetApproval
from ._throttle import DEFAULT_INTERVAL, Throttle
from ._viewbase import TextRepr, feed_for

_POOL_TYPES = frozenset(
    {"assistant/message", "tool/call", "tool/approval", "tool/result", "turn/end", SETTLED}
)
_TICK = 0.25  # seconds between re-renders of running calls' live durations
_LIVE = frozenset({"running", "awaiting approval"})  # states a call can be cancelled in
_MIN_BAR = 1.0  # % of the timeline: the narrowest bar drawn, so an instant call stays visible
_FINISHED = frozenset({"done", "failed"})  # states a call's registered actions are offered in


class ToolPoolView(TextRepr, widgets.VBox):
    """The current step's tool calls: queued / running / awaiting approval / done / failed /
    aborted / denied / invalid, durations and a per-call timeline (bars positioned by start and
    end time, so parallel calls overlap visibly). Pending ``Ask`` approvals get Approve/Deny
    buttons (and an Edit button when the tool registered an editable argument: the person
    changes it in a text area, then "Approve edited" runs the call with that version); every
    running call (awaiting approval included) gets a Cancel button that calls
    ``agent.cancel_tool(call_id)``: that call ends ``cancelled``, the turn goes on. A finished
    call of a tool that registered a :class:`CallAction` on the approval service (the kernel
    tools' "Undo" on ``run_python``) gets its button; the action's report shows below.

    Derived from the log, never from inside tool execution: a call starts at its ``tool/call``
    event and ends when its body settles (``tools/settled``) or, failing that, at its committed
    ``tool/result``. A call whose body never ran (invalid arguments, unknown tool, denied,
    aborted before dispatch or while awaiting approval) shows neither duration nor bar, since
    its log times only measure the wait for its turn to be committed; the time a call waits
    for a person's answer (between its ``tool/approval`` events) is not counted either.

    ``ToolPoolView(agent, *, interval=0.1, approval=None, feed=None, own=None)``; the approval
    service defaults to ``agent.ctx.approval`` when it is a :class:`WidgetApproval`. ``own``
    (message ids) keeps the view on the latest tool step of those messages' turns, so later
    turns (other cells') do not replace what it shows.
    """

    def __init__(
        self,
        agent: Any,
        *,
        interval: float = DEFAULT_INTERVAL,
        approval: WidgetApproval | None = None,
        feed: SessionFeed | None = None,
        own: Iterable[str] | None = None,
    ) -> None:
        super().__init__()
        self.add_class("agentloop-pool")
        self.add_class("agentloop-root")
        self.agent = agent
        self.feed, self._owns_feed = feed_for(agent.session, agent.ctx, feed)
        self.transcript = self.feed.transcript
        self._own: set[str] | None = None if own is None else set(own)
        self.table = widgets.HTML()
        self.approvals = widgets.VBox()
        self.cancels = widgets.HBox()
        self.cancels.add_class("agentloop-pool-cancels")
        self._cancel_buttons: dict[str, widgets.Button] = {}
        self.actions = widgets.HBox()
        self.actions.add_class("agentloop-pool-actions")
        self.action_report = widgets.HTML()
        self._action_buttons: dict[tuple[str, str], widgets.Button] = {}
        self.children = (self.table, self.cancels, self.actions, self.action_report, self.approvals)
        self.throttle = Throttle(self.render, interval)
        self._buttons: dict[str, tuple[widgets.Button, widgets.Button]] = {}
        self._editors: dict[str, tuple[widgets.Textarea, widgets.Button]] = {}
        self._edit_buttons: dict[str, widgets.Button] = {}
        self._off_feed = self.feed.observe(self._changed)
        self.approval = approval if approval is not None else approval_of(agent)
        self._off_approval = (
            self.approval.subscribe(self._approvals_changed) if self.approval is not None else None
        )
        self.render()
        self._approvals_changed()

    @staticmethod
    def _span(item: Item) -> tuple[float | None, float | None]:
        """``(start, end or None while running)``; ``(None, None)`` when the body has not run
        (yet, or at all). The start is shifted by the call's wait for approval, so the span
        is as long as the duration the transcript shows."""
        d = item.data
        started, state = d.get("started"), d["state"]
        if started is None or d.get("ran") is False or state == "awaiting approval":
            return None, None
        start = started + d.get("waited", 0.0)
        return start, None if state == "running" else d.get("ended")

    def _changed(self, kind: str, _turns: frozenset[int]) -> None:
        if kind in _POOL_TYPES:
            self.throttle.poke()

    def own_message(self, message_id: str) -> None:
        """Follow the turn(s) of message ``message_id`` too (no-op for an unlimited view)."""
        if self._own is not None:
            self._own.add(message_id)
            self.throttle.poke()

    def current(self) -> tuple[tuple[int, int], list[Item]]:
        """``((turn, step), calls)`` of the step shown."""
        t = self.transcript
        if self._own is None:
            return t.pool_key, t.pool
        turns = set(t.turns_with(self._own))
        keys = [k for k in t.pools if k[0] in turns]
        if not keys:
            return (0, 0), []
        key = max(keys)
        return key, t.pools[key]

    def render(self) -> None:
        (turn, step), pool = self.current()
        now = time.time()
        rows, spans = [], []
        running = False
        for item in pool:
            call_id = str(item.data.get("call_id", ""))
            state = str(item.data["state"])
            start, end = self._span(item)
            if state in ("running", "awaiting approval"):
                running = True
            spans.append((start, end))
            rows.append((item, call_id, state, start, end))
        starts = [s for s, _ in spans if s is not None]
        t0 = min(starts) if starts else now
        t1 = max([e if e is not None else now for s, e in spans if s is not None] or [now])
        width = t1 - t0
        parts = [
            f'<div class="agentloop-pool-title">'
            f"tools · turn {turn} step {step} · {len(pool)} call(s)"
            f"{dask_dashboard_html(self.agent)}</div>"
            '<table class="agentloop-pool-table">'
        ]
        for item, call_id, state, start, end in rows:
            css = state.replace(" ", "-")
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
                    f'<div class="agentloop-bar agentloop-bar-{css}" '
                    f'style="left:{left:.2f}%;width:{w:.2f}%"></div>'
                )
                dur = f"{stop - start:.2f}s"
            args = pretty_args(item.text)
            args = args if len(args) <= 80 else args[:80] + "…"
            parts.append(
                f'<tr class="agentloop-pool-row agentloop-pool-{css}" '
                f'data-call-id="{escape(call_id)}"><td><b>{escape(str(item.data.get("name")))}</b>'
                f"<code>({escape(args)})</code></td>"
                f'<td class="agentloop-pool-state">{escape(state)}</td>'
                f'<td class="agentloop-pool-duration">{dur}</td>'
                f'<td style="width:40%"><div class="agentloop-track">{bar}</div></td></tr>'
            )
        parts.append("</table>")
        html = "".join(parts) if pool else '<div class="agentloop-pool-empty"></div>'
        if self.table.value != html:
            self.table.value = html
        self._sync_cancels(
            [(cid, str(item.data.get("name"))) for item, cid, state, *_ in rows if state in _LIVE]
        )
        self._sync_actions(
            [
                (cid, str(item.data.get("name")))
                for item, cid, state, *_ in rows
                if state in _FINISHED
            ]
        )
        if running:
            self.throttle.poke_after(_TICK)

    def _sync_cancels(self, live: list[tuple[str, str]]) -> None:
        """One Cancel button per running call; rebuilt only when that set changes."""
        if [cid for cid, _ in live] == list(self._cancel_buttons):
            return
        buttons: dict[str, widgets.Button] = {}
        for call_id, name in live:
            button = self._cancel_buttons.pop(call_id, None)
            if button is None:
                button = widgets.Button(
                    description=f"Cancel {name}", tooltip=f"cancel tool call {call_id}"
                )
                button.add_class("agentloop-cancel-call")
                button.on_click(lambda _b, cid=call_id: self.agent.cancel_tool(cid))
            buttons[call_id] = button
        for gone in self._cancel_buttons.values():
            gone.close()
        self._cancel_buttons = buttons
        self.cancels.children = tuple(buttons.values())

    def _sync_actions(self, finished: list[tuple[str, str]]) -> None:
        """One button per registered action offered on each finished call."""
        if self.approval is None:
            return
        wanted: list[tuple[tuple[str, str], Any, str]] = []
        for call_id, name in finished:
            for action in self.approval.actions_for(self.agent, name, call_id):
                wanted.append(((call_id, action.label), action, name))
        if [key for key, *_ in wanted] == list(self._action_buttons):
            return
        buttons: dict[tuple[str, str], widgets.Button] = {}
        for key, action, name in wanted:
            button = self._action_buttons.pop(key, None)
            if button is None:
                call_id = key[0]
                button = widgets.Button(
                    description=f"{action.label} {name}",
                    tooltip=f"{action.label.lower()} tool call {call_id}",
                )
                button.add_class("agentloop-call-action")
                button.on_click(lambda _b, a=action, cid=call_id: self._act(a, cid))
            buttons[key] = button
        for gone in self._action_buttons.values():
            gone.close()
        self._action_buttons = buttons
        self.actions.children = tuple(buttons.values())

    def _act(self, action: Any, call_id: str) -> None:
        try:
            report = action.run(self.agent, call_id)
        except Exception as exc:
            report = f"{action.label} failed: {type(exc).__name__}: {exc}"
        self.action_report.value = f'<pre class="agentloop-action-report">{escape(report)}</pre>'
        self.throttle.poke()  # the action may no longer be offered (an undone run)

    def action_button(self, call_id: str, label: str) -> widgets.Button | None:
        """The button of action ``label`` shown on a finished call, or ``None``."""
        return self._action_buttons.get((call_id, label))

    def cancel_button(self, call_id: str) -> widgets.Button | None:
        """The Cancel button shown for a running call, or ``None``."""
        return self._cancel_buttons.get(call_id)

    def _approvals_changed(self) -> None:
        if self.approval is None:
            return
        pending = self.approval.pending_for(self.agent)
        rows, buttons = [], {}
        self._editors, self._edit_buttons = {}, {}
        for p in pending:
            approve = widgets.Button(description="Approve", button_style="success")
            deny = widgets.Button(description="Deny", button_style="danger")
            approve.add_class("agentloop-approve")
            deny.add_class("agentloop-deny")
            approve.on_click(lambda _b, cid=p.call_id: self.approval.approve(cid, agent=self.agent))
            deny.on_click(lambda _b, cid=p.call_id: self.approval.deny(cid, agent=self.agent))
            why = f" — {p.reason}" if p.reason else ""
            label = widgets.HTML(
                f'<span class="agentloop-approval">approve <b>{escape(p.name)}</b>'
                f"<code>({escape(pretty_args(p.arguments)[:200])})</code>{escape(why)}?</span>"
            )
            row = widgets.HBox([label, approve, deny])
            detail = self.approval.detail_html(p)  # e.g. run_python's code
            parts: list[widgets.Widget] = [row, widgets.HTML(detail)] if detail else [row]
            editable = self.approval.editable(p)
            if editable is not None:
                parts.append(self._edit_box(p.call_id, row, *editable))
            rows.append(widgets.VBox(parts) if len(parts) > 1 else row)
            buttons[p.call_id] = (approve, deny)
        old = self.approvals.children
        self._buttons = buttons
        self.approvals.children = tuple(rows)
        for w in old:
            w.close()
        self.throttle.poke()

    def _edit_box(self, call_id: str, row: widgets.HBox, name: str, value: str) -> widgets.VBox:
        """The Edit button of a call with an editable argument: it opens a text area holding
        the proposed ``name`` and an "Approve edited" button that approves with its text."""
        edit = widgets.Button(description="Edit", tooltip=f"change the proposed {name}")
        edit.add_class("agentloop-edit")
        area = widgets.Textarea(value=value, rows=min(20, value.count("\n") + 2))
        area.layout.width = "100%"
        area.add_class("agentloop-edit-area")
        send = widgets.Button(description="Approve edited", button_style="success")
        send.add_class("agentloop-approve-edited")
        box = widgets.VBox([])
        self._editors[call_id] = (area, send)

        def open_editor(_b: Any) -> None:
            box.children = (area, send)

        edit.on_click(open_editor)
        send.on_click(
            lambda _b: (
                self.approval
                and self.approval.approve_edited(call_id, area.value, agent=self.agent)
            )
        )
        row.children = (*row.children, edit)
        self._edit_buttons[call_id] = edit
        return box

    def edit_controls(
        self, call_id: str
    ) -> tuple[widgets.Button, widgets.Textarea, widgets.Button] | None:
        """``(Edit, text area, Approve edited)`` of a pending call whose tool registered an
        editable argument, or ``None``."""
        edit = self._edit_buttons.get(call_id)
        editor = self._editors.get(call_id)
        if edit is None or editor is None:
            return None
        return edit, editor[0], editor[1]

    def approval_buttons(self, call_id: str) -> tuple[widgets.Button, widgets.Button] | None:
        """The ``(Approve, Deny)`` buttons shown for a pending call, or ``None``."""
        return self._buttons.get(call_id)

    @property
    def text(self) -> str:
        lines = []
        for item in self.current()[1]:
            lines.append(
                f"{item.data.get('name')} [{item.data['state']}] {item.data.get('call_id')}"
            )
        return "\n".join(lines)

    def close_subscriptions(self) -> None:
        """Stop following the agent; the widgets keep their last state."""
        self.throttle.close()
        if self._off_approval is not None:
            self._off_approval()
            self._off_approval = None
        self._off_feed()
        if self._owns_feed:
            self.feed.close()

    def close(self) -> None:
        if hasattr(self, "_off_feed"):  # Widget.__del__ may call close on a half-built view
            self.close_subscriptions()
        super().close()

    def __repr__(self) -> str:
        return f"<ToolPoolView {self.agent.id!r}>\n{self.text}"


def dask_dashboard_html(agent: Any) -> str:
    """`` · Dask dashboard`` linking the ``ctx.dask`` dashboard once its client is connected
    (``""`` without the Dask tools plugin or before its first use)."""
    link = getattr(getattr(agent.ctx, "dask", None), "dashboard_link", None)
    if not link:
        return ""
    return (
        f' · <a class="agentloop-dask-dashboard" href="{escape(link)}" target="_blank" '
        'rel="noopener">Dask dashboard</a>'
    )


def approval_of(agent: Any) -> WidgetApproval | None:
    try:
        service = agent.ctx.approval
    except Exception:
        return None
    return service if isinstance(service, WidgetApproval) else None


__all__ = ["ToolPoolView", "approval_of"]
