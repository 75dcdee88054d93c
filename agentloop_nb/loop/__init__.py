"""The agent loop: the only concrete loop logic in agentloop_nb."""

from __future__ import annotations

from .._creation import AgentOptions
from ..hooks import Enter, Reject, RequestConfig, Retry
from ._agent import Agent, AgentTurnError
from ._config import AgentConfig, AgentLoopConfig, LoopSettings
from ._service import AgentLoop

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentLoop",
    "AgentLoopConfig",
    "AgentOptions",
    "AgentTurnError",
    "Enter",
    "LoopSettings",
    "Reject",
    "RequestConfig",
    "Retry",
]
