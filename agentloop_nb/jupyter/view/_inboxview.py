"""``InboxView``: the agent's pending input, listed live, each message with Edit and Remove.

It lists ``agent.inbox.next_turn`` (queued follow-ups) and ``agent.inbox.next_step`` (steering
and injected context) and changes them only through the inbox's public ``replace`` and
``remove``. A message a turn claims while someone edits it can no longer be changed: the
problem is shown in the panel, never raised into the front end.
"""

from __future__ import annotations

from html import escape
from typing import Any

import ipywidgets as widgets

from ..._disposer import Disposer
from ...hooks import ClaimedPayload
from ._throttle import DEFAULT_INTERVAL, Throttle

_EVENTS = ("agent/inbox/inserted", "agent/inbox/discarded", "agent/inbox/claimed")


class InboxView(widgets.VBox):
    """Pending messages of ``agent`` (hidden while there are none), each with Edit / Remove.

    ``InboxView(agent, *, interval=0.1)``; ``rows`` maps a pending message id to its row;
    ``edit(id)`` opens the editor of a row, ``save(id, text)`` / ``remove(id)`` change the
    inbox (what the buttons do). ``close()`` unsubscribes.
    """

    def __init__(self, agent: Any, *, interval: float = DEFAULT_INTERVAL) -> None:
        super().__init__(layout=widgets.Layout(display="none"))
        self.add_class("agentloop-inbox")
        self.agent = agent
        self.rows: dict[str, widgets.HBox] = {}
        self._editing: dict[str, widgets.Textarea] = {}
        self._shown: tuple[tuple[str, str, str], ...] | None = None
        self.notice = widgets.HTML()
        self.throttle = Throttle(self.render, interval)
        self._offs: list[Disposer] = [agent.ctx.on(name, self._changed) for name in _EVENTS]
        self.render()

    def _changed(self, payload: Any) -> None:
        if payload.agent is not self.agent:
            return
        self.throttle.poke()
        if isinstance(payload, ClaimedPayload):
            # Claimed: the message is in a turn now and must leave the panel as that turn
            # starts, not an interval later (claims come once a step, so no render storm).
            self.throttle.flush()

    def pending(self) -> list[tuple[str, str, str]]:
        """``(message id, queue, text)`` of every pending message: ``next-turn`` first."""
        inbox = self.agent.inbox
        out = []
        for queue, messages in (("next-turn", inbox.next_turn), ("next-step", inbox.next_step)):
            for m in messages:
                kind = str((m.source or {}).get("kind", "user"))
                label = "follow-up" if queue == "next-turn" else kind
                out.append((str(m.id), label, str(m.text)))
        return out

    def render(self) -> None:
        pending = tuple(self.pending())
        if pending == self._shown:
            return
        self._shown = pending
        live = {mid for mid, _, _ in pending}
        for mid in [m for m in self._editing if m not in live]:
            del self._editing[mid]  # claimed or removed while being edited
        old = self.rows
        self.rows = {mid: self._row(mid, label, text) for mid, label, text in pending}
        title = widgets.HTML(f'<span class="agentloop-muted">inbox · {len(pending)} pending</span>')
        self.children = (title, *self.rows.values(), self.notice)
        self.layout.display = None if pending or self.notice.value else "none"
        for row in old.values():
            row.close()

    def _row(self, mid: str, label: str, text: str) -> widgets.HBox:
        editor = self._editing.get(mid)
        if editor is not None:
            save = widgets.Button(description="Save", button_style="primary")
            save.add_class("agentloop-inbox-save")
            save.on_click(lambda _b: self.save(mid, editor.value))
            cancel = widgets.Button(description="Cancel")
            cancel.on_click(lambda _b: self._stop_editing(mid))
            row = widgets.HBox([editor, save, cancel])
        else:
            shown = widgets.HTML(
                f'<span class="agentloop-inbox-item"><b>{escape(label)}</b>: {escape(text)}</span>'
            )
            edit = widgets.Button(description="Edit")
            edit.add_class("agentloop-inbox-edit")
            edit.on_click(lambda _b: self.edit(mid))
            remove = widgets.Button(description="Remove")
            remove.add_class("agentloop-inbox-remove")
            remove.on_click(lambda _b: self.remove(mid))
            row = widgets.HBox([shown, edit, remove])
        row.add_class("agentloop-inbox-row")
        return row

    def edit(self, message_id: str) -> None:
        """Open the editor for pending message ``message_id`` (prefilled with its text)."""
        text = next((t for mid, _, t in self.pending() if mid == message_id), None)
        if text is None:
            self._problem("that message is no longer pending")
            return
        editor = widgets.Textarea(value=text, layout=widgets.Layout(width="60%"))
        editor.add_class("agentloop-inbox-editor")
        self._editing[message_id] = editor
        self._shown = None
        self.render()

    def _stop_editing(self, message_id: str) -> None:
        self._editing.pop(message_id, None)
        self._shown = None
        self.render()

    def save(self, message_id: str, text: str) -> None:
        """Replace the pending message's content with ``text`` (``agent.inbox.replace``)."""
        self._editing.pop(message_id, None)
        self._shown = None
        if not text.strip():
            self._problem("an empty message: use Remove to drop it")
        else:
            self._try(lambda: self.agent.inbox.replace(message_id, text))
        self.render()

    def remove(self, message_id: str) -> None:
        """Drop the pending message (``agent.inbox.remove``)."""
        self._editing.pop(message_id, None)
        self._shown = None
        self._try(lambda: self.agent.inbox.remove(message_id))
        self.render()

    def _try(self, change: Any) -> None:
        try:
            change()
        except KeyError:
            self._problem("that message was already taken by a turn")
        except Exception as exc:  # shown, not raised: a button has no cell to raise into
            self._problem(str(exc))
        else:
            self._problem("")

    def _problem(self, text: str) -> None:
        self.notice.value = f'<span class="agentloop-notice">{escape(text)}</span>' if text else ""

    def close_subscriptions(self) -> None:
        """Stop following the inbox; the widgets keep their last state."""
        self.throttle.close()
        offs, self._offs = self._offs, []
        for off in offs:
            off()

    def close(self) -> None:
        if hasattr(self, "_offs"):  # Widget.__del__ may call close on a half-built view
            self.close_subscriptions()
            for row in self.rows.values():
                row.close()
        super().close()


__all__ = ["InboxView"]
