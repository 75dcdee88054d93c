"""``%agent undo NAME [--calls N]``: undo what an agent's last runs of code changed in the
kernel's namespace (wired into ``_agent.py``; ``agent.undo()`` and
``agentloop_nb.jupyter.undo(agent)`` are the Python forms).

Prints one line per name: restored / removed / not restorable (why) / changed since, kept; and,
when the agent also edited cells, that cell edits are undone by the notebook's own history.
"""

from __future__ import annotations

import argparse
from typing import Any

from .._state import KernelState, UserError

__all__ = ["add_undo_parser", "run_undo"]


def add_undo_parser(sub: Any) -> None:
    """Add ``undo`` to the ``%agent`` subparsers ``sub``."""
    u = sub.add_parser(
        "undo",
        help="undo NAME's last code runs in this kernel",
        description="Restore the names NAME's last N runs of code (run_python, run_cell) "
        "bound, deleted or changed in place. Names someone changed since are kept; values "
        "that could not be copied are reported as not restorable.",
    )
    u.add_argument("name", metavar="NAME")
    u.add_argument("--calls", metavar="N", type=int, default=1, help="runs to undo (default 1)")


def run_undo(state: KernelState, args: argparse.Namespace) -> None:
    agent = state.agent(args.name)
    if args.calls < 1:
        raise UserError("%agent undo: --calls must be a positive integer")
    print(state.memory_or_fail("%agent undo").undo(agent, args.calls))
