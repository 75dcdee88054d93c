"""``SessionView``: the live transcript of one session, rendered incrementally.

The turn in progress is a box of one widget per item that may change (a streaming text, a
tool call) and one per run of items that cannot (its start line, user messages: see
:mod:`._liveturn`), so a render sends only what changed (usually the text being streamed); a
finished turn never changes again and is one HTML widget (history of any length costs a
constant number of widgets per turn). A streaming text is split into segments of at most
:data:`SEGMENT` characters: full segments are sent once and never again, and each render
sends only the last, growing one, so the cost of an update does not grow with the answer.
When the text is finished its segment(s) are replaced by one widget with its Markdown.

A view may be limited to the turns a cell started (``own=``: the ids of the messages that
cell sent); the turns before them then sit behind one collapsed "N earlier turns" toggle
(rendered only while it is open), turns started elsewhere between two of its own sit behind
a collapsed "N turns started elsewhere" marker (:mod:`._elsewhere`) at their place, and turns
other cells started after its last one are left to those cells' views.

A ``delegate`` call whose child session is found gets a collapsible live view of the child
under it (:mod:`._childview`); a finished turn is then cut into one widget per run of items
between such sections. Each finished turn ends with a "fork from here" button
(:mod:`._turnfork`). A finished turn costs three widget models (its box, its HTML, its
button): layouts and styles are shared by all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from html import escape
from typing import Any

import ipywidgets as widgets
from ipywidgets.widgets.widget_string import HTMLStyle

from ..fold import Item, SessionFeed, item_html
from ._childview import ChildSection, Subagents
from ._elsewhere import Elsewhere, elsewhere_label, gaps
from ._liveturn import ITEM, SEGMENT, SETTLED, STREAMED, Settled, Spare, Stream, restyle
from ._throttle import DEFAULT_INTERVAL, Throttle
from ._turnfork import OnFork, TurnForks
from ._viewbase import TextRepr, feed_for, style_widget


class _Sealed:
    """A finished turn's widgets: its HTML, cut after each call that has a child section (so
    the section sits right under its call); usually one part. ``key``: those calls' ids."""

    __slots__ = ("key", "parts")

    def __init__(self, parts: list[widgets.HTML], key: tuple[str, ...]) -> None:
        self.parts = parts
        self.key = key


