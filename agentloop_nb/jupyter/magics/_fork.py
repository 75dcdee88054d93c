"""``%agent fork NAME [--at SEQ] [--name NEW]``: branch an agent's history into a new agent.

``NAME`` is a bound agent (its session is forked) or, when no agent has that name, a session id
(live or stored). The fork gets the source's model-visible history up to event ``SEQ`` (default:
all of it; a cut inside a step never separates a tool call from its result) and is bound to
``NEW`` (default ``<NAME>_fork``, then ``<NAME>_fork2``, ...). The source is never changed.
"""

from __future__ import annotations

import argparse
import keyword
import sys
from typing import Any

from IPython.display import display

from .._state import KernelState, UserError
from ..kernel import run_eagerly

__all__ = ["add_fork_parser", "run_fork"]


def add_fork_parser(sub: Any) -> None:
    """Add the ``fork`` subcommand to the ``%agent`` subparsers ``sub``."""
    f = sub.add_parser(
        "fork",
        help="fork NAME's history into a new agent",
        description="Create a new agent whose history is NAME's up to event SEQ (default: "
        "all). NAME is a bound agent or a session id. The source is not changed.",
    )
    f.add_argument("name", metavar="NAME")
    f.add_argument("--at", metavar="SEQ", type=int, default=None, dest="at_seq")
    f.add_argument(
        "--name", metavar="NEW", default=None, dest="new", help="variable to bind the fork to"
    )


def run_fork(state: KernelState, args: argparse.Namespace) -> None:
    """Run ``%agent fork``; problems are :class:`UserError` (one usage line, no traceback)."""
    source = state.names.get(args.name)
    session_id = source.session.id if source is not None else args.name
    new = args.new if args.new is not None else state.free_name(f"{args.name}_fork")
    if not new.isidentifier() or keyword.iskeyword(new):
        raise UserError(f"%agent fork: NEW must be a Python identifier, got {new!r}")
    if new in state.names:
        raise UserError(f"%agent fork: an agent named {new!r} exists; choose another --name")
    try:
        done, value = run_eagerly(state.app.ctx.agents.fork(session_id, at_seq=args.at_seq))
    except Exception as exc:
        raise UserError(f"%agent fork: {exc}") from None
    if done:
        _forked(state, new, value.agent)
        return

    def bind(task: Any) -> None:  # the creation had to wait: bind when it lands
        if not task.cancelled() and task.exception() is None:
            _forked(state, new, task.result().agent)
        else:
            print(f"UsageError: %agent fork: {task.exception() or 'cancelled'}", file=sys.stderr)

    state.keep(value)
    value.add_done_callback(bind)
    print(f"forking {session_id} as {new}…")


def _forked(state: KernelState, name: str, agent: Any) -> None:
    state.bind(name, agent)
    meta = agent.session.header.meta
    print(
        f"forked {meta.get('forked_from')} at seq {meta.get('at_seq')} as {name}; "
        f"session {agent.session.id}"
    )
    display(state.view(agent))
