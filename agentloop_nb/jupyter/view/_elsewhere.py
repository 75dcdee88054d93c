"""``Elsewhere``: the marker a cell's view puts between two of its own turns for the turns
started elsewhere (another cell, a widget, the panel) in between.

Collapsed it is one small toggle ("▸ 2 turns started elsewhere"); opened, it shows those turns'
transcript (rendered only while open, like the "earlier turns" toggle), so a reader of one cell
knows the conversation went on between its answers and can read what happened without leaving
the cell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import pairwise
from typing import Any

import ipywidgets as widgets


def elsewhere_label(n: int) -> str:
    """``"N turn(s) started elsewhere"``: the marker's words, shared by its text forms."""
    return f"{n} turn{'' if n == 1 else 's'} started elsewhere"


def gaps(shown: list[int], every: list[int]) -> dict[int, list[int]]:
    """For each of the sorted turns ``shown`` that follows a gap, the turns of ``every`` (all
    the session's turns, sorted) between the previous shown turn and it."""
    out: dict[int, list[int]] = {}
    for before, turn in pairwise(shown):
        if turn - before > 1:
            between = [n for n in every if before < n < turn]
            if between:
                out[turn] = between
    return out


class Elsewhere(widgets.VBox):
    """The collapsed turns ``turns`` (started elsewhere) between two turns of a cell's view.

    ``Elsewhere(turns, html_of)``: ``html_of(turns)`` renders them when the toggle is opened
    (and again through :meth:`refresh` while it stays open). ``toggle`` is the button,
    ``body`` the HTML it opens."""

    def __init__(self, turns: Iterable[int], html_of: Callable[[list[int]], str]) -> None:
        super().__init__()
        self.add_class("agentloop-elsewhere")
        self.turns = list(turns)
        self._html_of = html_of
        self.toggle = widgets.ToggleButton(
            value=False,
            tooltip="turns another cell, a widget or the panel started between this cell's turns",
            layout=widgets.Layout(width="auto", align_self="flex-start"),
        )
        self.toggle.add_class("agentloop-elsewhere-toggle")
        self.toggle.observe(self._toggled, "value")
        self.body = widgets.HTML(layout=widgets.Layout(display="none"))
        self.body.add_class("agentloop-elsewhere-turns")
        self.children = (self.toggle, self.body)
        self._show(False)

    @property
    def opened(self) -> bool:
        return bool(self.toggle.value)

    def _toggled(self, change: Any) -> None:
        self._show(bool(change["new"]))

    def _show(self, opened: bool) -> None:
        self.toggle.description = f"{'▾' if opened else '▸'} {elsewhere_label(len(self.turns))}"
        if opened:
            self.body.value = self._html_of(self.turns)
            self.body.layout.display = None
        else:
            self.body.layout.display = "none"
            self.body.value = ""  # closed: nothing to keep up to date

    def refresh(self, dirty_turns: set[int]) -> None:
        """Render again if open and one of its turns changed."""
        if self.opened and dirty_turns.intersection(self.turns):
            html = self._html_of(self.turns)
            if self.body.value != html:
                self.body.value = html

    def close(self) -> None:
        self.toggle.close()
        self.body.close()
        super().close()


__all__ = ["Elsewhere", "elsewhere_label", "gaps"]
