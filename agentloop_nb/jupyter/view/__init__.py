"""The live views: ipywidgets over a :class:`~agentloop_nb.jupyter.fold.SessionFeed`.

``AgentView`` composes the others (``SessionView`` — the transcript, one widget per turn;
``ToolPoolView`` — the current step's calls, timeline and approvals; ``InboxView``;
``PromptBox``); ``WidgetApproval`` is the ``ctx.approval`` service their buttons answer. Views
derive from the log and never sit in the execution path. This room imports ``fold`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._lazy import LazyExports

if TYPE_CHECKING:
    from ._agentview import AgentView
    from ._approval import (
        DEFAULT_APPROVAL_TIMEOUT,
        CallAction,
        DetailRenderer,
        PendingApproval,
        WidgetApproval,
    )
    from ._inboxview import InboxView
    from ._pool import ToolPoolView
    from ._prompt import PromptBox
    from ._sessionview import SessionView
    from ._throttle import Throttle

# The widgets load with the first view that shows them, not with ``%load_ext``: ipywidgets is
# about a third of the extension's start-up, anywidget and psygnal (``PromptBox``) about 6 MiB
# of a kernel's memory. The approval service has no widget until an approval is shown.
_EXPORTS = LazyExports(
    __name__,
    {
        "._agentview": ("AgentView",),
        "._approval": (
            "DEFAULT_APPROVAL_TIMEOUT",
            "CallAction",
            "DetailRenderer",
            "PendingApproval",
            "WidgetApproval",
        ),
        "._inboxview": ("InboxView",),
        "._pool": ("ToolPoolView",),
        "._prompt": ("PromptBox",),
        "._sessionview": ("SessionView",),
        "._throttle": ("Throttle",),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "AgentView",
    "CallAction",
    "DetailRenderer",
    "InboxView",
    "PendingApproval",
    "PromptBox",
    "SessionView",
    "Throttle",
    "ToolPoolView",
    "WidgetApproval",
]
