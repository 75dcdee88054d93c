"""Static types of the core services as ``ctx`` exposes them (``ctx.tools``, ``ctx.llm``, ...).

Protocols, defined low so that :mod:`agentloop_nb.context` can name them without importing the
packages that implement the services (those import the context: that would be a cycle). They
list the members the rest of the package relies on; any other attribute resolves to ``Any``
(each protocol has a ``__getattr__``), so a service may offer more than its protocol says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._assembly import Assembly
    from ._creation import AgentOptions
    from ._disposer import Disposer
    from ._prompt_types import SectionSource, VariableSource
    from .signals import AbortSignal


class ToolsService(Protocol):
    """``ctx.tools``: the tool registry and execution pipeline."""

    def register(self, tool_or_function: Any) -> Disposer: ...
    def guard(self, fn: Callable[[Any], Any]) -> Disposer: ...
    def lookup(self, name: str, agent: Any = None) -> Any | None: ...
    def definitions(self, agent: Any = None) -> list[Any]: ...
    def schemas(self, agent: Any = None) -> list[dict[str, Any]]: ...
    def __getattr__(self, name: str) -> Any: ...


class LlmService(Protocol):
    """``ctx.llm``: adapters by provider and the ``llm/stream`` dispatch."""

    def register_adapter(
        self, providers: Iterable[str], adapter: Any, *, retry_policy: Any = None
    ) -> Disposer: ...
    def providers(self) -> list[str]: ...
    def adapter_for(self, provider: str) -> Any | None: ...
    @property
    def adapters_generation(self) -> int: ...
    async def prepare_call(self, config: Any, *, signal: Any = None) -> Any: ...
    def stream(self, options: Any, *, prepared: Any = None) -> AsyncIterator[Any]: ...
    def __getattr__(self, name: str) -> Any: ...


class SessionsService(Protocol):
    """``ctx.sessions``: the session store."""

    def get(self, id: str) -> Any: ...
    def list(self) -> list[Any]: ...
    def __getattr__(self, name: str) -> Any: ...


class SystemPromptService(Protocol):
    """``ctx.system_prompt``: sections, variables, assembly and rendering."""

    def section(self, name: str, text_or_fn: SectionSource, *, order: int = 0) -> Disposer: ...
    def variable(self, name: str, fn: VariableSource) -> Disposer: ...
    def collect(self, agent: Any) -> Assembly: ...
    async def assemble(self, agent: Any, *, signal: AbortSignal | None = None) -> Assembly: ...
    def render(self, assembly: Assembly) -> str: ...
    def __getattr__(self, name: str) -> Any: ...


class _CreationDoors(Protocol):
    """The async doors ``ctx.agents`` and ``ctx.agent_loop`` share (answering an
    ``AgentHandle``); the parameters are the creation vocabulary (``agentloop_nb._creation``)."""

    async def resume(
        self,
        *,
        session_id: str | None = None,
        options: AgentOptions | None = None,
        setup: Callable[[Any], Any] | None = None,
        signal: AbortSignal | None = None,
        agent_options: AgentOptions | None = None,
        resume_session_id: str | None = None,
    ) -> Any: ...
    async def fork(
        self,
        source_session_id: str,
        *,
        at_seq: int | None = None,
        session_id: str | None = None,
        options: AgentOptions | None = None,
        setup: Callable[[Any], Any] | None = None,
        signal: AbortSignal | None = None,
        agent_options: AgentOptions | None = None,
    ) -> Any: ...


class AgentsService(_CreationDoors, Protocol):
    """``ctx.agents``: the directory of live agents and their creation (returns an
    ``AgentHandle``). The parameters are the creation vocabulary (``agentloop_nb._creation``)."""

    async def create(
        self,
        *,
        session_id: str,
        options: AgentOptions | None = None,
        meta: Mapping[str, Any] | None = None,
        seed: Iterable[Any] | None = None,
        setup: Callable[[Any], Any] | None = None,
        signal: AbortSignal | None = None,
        agent_options: AgentOptions | None = None,
    ) -> Any: ...
    def get(self, id: str) -> Any | None: ...
    def list(self) -> list[Any]: ...
    def __getattr__(self, name: str) -> Any: ...


class AgentLoopService(_CreationDoors, Protocol):
    """``ctx.agent_loop``: agent creation (the synchronous ``create`` and the async
    ``acreate`` / ``resume`` / ``fork``, which return an ``AgentHandle``) and teardown."""

    def create(
        self,
        id: str,
        options: AgentOptions | None = None,
        meta: Mapping[str, Any] | None = None,
        *,
        agent_options: AgentOptions | None = None,
    ) -> Any: ...
    async def acreate(
        self,
        *,
        session_id: str,
        options: AgentOptions | None = None,
        meta: Mapping[str, Any] | None = None,
        seed: Iterable[Any] | None = None,
        setup: Callable[[Any], Any] | None = None,
        signal: AbortSignal | None = None,
        agent_options: AgentOptions | None = None,
    ) -> Any: ...
    def get(self, id: str) -> Any | None: ...
    def list(self) -> list[Any]: ...
    def __getattr__(self, name: str) -> Any: ...


class UndoService(Protocol):
    """``ctx.undo``: undoes an agent's runs of code in the environment that provides it
    (``agent.undo(calls)`` delegates here; the notebook layer provides the kernel's)."""

    def undo(self, agent: Any, calls: int = 1) -> Any: ...


__all__ = [
    "AgentLoopService",
    "AgentsService",
    "LlmService",
    "SessionsService",
    "SystemPromptService",
    "ToolsService",
    "UndoService",
]
