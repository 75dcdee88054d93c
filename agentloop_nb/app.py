"""``App``: the default composition — a root context with the core services, the agent loop,
the built-in plugins and (optionally) JSONL persistence."""

import os
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from ._supervisor import Supervisor
from .agents import AgentRegistry
from .context import Context
from .llm import LlmRuntime
from .loop import AgentLoop, AgentLoopConfig
from .models import DEFAULT_TABLE, ModelTable
from .prompt import SystemPrompt
from .session import SessionStore
from .tools import ToolRuntime

_PG_SCHEMES = ("postgresql://", "postgres://")
DATABASE_URL_ENV = "AGENTLOOP_DATABASE_URL"


class AppConfig(AgentLoopConfig):
    """Everything an App can be configured with. The loop keys (``max_parallel_tool_calls``,
    ``agents``) are the loop's ``AgentLoopConfig``; the rest configure the composition."""

    # Provider options may carry API keys: keep them out of reprs and validation errors.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    providers: dict[str, dict[str, Any]] = Field(default_factory=dict, repr=False)
    persistence_root: str | None = None
    # A PostgreSQL URL (may carry a password: kept out of reprs); see ``App``.
    persistence_url: str | None = Field(default=None, repr=False)
    retry: dict[str, Any] | bool = True
    # On by default: it only acts for a model whose window is known (see plugins.compaction).
    compaction: dict[str, Any] | bool = True
    invariants: bool = False
    # Model-name prefix -> context window / prices overrides (see ``agentloop_nb.models``).
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("persistence_url")
    @classmethod
    def _check_persistence_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(_PG_SCHEMES):
            raise ValueError("persistence_url must be a postgresql:// (or postgres://) URL")
        return value

    @field_validator("models")
    @classmethod
    def _check_models(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        ModelTable(value)  # raises ValueError naming the bad entry
        return value


def _app_config(config: Mapping[str, Any] | AppConfig | None, updates: dict[str, Any]) -> AppConfig:
    """``config`` with the keyword ``updates`` over it, validated. The configuration of a plain
    ``App()`` / ``App(persistence_root=path)`` (what ``%load_ext`` builds) is valid by
    construction: it is constructed, which leaves pydantic's validator build and plugin
    discovery (``importlib.metadata``, every installed distribution's entry points) for the
    first App that needs them."""
    if not config and updates.keys() <= {"persistence_root"}:
        root = updates.get("persistence_root")
        if root is None or isinstance(root, str):
            return AppConfig.model_construct(**updates)
    cfg = config if isinstance(config, AppConfig) else AppConfig.model_validate(dict(config or {}))
    if updates:
        cfg = AppConfig.model_validate({**cfg.model_dump(), **updates})
    return cfg


class _LazyMCP:
    """The ``mcp`` service until a context first reads ``ctx.mcp``: only then is
    ``agentloop_nb.mcp`` imported and the shared ``MCPService`` built (start-up cost); every
    context resolves to that service's view, as if it had been provided directly."""

    __slots__ = ("_service",)

    def __init__(self) -> None:
        self._service: Any = None

    def __bind__(self, ctx: Any) -> Any:
        if self._service is None:
            from .mcp import MCPService

            self._service = MCPService()
        return self._service.__bind__(ctx)

    async def wait_closed(self) -> None:
        """Wait for connections still shutting down (removed, or their scope disposed)."""
        if self._service is not None:
            await self._service.wait_closed()


class App:
    """The default composition. ``App()`` has no persistence; ``App(persistence_root=path)``
    or ``App(persistence=JsonlPersistence(root))`` enables it; ``App(persistence_url=
    "postgresql://...")`` (or, when nothing else is configured, the ``AGENTLOOP_DATABASE_URL``
    environment variable) stores sessions in PostgreSQL (``PostgresPersistence``).
    The retry and compaction plugins are applied unless ``retry=False`` / ``compaction=False``
    (a mapping configures them); compaction acts only for models whose window is known.
    ``await app.aclose()`` disposes every agent, stops background work and flushes the log.

    Raises ``pydantic.ValidationError`` naming the field for invalid configuration.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | AppConfig | None = None,
        *,
        persistence: Any = None,
        persistence_root: str | os.PathLike[str] | None = None,
        persistence_url: str | None = None,
        providers: Mapping[str, Mapping[str, Any]] | None = None,
        retry: Mapping[str, Any] | bool | None = None,
        compaction: Mapping[str, Any] | bool | None = None,
        invariants: bool | None = None,
        models: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        updates: dict[str, Any] = {}
        if providers is not None:
            updates["providers"] = {k: dict(v) for k, v in providers.items()}
        if retry is not None:
            updates["retry"] = retry
        if compaction is not None:
            updates["compaction"] = compaction if isinstance(compaction, bool) else dict(compaction)
        if invariants is not None:
            updates["invariants"] = invariants
        if models is not None:
            updates["models"] = {k: dict(v) for k, v in models.items()}
        if persistence_root is not None:
            updates["persistence_root"] = os.fspath(persistence_root)
        if persistence_url is not None:
            updates["persistence_url"] = persistence_url
        self.config = cfg = _app_config(config, updates)
        self.supervisor = Supervisor()
        self._adapters: list[Any] = []
        self.ctx = ctx = Context()
        ctx.provide("sessions", SessionStore(ctx))
        if persistence is None and cfg.persistence_root is not None:
            from .session import JsonlPersistence  # lazily: an App without a log needs none

            persistence = JsonlPersistence(cfg.persistence_root)
        url = cfg.persistence_url or os.environ.get(DATABASE_URL_ENV) or None
        if persistence is None and url is not None:
            from .session import PostgresPersistence  # lazily: most Apps never use it

            persistence = PostgresPersistence(url)
        self.persistence = persistence
        if persistence is not None:
            ctx.provide("session_persistence", persistence)
            persistence.install(ctx)
        ctx.provide("llm", LlmRuntime(ctx))
        ctx.provide("tools", ToolRuntime(ctx))
        ctx.provide("system_prompt", SystemPrompt(ctx))
        ctx.provide("agents", AgentRegistry())
        # No overrides: the built-in table itself (a table never changes after construction),
        # whose per-model prefix answers every App then shares (docs/architecture.md "Turn,
        # session 14": a fresh App's first step scanned every prefix again)
        ctx.provide("models", ModelTable(cfg.models) if cfg.models else DEFAULT_TABLE)
        self._mcp = _LazyMCP()
        ctx.provide("mcp", self._mcp)
        self._register_providers(cfg.providers)
        # Values of a validated AppConfig: constructed, not validated again (start-up cost).
        loop_cfg = AgentLoopConfig.model_construct(
            max_parallel_tool_calls=cfg.max_parallel_tool_calls,
            max_parallel_tool_calls_total=cfg.max_parallel_tool_calls_total,
            max_concurrent_model_calls=cfg.max_concurrent_model_calls,
            agents=cfg.agents,
        )
        self.agent_loop = AgentLoop(ctx, loop_cfg, spawn=self.supervisor.spawn)
        ctx.provide("agent_loop", self.agent_loop)
        self._install_plugins(cfg)
        self.agent_loop.start_config_agents()

    def _register_providers(self, providers: Mapping[str, Mapping[str, Any]]) -> None:
        from .llm.providers import build_adapters  # lazily: the HTTP adapters import httpx

        for name, adapter in build_adapters(providers).items():
            self.ctx.llm.register_adapter([name], adapter)
            self._adapters.append(adapter)

    def _install_plugins(self, cfg: AppConfig) -> None:
        if cfg.retry:
            from .plugins.retry import RetryPlugin

            self.ctx.plugin(RetryPlugin, cfg.retry if isinstance(cfg.retry, dict) else None)
        if cfg.compaction:
            from .plugins.compaction import CompactionPlugin

            config = cfg.compaction if isinstance(cfg.compaction, dict) else None
            self.ctx.plugin(CompactionPlugin, config)
        if cfg.invariants:
            from .plugins.invariants import invariants

            self.ctx.plugin(invariants)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> "App":
        """Build an App from a TOML (``.toml``) or YAML (``.yaml``/``.yml``) file whose keys are
        ``AppConfig``'s.

        Raises ``ConfigFileError`` (a ``ValueError``) naming the file when it cannot be used
        (another extension, unreadable, over 1 MiB, a syntax error, YAML aliases, a top level that
        is not a mapping), and ``pydantic.ValidationError`` naming the field for a bad setting."""
        from ._configfile import read_config_file  # lazily: YAML files need ``yaml``

        data = read_config_file(path)
        try:
            return cls(data, **kwargs)
        except ValidationError as exc:
            exc.add_note(f"in config file {os.fspath(path)}")  # the traceback names the file
            raise

    async def aclose(self) -> None:
        """Dispose every agent (turns end ``disposed``), stop background tasks, flush and close
        persistence, unwind every plugin and service. Idempotent."""
        await self.agent_loop.aclose()
        await self.supervisor.aclose()
        if self.persistence is not None and hasattr(self.persistence, "aclose"):
            await self.persistence.aclose()
        adapters, self._adapters = self._adapters, []
        for adapter in adapters:  # the HTTP adapters own their httpx clients
            close = getattr(adapter, "aclose", None)
            if close is not None:
                await close()
        await self.ctx.fiber.aclose()
        # A server removed earlier (or whose plugin scope was disposed) may still be shutting
        # down in the background: the App is closed only once its process is reaped.
        await self._mcp.wait_closed()

    async def __aenter__(self) -> "App":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<App agents={[a.id for a in self.agent_loop.list()]!r} persistence={self.persistence!r}>"


__all__ = ["App", "AppConfig"]
