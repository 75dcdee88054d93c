"""``%agent panel``: the Agents panel as an ordinary output, for front ends without the
JupyterLab extension (classic notebook, VS Code, Voila) — and in JupyterLab too.

It shows what the extension's side panel shows: every agent of the kernel (name, state, model,
turns, tokens, cost) updated live, a Create button while there is none, the selected agent's
live ``AgentView`` (the very widget model ``%agent show NAME`` displays and the side panel
renders, so approvals, Cancel and the inbox work from here too) and a prompt box: Enter sends
(Shift+Enter: a new line), a mode switch chooses follow-up, steer or inject, Stop cancels the
running turn. Everything goes through the kernel state's ``AgentsPanel``, so a prompt sent
here is logged exactly like one from the side panel or a ``%%agent`` cell.
"""

from __future__ import annotations

import argparse
from html import escape
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from .._panel import AgentRow, PanelError
from .._state import KernelState

__all__ = ["PanelWidget", "add_panel_parser", "run_panel_command"]

_MODES = (("Follow-up", "followup"), ("Steer", "steer"), ("Inject", "inject"))
_EMPTY = (
    "<div class='agentloop-panel-empty'>No agent in this kernel yet. Create one with "
    "<code>%agent create NAME --notebook</code> in a cell, or with the button:</div>"
)
_STYLE = """<style>
.agentloop-panel-table{border-collapse:collapse;font-family:var(--jp-ui-font-family);
font-size:var(--jp-ui-font-size1);color:var(--jp-ui-font-color1)}
.agentloop-panel-table th,.agentloop-panel-table td{padding:2px 10px 2px 0;text-align:left;
border-bottom:1px solid var(--jp-border-color2)}
.agentloop-panel-table th{color:var(--jp-ui-font-color2);font-weight:normal}
.agentloop-panel-table td.agentloop-num{text-align:right}
.agentloop-panel-empty{color:var(--jp-ui-font-color1);font-family:var(--jp-ui-font-family)}
</style>"""


def add_panel_parser(sub: Any) -> None:
    """``%agent panel``."""
    sub.add_parser(
        "panel",
        help="display the Agents panel (every agent, a live view, a prompt box) as an output",
        description="Display the Agents panel as an ordinary output: the kernel's agents with "
        "their state, model, turns, tokens and cost, the selected agent's live view and a "
        "prompt box (Enter sends, Shift+Enter a new line). The JupyterLab extension shows the "
        "same in the right sidebar.",
    )


def run_panel_command(state: KernelState, _args: argparse.Namespace) -> None:
    """Run ``%agent panel``: display a new :class:`PanelWidget`."""
    display(PanelWidget(state))


def _cost(cost: float | None) -> str:
    return "?" if cost is None else f"${cost:.4f}"


def rows_text(rows: list[AgentRow]) -> str:
    """The roster as a plain-text table (what a front end without widgets shows)."""
    if not rows:
        return "no agents in this kernel: %agent create NAME --notebook, or the Create button"
    table = [("NAME", "STATE", "MODEL", "TURNS", "TOKENS", "COST")]
    table += [(r.name, r.state, r.model, str(r.turns), str(r.tokens), _cost(r.cost)) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    )


def rows_html(rows: list[AgentRow]) -> str:
    """The roster as an HTML table (theme colours only)."""
    head = "".join(f"<th>{h}</th>" for h in ("agent", "state", "model", "turns", "tokens", "cost"))
    body = "".join(
        f"<tr class='agentloop-panel-row' data-agent='{escape(r.name)}'>"
        f"<td><b>{escape(r.name)}</b></td><td>{escape(r.state)}</td><td>{escape(r.model)}</td>"
        f"<td class='agentloop-num'>{r.turns}</td><td class='agentloop-num'>{r.tokens}</td>"
        f"<td class='agentloop-num'>{escape(_cost(r.cost))}</td></tr>"
        for r in rows
    )
    return f"<table class='agentloop-panel-table'><tr>{head}</tr>{body}</table>"


