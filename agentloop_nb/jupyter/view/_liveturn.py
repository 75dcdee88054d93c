"""The widgets of a live turn's items (what :class:`SessionView` shows until the turn ends).

A new turn's first render used to open one widget per item plus a wrapper per streaming text:
five ``comm_open``s for a turn that starts with a user message and a streamed answer (the turn
box, its start line, the message, the stream's box, its segment). Each is a comm channel and
a model built in the kernel and in the front end, and twenty views starting their turns
together paid it twenty times in a row. So:

- :class:`Settled`: consecutive items that never change once folded (:data:`SETTLED`: the
  turn's start line, user messages, errors, retries...) share one HTML widget. A run grows
  only at the turn's end (items are appended), and only a growing run is sent again.
- :class:`Stream`: a streaming text is one HTML widget carrying the stream's classes while it
  fits in one segment (most answers); only when a second segment opens does it get its
  wrapper box, the first widget moving into it as a plain segment.
- :class:`Spare`: the HTML widgets a sealed turn no longer shows are kept (a few), blanked,
  and given the next turn's items: a new value and classes are one update, where a new widget
  is a model built on both sides. A finished answer takes over its lone segment's widget in
  place.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape

import ipywidgets as widgets
from ipywidgets.widgets.widget_string import HTMLStyle

from ..fold import Item, item_html

SEGMENT = 16384
"""Characters of streaming text per segment widget (what one render sends at most). Opening a
segment (a widget, its comm, the box's new children) costs about ten times a tail update, so
segments are long: most answers fit in one, and a long stream opens a new one rarely."""
STREAMED = frozenset({"assistant", "reasoning"})
"""Item kinds whose text streams (shown through a :class:`Stream` while it does)."""
SETTLED = frozenset({"turn-start", "user", "usage", "compaction", "error", "retry", "turn-end"})
"""Item kinds the transcript never changes after adding them (it touches only the blocks of a
step and tool calls again), so several of them in a row can be one widget."""

ITEM = ("agentloop-item",)
"""The classes of a widget showing finished items (a run, a call, an answer, a sealed turn)."""
SEGMENT_CLASSES = ("agentloop-segment",)
"""The classes of a segment inside a streaming text's wrapper box."""
SPARE = 8
"""HTML widgets a view keeps for reuse (a turn's live widgets: its runs, streams and calls)."""


class Spare:
    """A view's HTML widgets: new ones, or ones it no longer shows, reused.

    ``shared``: the layout and style every widget of the view uses (a widget of its own would
    be two more comm channels per widget). ``html(value, classes)`` is a widget showing
    ``value`` with ``classes``; ``release(w, classes)`` takes back a widget the view no longer
    shows (``classes``: the ones it has; kept up to :data:`SPARE`, closed past that);
    ``blank()`` empties the kept widgets released since its last call (the view calls it at
    the end of each render, once nothing shows them any more: a kept widget holds no stale
    text, in the kernel or the front end, and one reused within the render is not sent
    twice); ``close()`` closes the ones kept.
    """

    __slots__ = ("kept", "layout", "stale", "style")

    def __init__(self, shared: tuple[widgets.Layout, HTMLStyle]) -> None:
        self.layout, self.style = shared
        self.kept: list[tuple[widgets.HTML, tuple[str, ...]]] = []
        self.stale = False  # a widget was released since the last blank()

    def html(self, value: str, classes: tuple[str, ...]) -> widgets.HTML:
        kept = self.kept
        if kept:
            # One with these classes if any: changing classes is one traitlets change each.
            k = next((k for k in range(len(kept) - 1, -1, -1) if kept[k][1] == classes), -1)
            w, had = kept.pop(k)
            restyle(w, value, had, classes)
            return w
        # Value and classes given at construction travel in the comm_open: each add_class
        # afterwards would be one more comm message.
        return widgets.HTML(value=value, layout=self.layout, style=self.style, _dom_classes=classes)

    def release(self, w: widgets.HTML, classes: tuple[str, ...]) -> None:
        if len(self.kept) < SPARE:
            self.kept.append((w, classes))
            self.stale = True
        else:
            w.close()

    def blank(self) -> None:
        if self.stale:
            self.stale = False
            for w, _ in self.kept:
                if w.value:
                    w.value = ""

    def close(self) -> None:
        for w, _ in self.kept:
            w.close()
        self.kept.clear()


def restyle(w: widgets.HTML, value: str, had: tuple[str, ...], classes: tuple[str, ...]) -> None:
    """Give ``w`` (with classes ``had``) ``value`` and ``classes``, in one message."""
    with w.hold_sync():
        w.value = value
        for c in had:
            if c not in classes:
                w.remove_class(c)
        for c in classes:
            if c not in had:
                w.add_class(c)


class Stream:
    """The widget(s) of one streaming text: full segments (sent once) and a growing tail.

    ``widget`` is what the turn shows: the lone segment (with the stream's classes) while the
    text fits in one, then a box of segments. ``update(read)`` shows the text ``read(start)``
    returns as ``(len(text), text[start:])`` (:meth:`Item.text_from`: only the segments not
    final yet are read, never the whole answer); it returns whether ``widget`` changed (the
    first update, and the one that opens the second segment), so the turn lays out its
    children again. A render escapes only what arrived since the last one: the tail's HTML
    is kept and grown (``html.escape`` maps each character on its own, so the escape of a
    longer text is the old escape plus the new part's).
    """

    def __init__(self, kind: str, spare: Spare) -> None:
        self.spare = spare
        self.classes = (
            "agentloop-box",
            f"agentloop-{kind}",
            "agentloop-streaming",
            "agentloop-flow",
        )
        self.box: widgets.Box | None = None  # opened with the second segment
        self.segments: list[widgets.HTML] = []
        self.frozen = 0  # segments whose text is final
        self._raw = ""  # the text the last segment shows (its escape is that widget's value)

    @property
    def widget(self) -> widgets.Widget:
        return self.box if self.box is not None else self.segments[0]

    def update(self, read: Callable[[int], tuple[int, str]]) -> bool:
        frozen = self.frozen
        n, text = read(frozen * SEGMENT)  # the text of segments ``frozen`` on (not final yet)
        full = n // SEGMENT
        segments = self.segments
        if not segments and not full:  # most answers: one widget, no wrapper
            self._raw = text
            segments.append(self.spare.html(escape(text), self.classes))
            return True
        if frozen < full and frozen < len(segments):  # the growing one filled: its last value
            w = segments[frozen]
            value = self._grown(w, text[:SEGMENT])
            if self.box is None:  # the lone widget becomes the wrapper's first segment
                restyle(w, str(w.value) if value is None else value, self.classes, SEGMENT_CLASSES)
            elif value is not None:
                w.value = value
        added = len(segments) <= full
        while len(segments) <= full:  # new segments open with their value (no extra update)
            at = (len(segments) - frozen) * SEGMENT
            self._raw = text[at : at + SEGMENT]
            segments.append(self.spare.html(escape(self._raw), SEGMENT_CLASSES))
        if not added:  # the growing segment is the same widget: send what it gained
            value = self._grown(segments[full], text)
            if value is not None:
                segments[full].value = value
        self.frozen = full
        if self.box is not None:
            if added:
                self.box.children = tuple(segments)
            return False
        if len(segments) == 1:
            return False
        self.box = widgets.Box(
            children=tuple(segments), layout=self.spare.layout, _dom_classes=self.classes
        )
        return True

    def _grown(self, w: widgets.HTML, raw: str) -> str | None:
        """The value ``w`` (the growing segment, showing ``self._raw``) takes to show ``raw``,
        ``None`` if it shows it already; ``raw`` becomes ``self._raw``."""
        old, self._raw = self._raw, raw
        if raw == old:
            return None
        if old and raw.startswith(old):  # appended to (a stream only grows): the new part only
            return str(w.value) + escape(raw[len(old) :])
        return escape(raw)

    @property
    def html(self) -> str:
        return "".join(w.value for w in self.segments)

    def finish(self) -> widgets.HTML | None:
        """Close the stream, but return a lone segment's widget (the caller shows the finished
        text in it, in place); ``None`` once wrapped (every segment is then spare)."""
        if self.box is None:
            return self.segments[0]
        self.close()
        return None

    def close(self) -> None:
        """Give the segments back to the view's :class:`Spare`; close the box."""
        classes = self.classes if self.box is None else SEGMENT_CLASSES
        for w in self.segments:
            self.spare.release(w, classes)
        if self.box is not None:
            self.box.close()


class Settled:
    """The runs of settled items (:data:`SETTLED`) of a view's live turns, one HTML widget
    per run, keyed by the index of the run's first item."""

    def __init__(self, spare: Spare) -> None:
        self.spare = spare
        self.runs: dict[int, tuple[widgets.HTML, int]] = {}  # first index -> (widget, items)
        self.of: dict[int, int] = {}  # item index -> its run's first index

    def widget(self, run: list[Item]) -> widgets.HTML:
        """The widget showing ``run`` (consecutive settled items of one turn), made or grown."""
        key = run[0].index
        known = self.runs.get(key)
        if known is not None and known[1] == len(run):
            return known[0]
        html = "".join(item_html(i) for i in run)
        if known is None:
            w = self.spare.html(html, ITEM)
        else:
            w = known[0]
            w.value = html
        self.runs[key] = (w, len(run))
        for item in run:
            self.of[item.index] = key
        return w

    def html(self, index: int) -> str | None:
        """What item ``index``'s run shows, at its first item; ``""`` at its other items;
        ``None`` for an item in no run."""
        key = self.of.get(index)
        if key is None:
            return None
        return str(self.runs[key][0].value) if key == index else ""

    def drop(self, index: int) -> None:
        """Give back the widget of the run starting at item ``index`` (its turn is sealed and
        no longer shows it), if any."""
        self.of.pop(index, None)
        run = self.runs.pop(index, None)
        if run is not None:
            self.spare.release(run[0], ITEM)

    def close(self) -> None:
        for w, _ in self.runs.values():
            w.close()
        self.runs.clear()
        self.of.clear()


__all__ = [
    "SEGMENT",
    "SETTLED",
    "STREAMED",
    "Settled",
    "Spare",
    "Stream",
    "restyle",
]
