"""Loop configuration: pydantic models validated at load and at assignment."""

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, PositiveInt, PrivateAttr, model_validator

from .._creation import AgentOptions


class AgentConfig(AgentOptions):
    """One config-listed agent, started automatically with the App: its :class:`AgentOptions`
    fields (inherited, so a new option is configurable at once, validated the same way) plus
    who it is and where its log lives.

    ``session_id`` is a stable exact id (first start creates it, later starts resume it when
    persistence holds it); ``resume_session_id`` requires an existing persisted session. They
    are mutually exclusive."""

    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    id: str
    cwd: str | None = None
    session_id: str | None = None
    resume_session_id: str | None = None

    @model_validator(mode="after")
    def _exclusive_ids(self) -> "AgentConfig":
        if self.session_id is not None and self.resume_session_id is not None:
            raise ValueError(
                "session_id and resume_session_id are mutually exclusive: use session_id for "
                "create-or-resume, resume_session_id to require an existing session"
            )
        return self

    @property
    def options(self) -> AgentOptions:
        """The agent's options alone (a plain :class:`AgentOptions`, as every door takes)."""
        return AgentOptions(**{name: getattr(self, name) for name in AgentOptions.model_fields})


class _LoopLimits(BaseModel):
    """The loop's limits, declared once: :class:`AgentLoopConfig` holds their initial values,
    :class:`LoopSettings` their live ones (``GlobalLimits`` holds no value: its gates read the
    live settings at each admission)."""

    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(extra="forbid", defer_build=True)

    #: Tool bodies of one agent's step running at once (the step's worker pool).
    max_parallel_tool_calls: PositiveInt = 10
    #: One cap on running tool bodies across every agent of the loop (``None``: unlimited).
    max_parallel_tool_calls_total: PositiveInt | None = None
    #: One cap on model streams open at once across every agent (``None``: unlimited).
    max_concurrent_model_calls: PositiveInt | None = None


class AgentLoopConfig(_LoopLimits):
    """The loop's start-up configuration: the initial values of the live limits (see
    :class:`LoopSettings`) and the config-listed agents."""

    agents: list[AgentConfig] = []


def _no_listeners() -> list[Callable[[], None]]:
    # A Python function, not ``list``: pydantic inspects a default factory's signature at each
    # construction, and a builtin's is parsed from its text with ``tokenize``, whose large
    # pattern a plain ``App()`` then compiled (about 15 M instructions; start-up cost).
    return []


class LoopSettings(_LoopLimits):
    """Live settings (``ctx.agent_loop.settings``): assignment is validated, so a value that is
    not a positive integer is refused at the write, not when the next tool group starts."""

    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(validate_assignment=True, extra="forbid", defer_build=True)

    _listeners: list[Callable[[], None]] = PrivateAttr(default_factory=_no_listeners)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every accepted assignment (a raised cap admits waiters)."""
        self._listeners.append(listener)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if not name.startswith("_"):
            for listener in self._listeners:
                listener()


def live_settings(config: AgentLoopConfig) -> LoopSettings:
    """The live settings a loop starts with: ``config``'s value of every limit."""
    # ``config`` is validated: its values are taken as they are (the validator is built with
    # the first assignment, which is validated).
    return LoopSettings.model_construct(
        **{name: getattr(config, name) for name in _LoopLimits.model_fields}
    )
