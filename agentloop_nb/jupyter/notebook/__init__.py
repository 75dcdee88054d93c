"""The notebook the agent works on: the kernel's end of the JupyterLab bridge.

:class:`NotebookBridge` is the comm ``agentloop.notebook`` to the ``agentloop-nb`` JupyterLab
extension (the contract: docs/notebook-bridge.md); :class:`BridgeError` is what a failed
request raises. The action models are the notifications the front end sends.
"""

from __future__ import annotations

from ._bridge import BridgeError, NotebookBridge
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

__all__ = [
    "COMM_TARGET",
    "PROTOCOL",
    "READY_TARGET",
    "BridgeError",
    "CancelAction",
    "CellRef",
    "CreateAction",
    "FixAction",
    "ListAction",
    "NotebookBridge",
    "PromptAction",
]
