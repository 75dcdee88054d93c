"""The notebook document: what the agent reads and edits of the notebook it works in.

:class:`NotebookDocument` is the interface (cells with their outputs; insert, replace,
delete and run, each refused rather than merged when the cell changed); :class:`BridgeDocument`
implements it over the JupyterLab extension's comm (:class:`NotebookBridge`, the kernel's end
of the comm ``agentloop.notebook``; its contract is docs/notebook-bridge.md),
:class:`NotebookFile` over an ``.ipynb`` file; :class:`NotebookProvider` chooses one per kernel;
``notebook_tools(agent)`` gives an agent the tools over it (``list_cells``, ``read_cell``,
``insert_cell``, ``replace_cell``, ``delete_cell``, ``run_cell``). The action models are the
notifications the front end sends. This room imports ``fold``, ``kernel`` and the core only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._lazy import LazyExports

if TYPE_CHECKING:
    from ._bridge import BridgeError, NotebookBridge
    from ._document import (
        CELL_TYPES,
        BridgeDocument,
        BridgeLike,
        Cell,
        DocumentError,
        NotebookDocument,
        RunResult,
    )
    from ._file import NotebookFile
    from ._messages import (
        COMM_TARGET,
        PROTOCOL,
        READY_TARGET,
        CancelAction,
        CellRef,
        CreateAction,
        FixAction,
        ListAction,
        PromptAction,
    )
    from ._outputs import MAX_IMAGE_BYTES, MAX_IMAGES, OutputSummary, summarize
    from ._provider import NO_NOTEBOOK, NotebookProvider
    from ._tools import EDIT_TOOLS, NotebookTools, diff_html, notebook_tools

# Each room loads with the first use of one of its names (start-up cost of %load_ext).
_EXPORTS = LazyExports(
    __name__,
    {
        "._bridge": ("BridgeError", "NotebookBridge"),
        "._document": (
            "CELL_TYPES",
            "BridgeDocument",
            "BridgeLike",
            "Cell",
            "DocumentError",
            "NotebookDocument",
            "RunResult",
        ),
        "._file": ("NotebookFile",),
        "._messages": (
            "COMM_TARGET",
            "PROTOCOL",
            "READY_TARGET",
            "CancelAction",
            "CellRef",
            "CreateAction",
            "FixAction",
            "ListAction",
            "PromptAction",
        ),
        "._outputs": ("MAX_IMAGE_BYTES", "MAX_IMAGES", "OutputSummary", "summarize"),
        "._provider": ("NO_NOTEBOOK", "NotebookProvider"),
        "._tools": ("EDIT_TOOLS", "NotebookTools", "diff_html", "notebook_tools"),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


__all__ = [
    "CELL_TYPES",
    "COMM_TARGET",
    "EDIT_TOOLS",
    "MAX_IMAGES",
    "MAX_IMAGE_BYTES",
    "NO_NOTEBOOK",
    "PROTOCOL",
    "READY_TARGET",
    "BridgeDocument",
    "BridgeError",
    "BridgeLike",
    "CancelAction",
    "Cell",
    "CellRef",
    "CreateAction",
    "DocumentError",
    "FixAction",
    "ListAction",
    "NotebookBridge",
    "NotebookDocument",
    "NotebookFile",
    "NotebookProvider",
    "NotebookTools",
    "OutputSummary",
    "PromptAction",
    "RunResult",
    "diff_html",
    "notebook_tools",
    "summarize",
]