class PanelWidget(widgets.VBox):
    """The Agents panel as ipywidgets over ``state.panel`` (see the module docstring).

    ``picker.value`` is the selected agent's name; ``prompt`` the text box (``submit()`` does
    what Enter does), ``mode`` the follow-up/steer/inject switch, ``create_button``,
    ``send_button`` and ``stop_button`` the buttons, ``notice`` the line that reports a
    problem. ``close()`` stops following the roster."""

    def __init__(self, state: KernelState) -> None:
        super().__init__()
        self.add_class("agentloop-panel")
        self.state = state
        self.panel = state.panel
        self.rows: list[AgentRow] = []
        self.table = widgets.HTML()
        self.empty = widgets.HTML(_EMPTY)
        self.create_button = widgets.Button(description="Create an agent", button_style="primary")
        self.create_button.add_class("agentloop-panel-create")
        self.create_button.on_click(lambda _b: self._on_create())
        self.picker = widgets.Dropdown(description="agent", options=[])
        self.picker.observe(lambda _change: self._show_selected(), names="value")
        self.view_box = widgets.VBox()
        from ..view import PromptBox  # anywidget loads with the first view

        self.prompt = PromptBox(
            placeholder="message the selected agent… (Enter sends, Shift+Enter: new line)",
            enter_sends=True,
        )
        self.prompt.on_submit(lambda _text: self._on_send())
        self.mode = widgets.ToggleButtons(options=_MODES, value="followup")
        self.send_button = widgets.Button(description="Send", button_style="primary")
        self.send_button.on_click(lambda _b: self._on_send())
        self.stop_button = widgets.Button(description="Stop", button_style="warning")
        self.stop_button.on_click(lambda _b: self._on_stop())
        self.notice = widgets.HTML()
        self.controls = widgets.VBox(
            [self.prompt, widgets.HBox([self.mode, self.send_button, self.stop_button])]
        )
        self._shown: Any = None
        self._off = self.panel.on_change(self._on_rows)
        self._on_rows(self.panel.rows())

    # -- the roster -------------------------------------------------------------------------

    def _on_rows(self, rows: list[AgentRow]) -> None:
        self.rows = rows
        names = [r.name for r in rows]
        self.table.value = _STYLE + (rows_html(rows) if rows else "")
        if list(self.picker.options) != names:
            keep = self.picker.value if self.picker.value in names else None
            self.picker.options = names
            self.picker.value = keep if keep is not None else (names[0] if names else None)
        children: tuple[widgets.Widget, ...] = (
            (self.table, self.picker, self.view_box, self.controls, self.notice)
            if rows
            else (self.table, self.empty, self.create_button, self.notice)
        )
        if tuple(self.children) != children:  # type: ignore[has-type]
            self.children = children
        self._show_selected()

    def _show_selected(self) -> None:
        name = self.picker.value
        try:
            agent = self.panel.agent(name) if name else None
        except PanelError:
            agent = None
        if agent is self._shown:
            return
        self._shown = agent
        self.view_box.children = () if agent is None else (self.state.view(agent),)

    # -- actions ----------------------------------------------------------------------------

    def _on_create(self) -> None:
        try:
            name = self.panel.create()
        except PanelError as exc:
            self._say(str(exc))
            return
        self._say("")
        self._on_rows(self.panel.rows())
        self.picker.value = name

    def _on_send(self) -> None:
        name = self.picker.value
        if not name:
            self._say("create or select an agent first")
            return
        try:
            self.panel.prompt(name, self.prompt.value, mode=self.mode.value)
        except PanelError as exc:
            self._say(str(exc))
            return
        self.prompt.value = ""
        self._say("")

    def _on_stop(self) -> None:
        name = self.picker.value
        if not name:
            return
        try:
            cancelled = self.panel.cancel(name)
        except PanelError as exc:
            self._say(str(exc))
            return
        self._say("" if cancelled else f"{name} is idle: nothing to cancel")

    def _say(self, text: str) -> None:
        self.notice.value = f'<span class="agentloop-notice">{escape(text)}</span>' if text else ""

    def close(self) -> None:
        self._off()
        super().close()

    def __repr__(self) -> str:
        return f"<Agents panel>\n{rows_text(self.rows)}"
