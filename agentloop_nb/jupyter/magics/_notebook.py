"""The magics of the notebook tools (``_agent`` and ``_kernel`` wire them in):

- ``%agent create NAME --notebook [--edit ask|always|never]`` — :func:`add_create_flags`,
  :func:`check_create_flags`, :func:`after_create`: ``notebook_tools`` on the new agent
  (``--notebook`` implies ``--kernel``);
- ``%agent notebook [PATH | --detach]`` — :func:`add_notebook_parser` and
  :func:`run_notebook_command`: attach an ``.ipynb`` as the document the notebook tools act
  on when no JupyterLab page is connected (headless runs), or say which one they use.

Problems are :class:`UserError` (one line, no traceback).
"""

from __future__ import annotations

import argparse
from typing import Any

from .._state import KernelState, UserError
from ..notebook import notebook_tools

__all__ = [
    "add_create_flags",
    "add_notebook_parser",
    "after_create",
    "check_create_flags",
    "run_notebook_command",
]


def add_create_flags(create: argparse.ArgumentParser) -> None:
    """``--notebook`` and ``--edit`` on ``%agent create``."""
    create.add_argument(
        "--notebook",
        action="store_true",
        help="give the agent the notebook tools (list/read/insert/replace/delete/run cells); "
        "implies --kernel",
    )
    create.add_argument(
        "--edit",
        choices=("ask", "always", "never"),
        default="ask",
        help="with --notebook: every edit and run asks for approval with a diff (default), "
        "always goes ahead, or the editing tools are absent",
    )


def check_create_flags(args: argparse.Namespace) -> None:
    """Raise :class:`UserError` for ``--edit`` without ``--notebook``; ``--notebook`` turns
    ``--kernel`` on."""
    notebook = getattr(args, "notebook", False)
    if not notebook and getattr(args, "edit", "ask") != "ask":
        raise UserError("%agent create: --edit needs --notebook")
    if notebook:
        args.kernel = True


def after_create(agent: Any, args: argparse.Namespace) -> str:
    """Apply ``--notebook``; returns a note for the creation message ('' without it)."""
    if not getattr(args, "notebook", False):
        return ""
    notebook_tools(agent, edit=args.edit)
    return f" and notebook tools (edits: {args.edit})"


def add_notebook_parser(sub: Any) -> None:
    """``%agent notebook [PATH | --detach]``."""
    n = sub.add_parser(
        "notebook",
        help="attach the .ipynb the notebook tools act on (headless), or show which one",
        description="Attach the notebook file PATH: the notebook tools read and edit it when "
        "no JupyterLab page with the agentloop-nb extension is connected (a connected page "
        "always wins). Without PATH: say which notebook the tools use now.",
    )
    n.add_argument("path", metavar="PATH", nargs="?", default=None)
    n.add_argument("--detach", action="store_true", help="forget the attached file")


def run_notebook_command(state: KernelState, args: argparse.Namespace) -> str:
    """Run ``%agent notebook``; returns the line to print."""
    provider = state.notebooks
    if args.detach:
        if args.path is not None:
            raise UserError("%agent notebook: give PATH or --detach, not both")
        gone = provider.detach()
        return "no notebook file was attached" if gone is None else f"detached {gone.path}"
    if args.path is None:
        return f"notebook tools use: {provider.describe()}"
    try:
        document = provider.attach(args.path)
    except ValueError as exc:
        raise UserError(f"%agent notebook: {exc}") from None
    note = ""
    if provider.bridge is not None and provider.bridge.connected:
        note = " (a JupyterLab page is connected: the tools use the open notebook while it is)"
    return f"notebook tools use {document.path}{note}"
