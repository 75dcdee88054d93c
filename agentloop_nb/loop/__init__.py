"""The agent loop: the only concrete loop logic in agentloop_nb."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._creation import AgentOptions
from .._lazy import LazyExports
from ._config import AgentConfig, AgentLoopConfig, LoopSettings
from ._service import AgentLoop

if TYPE_CHECKING:
    from .._step_decisions import Enter, Reject, RequestConfig, Retry
    from ._agent import Agent, AgentTurnError

# ``Agent`` (with its driver, inbox, turn state, request path and the tool scheduler) and the
# loop's decisions load with the first agent the loop creates, or the first access here
# (start-up cost).
_EXPORTS = LazyExports(
    __name__,
    {
        "._agent": ("Agent", "AgentTurnError"),
        ".._step_decisions": ("Enter", "Reject", "RequestConfig", "Retry"),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()


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
