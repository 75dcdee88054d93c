"""The live views: ipywidgets over a :class:`~agentloop_nb.jupyter.fold.SessionFeed`.

``AgentView`` composes the others (``SessionView`` — the transcript, one widget per turn;
``ToolPoolView`` — the current step's calls, timeline and approvals; ``InboxView``;
``PromptBox``); ``WidgetApproval`` is the ``ctx.approval`` service their buttons answer. Views
derive from the log and never sit in the execution path. This room imports ``fold`` only.
"""

from __future__ import annotations

from ._agentview import AgentView
from ._approval import DEFAULT_APPROVAL_TIMEOUT, DetailRenderer, PendingApproval, WidgetApproval
from ._inboxview import InboxView
from ._pool import ToolPoolView
from ._prompt import PromptBox
from ._sessionview import SessionView
from ._throttle import Throttle

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT",
    "AgentView",
    "DetailRenderer",
    "InboxView",
    "PendingApproval",
    "PromptBox",
    "SessionView",
    "Throttle",
    "ToolPoolView",
    "WidgetApproval",
]
