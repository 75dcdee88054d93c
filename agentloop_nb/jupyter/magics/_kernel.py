"""The magic flags that connect an agent to this kernel (``_magics`` wires them in):

- ``%agent create NAME --kernel [--run ask|always|never]`` — :func:`add_create_flags` and
  :func:`after_create` (``kernel_tools`` on the new agent; ``--notebook [--edit MODE]`` adds
  the notebook tools through ``_notebook``);
- ``%%agent NAME --with a,b`` — :func:`split_cell_line` and :func:`prompt_with` (one text block
  per variable, ``inspect_variable``'s summary, before the prompt);
- ``%agent tool FUNC [--agent NAME]`` — :func:`add_tool_command` and :func:`register_tool` (the
  function becomes a tool under the named scope ``tool:FUNC``; re-running replaces it).

Problems are :class:`UserError` (one line, no traceback).
"""

from __future__ import annotations

import argparse
from typing import Any

from ...messages import TextBlock
from .._state import UserError
from ..kernel import (
    Describers,
    add_kernel_tools,
    close_matches,
    describe,
    is_secret,
    user_variables,
)
from . import _notebook

__all__ = [
    "WITH_MAX_CHARS",
    "add_create_flags",
    "add_tool_command",
    "after_create",
    "check_create_flags",
    "prompt_with",
    "register_tool",
    "split_cell_line",
]

#: Bound of each ``--with`` summary.
WITH_MAX_CHARS = 4000


def add_create_flags(create: argparse.ArgumentParser) -> None:
    """``--kernel`` and ``--run`` on ``%agent create``."""
    create.add_argument(
        "--kernel",
        action="store_true",
        help="give the agent this kernel's tools (list/inspect variables, run_python, history)",
    )
    create.add_argument(
        "--run",
        choices=("ask", "always", "never"),
        default="ask",
        help="with --kernel: run_python asks for approval (default), always runs, or is absent",
    )
    _notebook.add_create_flags(create)


def check_create_flags(args: argparse.Namespace) -> None:
    """Raise :class:`UserError` for ``--run`` without ``--kernel`` or ``--edit`` without
    ``--notebook`` (before anything exists); ``--notebook`` implies ``--kernel``."""
    _notebook.check_create_flags(args)
    if not getattr(args, "kernel", False) and getattr(args, "run", "ask") != "ask":
        raise UserError("%agent create: --run needs --kernel")


def after_create(agent: Any, args: argparse.Namespace) -> str:
    """Apply ``--kernel`` (and ``--notebook``); returns a note for the creation message ('' without
    them)."""
    if not getattr(args, "kernel", False):
        return ""
    add_kernel_tools(agent, run=args.run)
    return f" with kernel tools (run_python: {args.run})" + _notebook.after_create(agent, args)


def add_tool_command(sub: Any) -> None:
    """``%agent tool FUNC [--agent NAME]``."""
    t = sub.add_parser(
        "tool",
        help="turn a notebook function into a tool",
        description="Register the notebook function FUNC as a tool (schema from its type "
        "hints, description from its docstring) under the scope 'tool:FUNC'; running the "
        "command again replaces it.",
    )
    t.add_argument("func", metavar="FUNC")
    t.add_argument(
        "--agent", metavar="NAME", default=None, help="only for this agent (default: all agents)"
    )


def register_tool(shell: Any, ctx: Any, agent: Any, func_name: str) -> str:
    """Register ``shell.user_ns[func_name]`` as a tool through ``agent.ctx`` (or ``ctx``) in
    the named plugin scope ``tool:FUNC``; returns a confirmation line."""
    fn = shell.user_ns.get(func_name)
    if fn is None:
        near = close_matches(
            func_name, [n for n, v in user_variables(shell).items() if callable(v)]
        )
        hint = f" (did you mean: {', '.join(near)}?)" if near else ""
        raise UserError(f"%agent tool: no function named {func_name!r}{hint}")
    if not callable(fn) or isinstance(fn, type):
        raise UserError(f"%agent tool: {func_name!r} is a {type(fn).__name__}, not a function")
    owner = agent.ctx if agent is not None else ctx

    def apply(scope: Any, _config: Any) -> None:
        scope.tools.register(fn)

    try:
        owner.plugin(apply, name=f"tool:{func_name}")
    except (TypeError, ValueError) as exc:
        raise UserError(f"%agent tool: {exc}") from None
    where = "all agents" if agent is None else "its agent"
    return f"tool {func_name!r} registered for {where} (scope tool:{func_name})"


def split_cell_line(line: str) -> tuple[str, list[str]]:
    """``NAME [--with a,b]`` → ``(NAME, [a, b])``. Raises :class:`UserError` otherwise."""
    words = line.split()
    usage = "usage: %%agent NAME [--with a,b] (the cell body is the prompt)"
    if not words or words[0].startswith("-"):
        raise UserError(f"%%agent: expected a NAME — {usage}")
    name, rest = words[0], words[1:]
    if not rest:
        return name, []
    if rest[0] == "--with" and len(rest) >= 2:
        names = [n for n in "".join(rest[1:]).split(",") if n]
    elif rest[0].startswith("--with=") and len(rest) == 1:
        names = [n for n in rest[0][len("--with=") :].split(",") if n]
    else:
        raise UserError(f"%%agent: unexpected {' '.join(rest)!r} — {usage}")
    if not names:
        raise UserError(f"%%agent: --with needs variable names — {usage}")
    return name, names


def prompt_with(
    shell: Any, names: list[str], prompt: str, describers: Describers | None = None
) -> list[TextBlock]:
    """One text block per variable (its summary, with ``describers``), then the prompt.
    Raises :class:`UserError` for an unknown variable (listing close matches) or a secret
    one."""
    ns = user_variables(shell)
    blocks = []
    for name in names:
        if is_secret(name):
            raise UserError(f"%%agent --with: {name!r} looks like a secret; it is not attached")
        if name not in ns:
            near = close_matches(name, ns)
            hint = f" (did you mean: {', '.join(near)}?)" if near else ""
            raise UserError(f"%%agent --with: no variable named {name!r}{hint}")
        blocks.append(TextBlock(text=f"{name} = {describe(ns[name], WITH_MAX_CHARS, describers)}"))
    blocks.append(TextBlock(text=prompt))
    return blocks
