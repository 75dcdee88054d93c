"""``%agent compact NAME``: the long-session subcommands of ``%agent`` (wired into the parser
and the magics class by ``_agent.py``).

``compact`` forces ``ctx.compaction.compact(agent)`` (the ``CompactionPlugin`` must be applied
to the App's context). Like every subcommand it only schedules work: the summary call runs on
the kernel loop; its outcome is the durable ``compaction/summary`` event the live view shows.
A failure prints one ``UsageError`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from .._state import KernelState, UserError

__all__ = ["add_longrun_parsers", "cmd_compact"]


def add_longrun_parsers(sub: Any) -> None:
    """Add the long-session subcommands to ``%agent``'s subparsers."""
    c = sub.add_parser(
        "compact",
        help="summarise NAME's earlier conversation now",
        description="Replace NAME's earlier conversation with a summary (one model call). "
        "Needs the compaction plugin (on unless the App was built with compaction=False).",
    )
    c.add_argument("name", metavar="NAME")


def cmd_compact(state: KernelState, args: argparse.Namespace) -> None:
    """Schedule a forced compaction of the agent bound to ``args.name``. Raises
    :class:`UserError` for an unknown name or when the compaction plugin is not applied."""
    agent = state.agent(args.name)
    try:
        compaction = state.app.ctx.compaction
    except AttributeError:
        raise UserError(
            "%agent compact: compaction is not enabled (the App was built with "
            "compaction=False); apply it: "
            "from agentloop_nb.plugins.compaction import CompactionPlugin; "
            "app.ctx.plugin(CompactionPlugin)"
        ) from None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise UserError("%agent compact: needs a running event loop (the kernel's)") from None
    # A task of its own (not run_eagerly): the summary call enters cancel scopes that must be
    # entered and left in one task.
    task = loop.create_task(compaction.compact(agent), name=f"agentloop_nb compact {agent.id}")

    def settled(task: Any) -> None:
        if task.cancelled():
            _error(f"%agent compact {args.name}: cancelled")
        elif task.exception() is not None:
            _error(f"%agent compact {args.name}: {task.exception()}")
        else:
            _report(args.name, task.result())

    state.keep(task)
    task.add_done_callback(settled)
    print(f"compacting {args.name}…")


def _report(name: str, event: Any) -> None:
    if event is None:
        print(f"{name}: nothing to compact")
        return
    data = event.data
    print(
        f"{name}: summarised messages {data['start']}..{data['end']} "
        f"(~{data['tokens_before']} → ~{data['tokens_after_estimate']} tokens)"
    )


def _error(message: str) -> None:
    sys.stderr.write(f"UsageError: {message}\n")
