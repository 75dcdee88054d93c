"""The fix flow: the turn ``%agent fix NAME [CELL]`` and the "Fix with agent" button start.

Beside ``_state`` in the kernel-state layer (the notebook room cannot import the state, the
magics sit above it); ``_extension`` wires :func:`fix_listener` to the notebook bridge's
actions on ``%load_ext``, ``%agent fix`` (``magics/_fix.py``) calls :func:`fix_message`.

- The message (:func:`fix_message`): the failed cell's autopsy, then :data:`FIX_REQUEST`
  (which starts with ``fix``, the offline model's command).
- The agent of a button click (:func:`choose_agent`): the one the action names. The front end
  does not ask which agent (its button sends no name), so with none named the kernel takes the
  notebook-enabled agent (one offered ``replace_cell``) that was active most recently (the
  newest event in its session log); with none, it creates one the way ``%agent create fixer
  --notebook`` does (the ``%agent create`` defaults: the offline provider, model ``demo``;
  kernel tools and notebook tools, every edit asked for), bound to ``fixer`` (``fixer2``, ...
  when the name is taken).
- The outcome goes back to the page as a ``notice`` message (docs/notebook-bridge.md) naming
  the cell: which agent took it and where its approval waits, or what went wrong. Nothing a
  click causes ever raises into the comm machinery or a cell.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..messages import TextBlock
from ._state import KernelState, UserError
from .kernel import add_kernel_tools
from .notebook import FixAction, notebook_tools

__all__ = [
    "AUTOPSY_CHARS",
    "FIXER_NAME",
    "FIX_REQUEST",
    "FixStarted",
    "choose_agent",
    "fix_listener",
    "fix_message",
    "start_fix",
]

_log = logging.getLogger("agentloop_nb.notebook")

#: Bound of the autopsy a fix request carries.
AUTOPSY_CHARS = 6000
FIX_REQUEST = (
    "fix: the cell above failed. Find the cause from the autopsy, then correct the cell: "
    "replace it with replace_cell and run it with run_cell when you have those tools, "
    "otherwise run the corrected code with run_python. Say what was wrong in one sentence."
)
#: The name of the agent a click creates when the kernel has no notebook-enabled agent.
FIXER_NAME = "fixer"

Push = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class FixStarted:
    """A fix request queued: the ``agent``, its ``name``, whether it was ``created`` for it,
    the id of the queued ``message`` and a ``note`` for the person ('' when none)."""

    agent: Any
    name: str
    created: bool
    message_id: str
    note: str = ""

    def describe(self) -> str:
        """One line for the page: who took the fix and where its approval waits."""
        made = (
            f"created agent {self.name} ({self.agent.options.provider}/"
            f"{self.agent.options.model}, kernel and notebook tools); "
            if self.created
            else ""
        )
        return (
            f"{made}{self.name} is fixing this cell: approve its edit in its view "
            f"(%agent show {self.name})" + (f"; note: {self.note}" if self.note else "")
        )


def fix_message(
    state: KernelState, cell: str | None, *, command: str = "%agent fix"
) -> list[TextBlock]:
    """The blocks of a fix request for ``cell`` (an id or an execution count; default: the
    last failure). Raises :class:`UserError`, prefixed ``command``, when no failure of that
    cell is kept."""
    memory = state.memory_or_fail(command)
    autopsy = memory.autopsy(cell)
    if autopsy is None:
        what = f"cell {cell!r}" if cell else "any cell"
        raise UserError(
            f"{command}: no failure is kept for {what} (kept: "
            f"{memory.autopsies.describe_kept()}); a cell's autopsy is dropped when it next "
            "succeeds"
        )
    return [TextBlock(text=autopsy.render(AUTOPSY_CHARS) + "\n\n"), TextBlock(text=FIX_REQUEST)]


def has_tool(agent: Any, name: str) -> bool:
    """Whether ``name`` is among the tools ``agent`` is offered."""
    return agent.ctx.tools.lookup(name, agent) is not None


def _last_active(agent: Any) -> float:
    events = agent.session.events
    return float(events[-1].time) if len(events) else float(agent.session.header.created_at)


def choose_agent(state: KernelState) -> tuple[Any, str, bool]:
    """``(agent, name, created)`` for a fix request that names no agent: the most recently
    active bound agent offered ``replace_cell``; with none, a new notebook-enabled agent (see
    the module docstring). Raises :class:`UserError` when it cannot be created."""
    enabled = [(n, a) for n, a in state.names.items() if has_tool(a, "replace_cell")]
    if enabled:
        # Ties (same clock tick) go to the later binding.
        _, (chosen_name, chosen) = max(
            enumerate(enabled), key=lambda item: (_last_active(item[1][1]), item[0])
        )
        return chosen, chosen_name, False
    name = state.free_name(FIXER_NAME)
    try:  # the provider and model configure(default_provider=, default_model=) named
        agent = state.app.agent_loop.create(name, state.default_options())
    except Exception as exc:
        raise UserError(f"Fix with agent: could not create agent {name!r}: {exc}") from None
    state.bind(name, agent)
    add_kernel_tools(agent, run="ask")
    notebook_tools(agent, edit="ask", shell=state.shell)
    return agent, name, True


def start_fix(
    state: KernelState, cell: str | None, agent_name: str = "", *, command: str = "Fix with agent"
) -> FixStarted:
    """Queue the fix request of ``cell`` (default: the last failure) as a follow-up of the
    agent bound to ``agent_name``, or with no name of :func:`choose_agent`'s. Raises
    :class:`UserError` (prefixed ``command``) for an unknown agent or when no failure of the
    cell is kept; no agent is created then."""
    named = state.agent(agent_name) if agent_name else None
    blocks = fix_message(state, cell, command=command)
    if named is not None:
        agent, name, created = named, agent_name, False
    else:
        agent, name, created = choose_agent(state)
    message = agent.followup(blocks)
    note = ""
    if not any(has_tool(agent, n) for n in ("run_python", "replace_cell")):
        note = (
            f"{name} has neither the kernel tools nor the notebook tools, so it can only "
            f"explain the error (give it tools with %agent create {name} --notebook)"
        )
    return FixStarted(agent, name, created, str(message.id), note)


def fix_listener(state: KernelState, push: Push) -> Callable[[Any], None]:
    """The notebook bridge's action listener for ``fix``: start the fix of the action's cell
    and ``push`` a ``notice`` (level ``info`` or ``error``, the action's ``cell_id``) saying
    what happened. Other actions are ignored; nothing raises."""

    def on_action(action: Any) -> None:
        if not isinstance(action, FixAction):
            return
        level = "info"
        try:
            text = start_fix(state, action.cell_id, action.agent).describe()
        except UserError as exc:
            level, text = "error", str(exc)
        except Exception as exc:  # a bug must not become a traceback in a cell
            _log.exception("Fix with agent: starting the fix of %s failed", action.cell_id)
            level, text = "error", f"Fix with agent failed: {type(exc).__name__}: {exc}"
        try:
            push({"type": "notice", "level": level, "text": text, "cell_id": action.cell_id})
        except Exception:
            _log.exception("Fix with agent: telling the page failed")

    return on_action
