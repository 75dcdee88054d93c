"""``SessionView``: the live transcript of one session, one ``HTML`` widget per turn.

A render sends only the turns whose items changed (usually the current turn), so a long
session costs the same per update as a short one. A view may be limited to the turns a cell
started (``own=``: the ids of the messages that cell sent); the turns before them then sit
behind one collapsed "N earlier turns" toggle (rendered only while it is open), and turns other
cells started later are left to those cells' views.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ipywidgets as widgets

from ._feed import SessionFeed
from ._throttle import DEFAULT_INTERVAL, Throttle
from ._viewbase import TextRepr, feed_for, style_widget


class SessionView(TextRepr, widgets.VBox):
    """The live transcript of one session: user/steered/injected messages with their source,
    streaming assistant text (Markdown once finished) and (collapsible) reasoning, tool calls
    with arguments, state and result, turn boundaries with end reasons and usage, request
    errors and retries. The transcript sits in a box that stays scrolled to its end while it
    grows (unless the reader scrolled up).

    ``SessionView(session, ctx=None, *, interval=0.1, feed=None, own=None)``: ``own=None``
    shows every turn; an iterable of message ids shows the turns those messages are part of
    (see :meth:`own_message`), with the turns before them behind ``earlier_toggle``.
    ``close()`` unsubscribes.
    """

    def __init__(
        self,
        session: Any,
        ctx: Any = None,
        *,
        interval: float = DEFAULT_INTERVAL,
        feed: SessionFeed | None = None,
        own: Iterable[str] | None = None,
    ) -> None:
        super().__init__()
        self.add_class("agentloop-session")
        self.add_class("agentloop-root")
        self.session = session
        self.feed, self._owns_feed = feed_for(session, ctx, feed)
        self.transcript = self.feed.transcript
        self._own: set[str] | None = None if own is None else set(own)
        self._before = self.transcript.turn  # turns up to this one started before the view
        self._turns: dict[int, widgets.HTML] = {}
        self._dirty: set[int] = set(self.transcript.turns)
        self._earlier_shown: tuple[int, ...] | None = None
        self.earlier_toggle = widgets.ToggleButton(
            value=False, layout=widgets.Layout(display="none", width="auto")
        )
        self.earlier_toggle.add_class("agentloop-earlier-toggle")
        self.earlier_toggle.observe(self._toggled, "value")
        self.earlier = widgets.HTML(layout=widgets.Layout(display="none"))
        self.earlier.add_class("agentloop-earlier")
        self.body = widgets.VBox()
        self.body.add_class("agentloop-body")
        self.scroll = widgets.Box([self.body])
        self.scroll.add_class("agentloop-scroll")
        self.children = (style_widget(), self.earlier_toggle, self.earlier, self.scroll)
        self.throttle = Throttle(self.render, interval)
        self._off_feed = self.feed.observe(self._changed)
        self.render()  # history, at once

    # -- which turns --------------------------------------------------------------------------

    def own_message(self, message_id: str) -> None:
        """Show the turn(s) message ``message_id`` is part of (a follow-up or steer this view
        sent). Does nothing for a view of every turn."""
        if self._own is not None and message_id not in self._own:
            self._own.add(message_id)
            self._dirty.update(self.transcript.turns)
            self.throttle.poke()

    @property
    def own(self) -> frozenset[str] | None:
        """The message ids whose turns this view shows (``None``: every turn)."""
        return None if self._own is None else frozenset(self._own)

    def shown_turns(self) -> list[int]:
        """The turns this view shows, in order."""
        if self._own is None:
            return self.transcript.turns
        return self.transcript.turns_with(self._own)

    def earlier_turns(self) -> list[int]:
        """The turns behind the "earlier turns" toggle (none for a view of every turn)."""
        if self._own is None:
            return []
        shown = self.shown_turns()
        first = shown[0] if shown else None
        mine = set(shown)
        return [
            n
            for n in self.transcript.turns
            if n not in mine and (n <= self._before or (first is not None and n < first))
        ]

    # -- rendering ----------------------------------------------------------------------------

    def _changed(self, _kind: str, turns: frozenset[int]) -> None:
        if turns:
            self._dirty.update(turns)
            self.throttle.poke()

    def _toggled(self, _change: Any) -> None:
        self._earlier_shown = None
        self._render_earlier(self.earlier_turns(), set())

    def render(self) -> None:
        """Send the turns whose items changed since the last render (idempotent)."""
        dirty, self._dirty = self._dirty, set()
        transcript = self.transcript
        added = False
        for turn in self.shown_turns():
            w = self._turns.get(turn)
            if w is None:
                w = widgets.HTML(value=transcript.turn_html(turn))
                w.add_class("agentloop-turn")
                self._turns[turn] = w
                added = True
            elif turn in dirty:
                html = transcript.turn_html(turn)
                if w.value != html:
                    w.value = html
        if added:
            self.body.children = tuple(self._turns[t] for t in sorted(self._turns))
        if self._own is not None:
            self._render_earlier(self.earlier_turns(), dirty)

    def _render_earlier(self, earlier: list[int], dirty: set[int]) -> None:
        n = len(earlier)
        toggle = self.earlier_toggle
        opened = toggle.value
        label = f"{'▾' if opened else '▸'} {n} earlier turn{'' if n == 1 else 's'}"
        if toggle.description != label:
            toggle.description = label
        toggle.layout.display = None if n else "none"
        if not opened or not n:
            self.earlier.layout.display = "none"
            if self.earlier.value:
                self.earlier.value = ""  # closed: nothing to keep up to date
            self._earlier_shown = None
            return
        key = tuple(earlier)
        if key != self._earlier_shown or dirty.intersection(earlier):
            self.earlier.value = self.transcript.turns_html(earlier)
            self._earlier_shown = key
        self.earlier.layout.display = None

    @property
    def turn_widgets(self) -> list[widgets.HTML]:
        """The ``HTML`` widget of each turn shown, in order."""
        return [self._turns[t] for t in sorted(self._turns)]

    @property
    def html(self) -> str:
        """The HTML of the turns shown (earlier turns excluded)."""
        return "".join(self._turns[t].value for t in sorted(self._turns))

    @property
    def text(self) -> str:
        """The plain-text transcript of the turns shown (every event folded so far, rendered
        or not); a view limited to its own turns starts with an ``(N earlier turns)`` line."""
        if self._own is None:
            return self.transcript.text()
        body = self.transcript.turns_text(self.shown_turns())
        n = len(self.earlier_turns())
        head = f"({n} earlier turn{'' if n == 1 else 's'})" if n else ""
        return "\n".join(p for p in (head, body) if p)

    def close_subscriptions(self) -> None:
        """Stop following the session; the widgets keep their last state."""
        self.throttle.close()
        self._off_feed()
        if self._owns_feed:
            self.feed.close()

    def close(self) -> None:
        if hasattr(self, "_off_feed"):  # Widget.__del__ may call close on a half-built view
            self.close_subscriptions()
            for w in self._turns.values():
                w.close()
        super().close()

    def __repr__(self) -> str:
        return f"<SessionView {self.session.id!r}>\n{self.text}"


__all__ = ["SessionView"]
