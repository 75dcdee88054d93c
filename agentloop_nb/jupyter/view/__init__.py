"""The live views: ipywidgets over a :class:`~agentloop_nb.jupyter.fold.SessionFeed`.

``AgentView`` composes the others (``SessionView`` — the transcript, one widget per turn;
``ToolPoolView`` — the current step's calls, timeline and approvals; ``InboxView``;
``PromptBox``); ``WidgetApproval`` is the ``ctx.approval`` service their buttons answer. Views
derive from the log and never sit in the execution path. This room imports ``fold`` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from ._sessionview import SessionView
from ._throttle import Throttle

if TYPE_CHECKING:
    from ._prompt import PromptBox


def __getattr__(name: str) -> Any:
    # The anywidget-based widgets load with the first view that shows them, not with
    # ``%load_ext``: anywidget and psygnal are about 6 MiB of a kernel's memory.
    if name == "PromptBox":
        from ._prompt import PromptBox

        return PromptBox
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