class SessionView(TextRepr, widgets.VBox):
    """The live transcript of one session: user/steered/injected messages with their source,
    streaming assistant text (Markdown once finished) and (collapsible) reasoning, tool calls
    with arguments, state and result, turn boundaries with end reasons and usage, request
    errors and retries. The transcript sits in a scroll box where every turn keeps its
    natural height; the box stays scrolled to its end while it grows, stops following once
    the reader scrolls up and then offers a "jump to latest" button (``jump``).

    ``SessionView(session, ctx=None, *, interval=0.1, feed=None, own=None, on_fork=None)``:
    ``own=None`` shows every turn; an iterable of message ids shows the turns those messages
    are part of (see :meth:`own_message`), with the turns before them behind
    ``earlier_toggle`` and the turns started elsewhere between two of them behind an
    :class:`Elsewhere` marker each (see :meth:`elsewhere_turns`, :meth:`elsewhere_marker`). ``close()`` unsubscribes and closes the widgets (the child views
    included); ``close_subscriptions()`` only stops following the session.

    Sub-agents: under each ``delegate`` call whose child session is found (see
    :mod:`._childview`) sits a collapsible :class:`ChildSection` holding the child's own
    ``SessionView`` (open while the call runs, closed once it finished; children of children
    nest the same way). Forks: each finished turn has a "fork from here" button
    (:meth:`fork_turn`; ``on_fork(agent) -> name`` names the new agent, see
    :class:`TurnForks`). The running turn has none.
    """

    def __init__(
        self,
        session: Any,
        ctx: Any = None,
        *,
        interval: float = DEFAULT_INTERVAL,
        feed: SessionFeed | None = None,
        own: Iterable[str] | None = None,
        on_fork: OnFork | None = None,
    ) -> None:
        super().__init__()
        self.add_class("agentloop-session")
        self.add_class("agentloop-root")
        self.session = session
        self.feed, self._owns_feed = feed_for(session, ctx, feed)
        self.transcript = self.feed.transcript
        self._own: set[str] | None = None if own is None else set(own)
        self._before = self.transcript.turn  # turns up to this one started before the view
        # One layout and one style for every widget of the transcript (turn boxes, items,
        # segments, sealed parts): each widget of its own would be two more comm channels.
        self._turn_layout = widgets.Layout()
        self._part_style = HTMLStyle()
        self._turns: dict[int, widgets.VBox] = {}
        self._widgets: dict[int, widgets.HTML] = {}  # item index -> widget (finished items)
        self._streams: dict[int, Stream] = {}  # item index -> widgets (streaming texts)
        self._spare = Spare((self._turn_layout, self._part_style))  # every HTML widget's source
        self._settled = Settled(self._spare)  # the runs of settled items of live turns
        self._sealed: dict[int, _Sealed] = {}  # finished turn -> its widgets
        self._elsewhere: dict[tuple[int, ...], Elsewhere] = {}  # markers, by the turns they hold
        self._dirty: set[int] = set()  # item indices changed since the last render
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
        from ._follow import JumpToLatest  # anywidget loads with the first view

        self.jump = JumpToLatest()
        # Bottom-up: the first child (the sticky jump button) sits at the box's bottom edge.
        self.scroll = widgets.Box([self.jump, self.body])
        self.scroll.add_class("agentloop-scroll")
        self.children = (style_widget(), self.earlier_toggle, self.earlier, self.scroll)
        self.throttle = Throttle(self.render, interval)
        # Forks and child lookups go through the root context (the store's dispatcher), so
        # a fork is the App's agent, not one owned by the agent whose view this is.
        self._root = getattr(getattr(session, "store", None), "dispatch", None) or ctx
        self._on_fork = on_fork
        self.forks = TurnForks(
            str(session.id),
            self._root,
            self.transcript.turn_end_seqs.get,
            self._turn_changed,
            on_fork,
        )
        self._subagents = Subagents(session, self._root, self._child_view, self._child_noted)
        self._off_feed = self.feed.observe(self._changed)
        self.render()  # history, at once

    # -- which turns --------------------------------------------------------------------------

    @property
    def own(self) -> frozenset[str] | None:
        """The message ids whose turns this view shows (``None``: every turn)."""
        return None if self._own is None else frozenset(self._own)

    def own_message(self, message_id: str) -> None:
        """Show the turn(s) message ``message_id`` is part of (a follow-up or steer this view
        sent). Does nothing for a view of every turn."""
        if self._own is not None and message_id not in self._own:
            self._own.add(message_id)
            self.throttle.poke()

    def shown_turns(self) -> list[int]:
        """The turns this view shows, in order."""
        if self._own is None:
            return self.transcript.turns
        return self.transcript.turns_with(self._own)

    def elsewhere_turns(self) -> dict[int, list[int]]:
        """For each turn shown after a gap, the turns started elsewhere (another cell, a
        widget, the panel) between the view's previous turn and it; empty for a view of every
        turn."""
        if self._own is None:
            return {}
        return gaps(self.shown_turns(), self.transcript.turns)

    def elsewhere_marker(self, turn: int) -> Elsewhere | None:
        """The marker shown right before ``turn`` (``None``: no turns started elsewhere
        before it)."""
        between = self.elsewhere_turns().get(turn)
        return None if not between else self._elsewhere.get(tuple(between))

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

    def _changed(self, _kind: str, items: frozenset[int]) -> None:
        if items:
            self._dirty.update(items)
            self.throttle.poke()

    def _toggled(self, _change: Any) -> None:
        self._earlier_shown = None
        self._render_earlier(self.earlier_turns(), set())

    def render(self) -> None:
        """Send the items that changed since the last render (idempotent)."""
        dirty, self._dirty = self._dirty, set()
        transcript = self.transcript
        items = transcript.items
        dirty_turns = {items[i].turn for i in dirty}
        shown = self.shown_turns()
        added = False
        for turn in shown:
            new = turn not in self._turns
            if self._finished(turn):
                self._seal(turn, new or turn in dirty_turns)
            elif new:
                self._fill(turn)
            added = added or new
        changed_turns: set[int] = set()
        live = {t for t in shown if t not in self._sealed}
        for i in sorted(dirty):
            item = items[i]
            if item.turn not in live or i in self._settled.of:
                continue  # a settled item, once shown, never changes
            if i not in self._widgets and i not in self._streams:
                changed_turns.add(item.turn)  # a new item: its turn's children change
            elif self._update(item) or self._subagents.due(item):
                changed_turns.add(item.turn)
        for turn in changed_turns:
            self._fill(turn)
        if added:
            self._lay_out()
        if self._own is not None:
            self._render_earlier(self.earlier_turns(), dirty_turns)
            for marker in self._elsewhere.values():
                marker.refresh(dirty_turns)
        self._subagents.sync(items[i] for i in dirty)
        self._spare.blank()  # after the layout: what it released is shown nowhere now

    def _lay_out(self) -> None:
        """The body's children: each turn box, preceded by the marker of the turns started
        elsewhere since the view's previous turn (markers are kept while their turns stay)."""
        between_turns = self.elsewhere_turns()
        kept: dict[tuple[int, ...], Elsewhere] = {}
        children: list[widgets.Widget] = []
        for turn in sorted(self._turns):
            between = between_turns.get(turn)
            if between:
                key = tuple(between)
                marker = self._elsewhere.pop(key, None)
                if marker is None:
                    marker = Elsewhere(between, self.transcript.turns_html)
                kept[key] = marker
                children.append(marker)
            children.append(self._turns[turn])
        for stale in self._elsewhere.values():
            stale.close()
        self._elsewhere = kept
        self.body.children = tuple(children)

    def _finished(self, turn: int) -> bool:
        t = self.transcript
        return turn < t.turn or (turn == t.turn and t.turn_ended is not None)

    def _seal(self, turn: int, changed: bool) -> None:
        """Show finished ``turn`` as one widget per run of items between child sections (its
        item widgets, if any, are closed), then its fork button."""
        turn_items = self.transcript.turn_items.get(turn, [])
        groups, key = self._groups(turn_items)
        sealed = self._sealed.get(turn)
        if sealed is not None and sealed.key == key:
            if changed:
                for part, group in zip(sealed.parts, groups, strict=True):
                    html = "".join(item_html(i) for i in group)
                    if part.value != html:
                        part.value = html
            return
        if sealed is not None:  # a child section appeared in a finished turn: cut again
            for part in sealed.parts:
                part.close()
        parts = [self._spare.html("".join(item_html(i) for i in group), ITEM) for group in groups]
        self._sealed[turn] = _Sealed(parts, key)
        self._turn_changed(turn)
        for item in turn_items:
            self._settled.drop(item.index)
            stream = self._streams.pop(item.index, None)
            if stream is not None:
                stream.close()
            old = self._widgets.pop(item.index, None)
            if old is not None:
                self._spare.release(old, ITEM)

    def _groups(self, turn_items: list[Item]) -> tuple[list[list[Item]], tuple[str, ...]]:
        """``turn_items`` cut after each call with a child section; the calls' ids."""
        groups: list[list[Item]] = [[]]
        key: list[str] = []
        for item in turn_items:
            groups[-1].append(item)
            section = self._subagents.section_for(item)
            if section is not None:
                key.append(section.call_id)
                groups.append([])
        if len(groups) > 1 and not groups[-1]:
            groups.pop()
        return groups, tuple(key)

    def _turn_changed(self, turn: int) -> None:
        """Lay out finished ``turn``'s box again: its parts, sections and fork widgets."""
        sealed = self._sealed.get(turn)
        if sealed is None:
            return
        children: list[widgets.Widget] = []
        for k, part in enumerate(sealed.parts):
            children.append(part)
            if k < len(sealed.key):
                children.append(self._subagents.sections[sealed.key[k]])
        children.extend(self.forks.widgets_of(turn))
        self._turn_box(turn, children)

    def _fill(self, turn: int) -> None:
        """Lay out live ``turn``'s box: a widget per item, one per run of settled items (see
        :class:`Settled`), each child section under its call."""
        children: list[widgets.Widget] = []
        run: list[Item] = []
        for item in self.transcript.turn_items.get(turn, []):
            if item.kind in SETTLED:
                run.append(item)
                continue
            if run:
                children.append(self._settled.widget(run))
                run = []
            if item.index not in self._widgets and item.index not in self._streams:
                self._update(item)
            children.append(self._widget_of(item))
            section = self._subagents.section_for(item)
            if section is not None:
                children.append(section)
        if run:
            children.append(self._settled.widget(run))
        self._turn_box(turn, children)

    def _turn_box(self, turn: int, children: list[widgets.Widget]) -> None:
        """Give ``turn``'s box these children; a new box opens with them (one message)."""
        box = self._turns.get(turn)
        if box is None:
            self._turns[turn] = widgets.VBox(
                children=tuple(children),
                layout=self._turn_layout,
                _dom_classes=("agentloop-turn",),
            )
        elif box.children != tuple(children):
            box.children = tuple(children)

    def _widget_of(self, item: Item) -> widgets.Widget:
        stream = self._streams.get(item.index)
        return stream.widget if stream is not None else self._widgets[item.index]

    def _update(self, item: Item) -> bool:
        """Render one (changeable) item into its widget(s); returns whether the widget the turn
        shows for it was replaced."""
        i = item.index
        if item.kind in STREAMED and item.data.get("streaming"):
            stream = self._streams.get(i)
            if stream is None:
                stream = self._streams[i] = Stream(item.kind, self._spare)
            return stream.update(item.text_from)
        stream = self._streams.pop(i, None)
        html = item_html(item)
        w = self._widgets.get(i)
        if stream is not None:  # finished: one widget with its Markdown replaces the segments
            lone = stream.finish()
            if lone is not None and w is None:  # shows the Markdown in place: same children
                restyle(lone, html, stream.classes, ITEM)
                self._widgets[i] = lone
                return False
            if lone is not None:
                self._spare.release(lone, stream.classes)
        if w is None:
            w = self._widgets[i] = self._spare.html(html, ITEM)
        elif w.value != html:
            w.value = html
        return stream is not None

    # -- sub-agents ---------------------------------------------------------------------------

    def _child_view(self, session: Any) -> SessionView:
        view = SessionView(session, interval=self.throttle.interval, on_fork=self._on_fork)
        view._subagents.join(self._subagents)
        return view

    def _child_noted(self, call_id: str) -> None:
        item = self.transcript.call(call_id)
        if item is not None:
            self._dirty.add(item.index)
            self.throttle.poke()

    def child_section(self, call_id: str) -> ChildSection | None:
        """The child section under call ``call_id`` (``None``: none shown)."""
        return self._subagents.sections.get(call_id)

    @property
    def child_sections(self) -> dict[str, ChildSection]:
        """Every child section shown, by call id."""
        return dict(self._subagents.sections)

    # -- forks --------------------------------------------------------------------------------

    def fork_button(self, turn: int) -> widgets.Button | None:
        """Finished ``turn``'s "fork from here" button (``None``: not shown or not ended)."""
        return self.forks.buttons.get(turn)

    def fork_turn(self, turn: int) -> asyncio.Task[Any] | None:
        """What ``turn``'s "fork from here" button does (see :meth:`TurnForks.fork`)."""
        return self.forks.fork(turn)

    def fork_notice(self, turn: int) -> str:
        """The outcome line of ``turn``'s last fork, as text (``""`` before a click)."""
        return self.forks.notice_text(turn)

    # -- earlier turns ------------------------------------------------------------------------

    def _render_earlier(self, earlier: list[int], dirty_turns: set[int]) -> None:
        n = len(earlier)
        toggle = self.earlier_toggle
        opened = toggle.value
        label = f"{'▾' if opened else '▸'} {n} earlier turn{'' if n == 1 else 's'}"
        if toggle.description != label:
            toggle.description = label
        display = None if n else "none"
        if toggle.layout.display != display:
            toggle.layout.display = display
        if not opened or not n:
            if self.earlier.layout.display != "none":
                self.earlier.layout.display = "none"
            if self.earlier.value:
                self.earlier.value = ""  # closed: nothing to keep up to date
            self._earlier_shown = None
            return
        key = tuple(earlier)
        if key != self._earlier_shown or dirty_turns.intersection(earlier):
            self.earlier.value = self.transcript.turns_html(earlier)
            self._earlier_shown = key
        self.earlier.layout.display = None

    def turn_html(self, turn: int) -> str:
        """What the widgets of ``turn`` show, as HTML ("" for a turn not shown; child
        sections and fork buttons are not part of it)."""
        box = self._turns.get(turn)
        if box is None:
            return ""
        sealed = self._sealed.get(turn)
        if sealed is not None:
            return "".join(str(part.value) for part in sealed.parts)
        parts = []
        for item in self.transcript.turn_items.get(turn, []):
            run = self._settled.html(item.index)
            if run is not None:
                parts.append(run)
                continue
            stream = self._streams.get(item.index)
            if stream is not None:
                parts.append(f'<div class="{" ".join(stream.classes)}">{stream.html}</div>')
            elif item.index in self._widgets:
                parts.append(self._widgets[item.index].value)
        return "".join(parts)

    def static_html(self, turns: Iterable[int] | None = None) -> str:
        """The HTML of ``turns`` (default: the turns shown) for a static copy of the view:
        the transcript, with each child view built so far (open, or opened once) as a
        ``<details>`` under its call, its own children nested the same way, and (default
        ``turns`` only) the turns started elsewhere between two shown turns as a collapsed
        ``<details>`` at their place."""
        shown = self.shown_turns() if turns is None else sorted(set(turns))
        elsewhere = self.elsewhere_turns() if turns is None else {}
        sections = self._subagents.sections
        out = []
        for turn in shown:
            between = elsewhere.get(turn)
            if between:
                out.append(
                    '<details class="agentloop-box agentloop-elsewhere-static">'
                    f"<summary>{escape(elsewhere_label(len(between)))}</summary>"
                    f"{self.transcript.turns_html(between)}</details>"
                )
            for item in self.transcript.turn_items.get(turn, ()):
                out.append(item_html(item))
                section = (
                    sections.get(item.data.get("call_id", "")) if item.kind == "tool" else None
                )
                if section is not None and section.view is not None:
                    out.append(
                        '<details class="agentloop-box agentloop-child-static">'
                        f"<summary>{escape(section.title)}</summary>"
                        f"{section.view.static_html()}</details>"
                    )
        return "".join(out)

    @property
    def turn_htmls(self) -> list[str]:
        """:meth:`turn_html` of each turn shown, in order."""
        return [self.turn_html(t) for t in sorted(self._turns)]

    @property
    def html(self) -> str:
        """The HTML of the turns shown (earlier turns excluded), as the widgets show it."""
        return "".join(self.turn_htmls)

    @property
    def text(self) -> str:
        """The plain-text transcript of the turns shown (every event folded so far, rendered
        or not); a view limited to its own turns starts with an ``(N earlier turns)`` line."""
        if self._own is None:
            return self.transcript.text()
        n = len(self.earlier_turns())
        parts = [f"({n} earlier turn{'' if n == 1 else 's'})" if n else ""]
        elsewhere = self.elsewhere_turns()
        for turn in self.shown_turns():
            if turn in elsewhere:
                parts.append(f"({elsewhere_label(len(elsewhere[turn]))})")
            parts.append(self.transcript.turns_text([turn]))
        return "\n".join(p for p in parts if p)

    # -- lifetime -----------------------------------------------------------------------------

    def flush(self) -> None:
        """Render everything pending now, child views included (tests; normally the
        throttles do it)."""
        self.throttle.flush()
        self._subagents.flush()

    async def settled(self) -> None:
        """Return once this view and its open child views rendered what they were told so
        far, and the forks clicked so far are made (no sleeping)."""
        await self.throttle.settled()
        await self._subagents.settled()
        await self.forks.settled()

    def close_subscriptions(self) -> None:
        """Stop following the session (and the child sessions); the widgets keep their last
        state."""
        self.throttle.close()
        self._off_feed()
        if self._owns_feed:
            self.feed.close()
        self._subagents.stop()

    def close(self) -> None:
        if hasattr(self, "_off_feed"):  # Widget.__del__ may call close on a half-built view
            self.close_subscriptions()
            for stream in self._streams.values():
                stream.close()
            self._settled.close()
            self._spare.close()
            self._subagents.close()
            self.forks.close()
            parts = [p for s in self._sealed.values() for p in s.parts]
            for w in (*self._widgets.values(), *parts, *self._turns.values()):
                w.close()
            for marker in self._elsewhere.values():
                marker.close()
            self.jump.close()
            self._turn_layout.close()
            self._part_style.close()
        super().close()

    def __repr__(self) -> str:
        return f"<SessionView {self.session.id!r}>\n{self.text}"


__all__ = ["SEGMENT", "SessionView"]
