"""``%agent fix NAME [CELL]``: start a turn whose first message carries a failed cell's
autopsy (wired into ``_agent.py``).

``CELL`` is a cell id or an execution count (``5`` or ``[5]``); the default is the last cell
that failed. The message is two text blocks: the autopsy (see ``kernel.Autopsy.render``), then
the request, which starts with ``fix`` (the offline model's command). The agent is expected to
answer with ``replace_cell`` on the failing cell and ``run_cell`` when it has the notebook
tools, otherwise with ``run_python`` (kernel tools); the turn is shown like a ``%%agent`` cell's.
"""

from __future__ import annotations

import argparse
from typing import Any

from IPython.display import display

from ...messages import TextBlock
from .._state import KernelState, UserError

__all__ = ["FIX_REQUEST", "add_fix_parser", "fix_message", "run_fix"]

#: Bound of the autopsy a ``%agent fix`` message carries.
AUTOPSY_CHARS = 6000
FIX_REQUEST = (
    "fix: the cell above failed. Find the cause from the autopsy, then correct the cell: "
    "replace it with replace_cell and run it with run_cell when you have those tools, "
    "otherwise run the corrected code with run_python. Say what was wrong in one sentence."
)


def add_fix_parser(sub: Any) -> None:
    """Add ``fix`` to the ``%agent`` subparsers ``sub``."""
    f = sub.add_parser(
        "fix",
        help="ask NAME to fix a failed cell (default: the last one)",
        description="Start a turn of NAME whose first message carries the autopsy of a "
        "failed cell: source, exception chain, traceback, the failing frames' locals and, "
        "for a misspelt name, key or attribute, the closest existing ones.",
    )
    f.add_argument("name", metavar="NAME")
    f.add_argument(
        "cell", metavar="CELL", nargs="?", default=None, help="cell id or execution count"
    )


def fix_message(state: KernelState, cell: str | None) -> list[TextBlock]:
    """The blocks of a fix request for ``cell`` (default: the last failure). Raises
    :class:`UserError` when no failure of that cell is kept."""
    memory = state.memory_or_fail("%agent fix")
    autopsy = memory.autopsy(cell)
    if autopsy is None:
        what = f"cell {cell!r}" if cell else "any cell"
        raise UserError(
            f"%agent fix: no failure is kept for {what} (kept: "
            f"{memory.autopsies.describe_kept()}); a cell's autopsy is dropped when it next "
            "succeeds"
        )
    return [TextBlock(text=autopsy.render(AUTOPSY_CHARS) + "\n\n"), TextBlock(text=FIX_REQUEST)]


def run_fix(state: KernelState, args: argparse.Namespace) -> None:
    """Queue the fix request as a follow-up of ``args.name`` and display its turn."""
    agent = state.agent(args.name)
    blocks = fix_message(state, args.cell)
    message = agent.followup(blocks)
    tools = agent.ctx.tools
    if not any(tools.lookup(n, agent) is not None for n in ("run_python", "replace_cell")):
        print(
            f"note: {args.name} has neither the kernel tools nor the notebook tools, so it can "
            f"only explain the error (give it tools with %agent create {args.name} --kernel)"
        )
    display(state.cell_view(agent, [str(message.id)]))
