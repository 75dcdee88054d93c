"""The notebook layer: the IPython extension, magics, live widgets, plugin cells.

This package is the only part of ``agentloop_nb`` that imports IPython and ipywidgets;
``import agentloop_nb`` never imports it (the root package's ``load_ipython_extension`` shim
imports it lazily).

Public surface:

- ``app()`` — the kernel-wide ``App`` created by ``%load_ext agentloop_nb``;
  ``configure(**app_kwargs)`` — what the next load builds it with; ``view(agent)`` — the
  agent's cached ``AgentView``; ``wait_closed()`` — await an unloaded App's disposal.
- ``AgentView``, ``SessionView``, ``ToolPoolView``, ``InboxView`` — live, throttled widgets
  (``PromptBox``: the follow-up box, Ctrl/Cmd+Enter sends); ``SessionFeed`` — a session
  folded once for every view that shows it; ``WidgetApproval`` — the ``ctx.approval`` service
  their Approve/Deny buttons answer.
- ``plugin(name)`` — a named plugin scope (context manager or decorator), like ``%%plugin``.
- ``run_sync(agent, prompt)`` — opt-in blocking helper (applies ``nest_asyncio`` lazily).
- ``kernel_tools(agent, *, run="ask", max_chars=4000)`` — the agent's tools over this kernel:
  ``list_variables``, ``inspect_variable``, ``run_python``, ``notebook_history``;
  ``kernel_tools.describe(type, fn)`` registers a summary for a type in the IPython shell's
  registry (the loaded extension's ``ctx.describers``; kept across ``%reload_ext``);
  ``read_error(cell)`` returns a failed cell's autopsy.
- ``notebook_tools(agent, *, edit="ask", max_output_chars=4000)`` — the agent's tools over
  the notebook itself: ``list_cells``, ``read_cell``, ``insert_cell``, ``replace_cell``,
  ``delete_cell``, ``run_cell`` (edits asked for with a diff); ``NotebookFile(path)`` — the
  document over an ``.ipynb``; ``notebook()`` — the document the tools act on now.
- ``undo(agent, calls=1)`` — undo what the agent's last runs of code changed in the namespace
  (``agent.undo()`` delegates here through the ``ctx.undo`` service); ``%agent why VAR`` and
  ``inspect_variable`` tell where a name came from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports

if TYPE_CHECKING:
    from ._extension import load_ipython_extension, unload_ipython_extension
    from ._state import app, configure, kernel_tools, notebook, undo, view, wait_closed
    from .fold import SessionFeed, Transcript
    from .kernel import run_sync
    from .magics import plugin
    from .notebook import NotebookDocument, NotebookFile, notebook_tools
    from .view import (
        AgentView,
        InboxView,
        PendingApproval,
        PromptBox,
        SessionView,
        Throttle,
        ToolPoolView,
        WidgetApproval,
    )
else:
    # ``view`` and ``notebook`` name a room (a subpackage) and a function of ``_state``. The
    # first import of a submodule binds its name on the package, so the rooms (whose own
    # imports are lazy too: nothing heavy loads here) are imported now and their names
    # dropped: the functions then resolve below and stay bound.
    from . import notebook, view

    del notebook, view

# Every name loads its room on first use: ``%load_ext`` imports the extension and what a
# freshly loaded kernel state needs, not the widgets, the notebook tools or the magics' commands.
_EXPORTS = LazyExports(
    __name__,
    {
        "._extension": ("load_ipython_extension", "unload_ipython_extension"),
        "._state": ("app", "configure", "kernel_tools", "notebook", "undo", "view", "wait_closed"),
        ".fold": ("SessionFeed", "Transcript"),
        ".kernel": ("run_sync",),
        ".magics": ("plugin",),
        ".notebook": ("NotebookDocument", "NotebookFile", "notebook_tools"),
        ".view": (
            "AgentView",
            "InboxView",
            "PendingApproval",
            "PromptBox",
            "SessionView",
            "Throttle",
            "ToolPoolView",
            "WidgetApproval",
        ),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


__all__ = [
    "AgentView",
    "InboxView",
    "NotebookDocument",
    "NotebookFile",
    "PendingApproval",
    "PromptBox",
    "SessionFeed",
    "SessionView",
    "Throttle",
    "ToolPoolView",
    "Transcript",
    "WidgetApproval",
    "app",
    "configure",
    "kernel_tools",
    "load_ipython_extension",
    "notebook",
    "notebook_tools",
    "plugin",
    "run_sync",
    "undo",
    "unload_ipython_extension",
    "view",
    "wait_closed",
]
