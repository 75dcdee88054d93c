"""agentloop_nb: kernel-native LLM agents for Jupyter.

The core (this package minus ``agentloop_nb.jupyter``) runs without IPython: importing it does
not import ipywidgets. ``%load_ext agentloop_nb`` loads the notebook layer.

The catalogues: ``agentloop_nb.events`` (durable event types and their data) and
``agentloop_nb.hooks`` (hook names, dispatch modes, payloads and decisions).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import FunctionType
from typing import TYPE_CHECKING, Any

from ._lazy import LazyExports
from .agents import AgentHandle, AgentRegistry
from .app import App, AppConfig
from .context import Context, Fiber, InactiveContextError
from .errors import (
    AgentloopError,
    InvalidTypeError,
    InvalidValueError,
    MissingDependencyError,
    NotFoundError,
    UsageError,
)
from .llm import (
    LlmError,
    LlmRuntime,
    PreparedCall,
    RequestFacts,
    RetryPolicy,
)
from .loop import (
    AgentConfig,
    AgentLoop,
    AgentLoopConfig,
    AgentOptions,
)
from .messages import (
    AssistantMessage,
    ImageBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from .prompt import SystemPrompt
from .session import Session, SessionEvent, SessionStore
from .signals import AbortController, AbortError, AbortSignal
from .tools import ToolRuntime

if TYPE_CHECKING:
    from ._step_decisions import Enter, Reject, RequestConfig, Retry
    from .llm import GenerateOptions, StreamChunk, Usage
    from .loop import Agent, AgentTurnError
    from .plugins.invariants import InvariantError
    from .session import JsonlPersistence
    from .tools import Accept, Allow, Ask, Block, Deny, Tool, ToolExecution, ToolResult, tool
    from .usage import UsageTotals

__version__ = "0.1.0"

# Exports whose modules load on first use (start-up cost): the invariant companion (whose
# error this is), the JSONL backend, which only a program with persistence uses, and
# ``GenerateOptions`` (a dataclass, loaded with the first model request), the stream-chunk
# models (``StreamChunk``, ``Usage``: loaded with the first stream), the tool decisions (loaded
# with the first tool call), the agent (``Agent``, ``AgentTurnError``: loaded with the first
# agent an App creates) with the loop's decisions (``Enter``, ``Reject``, ``Retry``,
# ``RequestConfig``) and its usage ledger, and the tool definitions (``tool``, ``Tool``,
# ``ToolExecution``, ``ToolResult``: loaded with the first tool defined).
_EXPORTS = LazyExports(
    __name__,
    {
        ".loop": ("Agent", "AgentTurnError"),
        "._step_decisions": ("Enter", "Reject", "RequestConfig", "Retry"),
        ".usage": ("UsageTotals",),
        ".plugins.invariants": ("InvariantError",),
        ".session._jsonl": ("JsonlPersistence",),
        ".llm._options": ("GenerateOptions",),
        ".llm._chunks": ("StreamChunk", "Usage"),
        ".tools._verdicts": ("Accept", "Allow", "Ask", "Block", "Deny"),
        ".tools._define": ("Tool", "tool"),
        ".tools._decisions": ("ToolExecution", "ToolResult"),
    },
)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS.home:
        value = _EXPORTS.load(name)
        if name != "InvariantError":  # the plugin's error keeps its plugin path
            _publish({name: value})
        return value
    # The event catalogue (``agentloop_nb.events``) is a submodule the core does not import;
    # ``agentloop_nb.events`` still works without importing it first.
    if name == "events":
        import importlib  # not ``from . import``: its hasattr would call back here

        return importlib.import_module(f"{__name__}.events")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return _EXPORTS.dir()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext agentloop_nb``: imports the notebook layer only now."""
    from .jupyter import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext agentloop_nb``: disposes the kernel-wide App."""
    from .jupyter import unload_ipython_extension as unload

    unload(ipython)


__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "Accept",
    "Agent",
    "AgentConfig",
    "AgentHandle",
    "AgentLoop",
    "AgentLoopConfig",
    "AgentOptions",
    "AgentRegistry",
    "AgentTurnError",
    "AgentloopError",
    "Allow",
    "App",
    "AppConfig",
    "Ask",
    "AssistantMessage",
    "Block",
    "Context",
    "Deny",
    "Enter",
    "Fiber",
    "GenerateOptions",
    "ImageBlock",
    "InactiveContextError",
    "InvalidTypeError",
    "InvalidValueError",
    "InvariantError",
    "JsonlPersistence",
    "LlmError",
    "LlmRuntime",
    "Message",
    "MissingDependencyError",
    "NotFoundError",
    "PreparedCall",
    "ReasoningBlock",
    "Reject",
    "RequestConfig",
    "RequestFacts",
    "Retry",
    "RetryPolicy",
    "Session",
    "SessionEvent",
    "SessionStore",
    "StreamChunk",
    "SystemPrompt",
    "TextBlock",
    "Tool",
    "ToolCallBlock",
    "ToolExecution",
    "ToolResult",
    "ToolResultMessage",
    "ToolRuntime",
    "Usage",
    "UsageError",
    "UsageTotals",
    "UserMessage",
    "__version__",
    "load_ipython_extension",
    "tool",
    "unload_ipython_extension",
]


def _publish(namespace: Mapping[str, Any]) -> None:
    # Reprs, tracebacks and generated docs name the path a user imports (``agentloop_nb.Agent``,
    # not ``agentloop_nb.loop._agent.Agent``), as httpx and anyio do. Only objects defined in this
    # package are renamed (a re-exported third-party object keeps its home); pickling still works
    # because every renamed object is reachable as ``agentloop_nb.<name>``. The lazy exports
    # are published when first resolved here; ``InvariantError`` keeps its plugin path.
    for name in namespace.keys() & set(__all__):
        value = namespace.get(name)
        if not isinstance(value, (type, FunctionType)) or name.startswith("_"):
            continue
        if getattr(value, "__module__", "").startswith("agentloop_nb") and (
            getattr(value, "__qualname__", name) == name
        ):
            value.__module__ = __name__


_publish(globals())
