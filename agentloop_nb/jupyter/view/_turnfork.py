"""The "fork from here" button: one small button per finished turn of a session view.

Clicking the button of turn ``N`` forks the session at the end of that turn: ``at_seq`` is the
seq of turn ``N``'s ``turn/end`` event, so the fork holds every message of turns ``1..N`` and
nothing of later ones (a turn's end follows its last result, so the cut never splits a tool
call from its result). The fork is made through the root context's ``ctx.agents.fork`` (the
App owns the new agent, not the source agent: disposing the source leaves the fork alive).

The outcome is a line under the turn: the new agent's id and how to reach it (the variable an
``on_fork`` callback bound it to, e.g. the notebook extension's, else
``ctx.agents.get("ID")``), or why the fork failed. Nothing is ever raised into the front end.

Cheap by construction: all buttons of a view share one ``Layout`` and one ``ButtonStyle``, so a
finished turn costs one more widget model; the outcome line is created on the first click.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from html import escape, unescape
from typing import Any

import ipywidgets as widgets

__all__ = ["FORK_LABEL", "OnFork", "TurnForks"]

FORK_LABEL = "fork from here"

OnFork = Callable[[Any], "str | None"]
"""``on_fork(agent) -> name``: called with each agent a fork button created; returns the name
it is reachable by (e.g. the variable it was bound to) or ``None``."""


class TurnForks:
    """The fork buttons of one view's finished turns, their outcome lines and running forks.

    ``root`` is the context whose ``agents.fork`` is called; ``seq_of(turn)`` the turn's
    ``turn/end`` seq (``None``: not ended); ``changed(turn)`` is told when a turn's widgets
    change (an outcome line appeared)."""

    def __init__(
        self,
        session_id: str,
        root: Any,
        seq_of: Callable[[int], int | None],
        changed: Callable[[int], None],
        on_fork: OnFork | None = None,
    ) -> None:
        self.session_id = session_id
        self.root = root
        self.on_fork = on_fork
        self._seq_of = seq_of
        self._changed = changed
        self._layout = widgets.Layout(width="auto", align_self="flex-start")
        self._style = widgets.ButtonStyle()
        self.buttons: dict[int, widgets.Button] = {}
        self.notices: dict[int, widgets.HTML] = {}
        self.forks: dict[int, Any] = {}
        """The last agent each turn's button created."""
        self._tasks: set[asyncio.Task[Any]] = set()

    def widgets_of(self, turn: int) -> tuple[widgets.Widget, ...]:
        """The button (and the outcome line, once there is one) of finished ``turn``; none
        for a turn whose end is not logged."""
        if self._seq_of(turn) is None:
            return ()
        button = self.buttons.get(turn)
        if button is None:
            button = self.buttons[turn] = widgets.Button(
                description=FORK_LABEL,
                tooltip=f"fork this session at the end of turn {turn}",
                layout=self._layout,
                style=self._style,
            )
            button.add_class("agentloop-fork")
            button.on_click(lambda _b, t=turn: self.fork(t))
        notice = self.notices.get(turn)
        return (button,) if notice is None else (button, notice)

    def fork(self, turn: int) -> asyncio.Task[Any] | None:
        """What turn ``turn``'s button does: fork at its ``turn/end`` seq, in a task (returned;
        its result is the new agent, or ``None`` when the fork failed, which the outcome line
        says). Returns ``None`` (after saying why) when the turn has not ended or no event
        loop runs."""
        seq = self._seq_of(turn)
        if seq is None:
            self._say(turn, f"turn {turn} has not ended: nothing to fork yet", error=True)
            return None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._say(turn, "fork needs the notebook's running event loop", error=True)
            return None
        self._say(turn, f"forking at the end of turn {turn} (seq {seq})…")
        task = loop.create_task(self._fork(turn, seq))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _fork(self, turn: int, seq: int) -> Any:
        try:
            handle = await self.root.agents.fork(self.session_id, at_seq=seq)
        except Exception as exc:  # refused (closed App, vetoed, persistence): shown, not raised
            self._say(turn, f"fork from turn {turn} failed: {exc}", error=True)
            return None
        agent = handle.agent
        self.forks[turn] = agent
        name: str | None = None
        if self.on_fork is not None:
            try:
                name = self.on_fork(agent)
            except Exception as exc:
                self._say(turn, f"forked as {agent.id}, but naming it failed: {exc}", error=True)
                return agent
        reach = name if name else f'ctx.agents.get("{agent.id}")'
        self._say(turn, f"forked turn {turn} (at seq {seq}) as {name or agent.id}: use {reach}")
        return agent

    def _say(self, turn: int, text: str, *, error: bool = False) -> None:
        css = "agentloop-fork-notice" + (" agentloop-notice" if error else " agentloop-muted")
        html = f'<div class="{css}">{escape(text)}</div>'
        notice = self.notices.get(turn)
        if notice is None:
            notice = self.notices[turn] = widgets.HTML(value=html)
            self._changed(turn)
        elif notice.value != html:
            notice.value = html

    def notice_text(self, turn: int) -> str:
        """The outcome line of ``turn`` as plain text (``""`` before a click)."""
        notice = self.notices.get(turn)
        if notice is None:
            return ""
        return unescape(re.sub(r"<[^>]+>", "", str(notice.value)))

    async def settled(self) -> None:
        """Wait for the forks clicked so far to finish (their outcome lines are final)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def drop(self, turn: int) -> None:
        """Forget ``turn``'s widgets (closed)."""
        for store in (self.buttons, self.notices):
            w = store.pop(turn, None)
            if w is not None:
                w.close()

    def close(self) -> None:
        """Cancel forks still being made and close every widget."""
        for task in tuple(self._tasks):
            task.cancel()
        for turn in {*self.buttons, *self.notices}:
            self.drop(turn)
        self._layout.close()
        self._style.close()
