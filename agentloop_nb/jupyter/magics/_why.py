"""``%agent why [VAR]``: where a variable came from (wired into ``_agent.py``).

With ``VAR``: every binding of it seen since the extension loaded, newest first ("df: rebound
by agent bob, turn 3, call c1: `df = df.dropna()`; created by cell [4]: `df = ...`"). Without:
the names agents changed in this kernel, each with its latest agent binding. Secret values are
masked and the lines binding secret-looking names are not shown.
"""

from __future__ import annotations

import argparse
from typing import Any

from .._state import KernelState

__all__ = ["add_why_parser", "run_why"]


def add_why_parser(sub: Any) -> None:
    """Add ``why`` to the ``%agent`` subparsers ``sub``."""
    w = sub.add_parser(
        "why",
        help="where VAR came from (without VAR: the names agents changed)",
        description="The provenance of a top-level name: which cells and agents bound it, "
        "newest first.",
    )
    w.add_argument("var", metavar="VAR", nargs="?", default=None)


def run_why(state: KernelState, args: argparse.Namespace) -> None:
    memory = state.memory_or_fail("%agent why")
    if args.var is not None:
        print(memory.why(args.var))
        return
    changed = memory.changed_by_agents()
    if not changed:
        print("no agent has changed a name in this kernel")
        return
    print("names agents changed (newest first):")
    for name, latest in changed:
        print(f"  {name}: {latest}")
