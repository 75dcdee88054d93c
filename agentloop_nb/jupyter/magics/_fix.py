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

from .._fixflow import AUTOPSY_CHARS, FIX_REQUEST, fix_message, start_fix
from .._state import KernelState

__all__ = ["AUTOPSY_CHARS", "FIX_REQUEST", "add_fix_parser", "fix_message", "run_fix"]


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


def run_fix(state: KernelState, args: argparse.Namespace) -> None:
    """Queue the fix request as a follow-up of ``args.name`` and display its turn."""
    started = start_fix(state, args.cell, args.name, command="%agent fix")
    if started.note:
        print(f"note: {started.note}")
    display(state.cell_view(started.agent, [started.message_id]))
