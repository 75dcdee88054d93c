"""The agent loop's decisions: ``Enter`` / ``Reject`` (``agent/pre-step``), ``RequestConfig``
(``agent/request``) and ``Retry`` (``agent/request-error``), small frozen pydantic models, and
the ``agent/request`` payload that carries a ``RequestConfig`` (a record; its type hints
resolve here).

Public through :mod:`agentloop_nb.hooks`, :mod:`agentloop_nb.loop` and the package root, which
resolve them on first access; the loop's driver and request path import them, so they load
with the first agent, not with ``import agentloop_nb`` or ``App()`` (a pydantic model class
costs its build at import). The bundled plugins that answer with one import it where they
answer. Annotations are evaluated, not strings (pydantic compiles a string annotation first).
"""

from typing import Literal

from ._decision import Decision
from ._hook_payloads import AgentLike
from ._record import Record, set_field
from .messages import UserMessage
from .signals import AbortSignal

__all__ = ["Enter", "Reject", "RequestConfig", "RequestPayload", "Retry"]


class Enter(Decision):
    """``agent/pre-step`` decision: run the step with exactly these messages entering it."""

    kind: Literal["enter"] = "enter"
    messages: tuple[UserMessage, ...] = ()


class Reject(Decision):
    """``agent/pre-step`` decision: end the turn ``rejected`` without a step."""

    kind: Literal["reject"] = "reject"
    reason: str | None = None


class Retry(Decision):
    """``agent/request-error`` decision: re-run the same step (input is not re-admitted)."""

    kind: Literal["retry"] = "retry"


class RequestConfig(Decision):
    """The per-request configuration the ``agent/request`` waterfall may replace.

    Frozen: a listener returns ``payload.config.model_copy(update={...})``."""

    provider: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: str | None = None


class RequestPayload(Record):
    """Payload of the ``agent/request`` waterfall: the proposed request configuration."""

    __slots__ = ("agent", "config", "signal", "step", "turn")
    __match_args__ = ("agent", "turn", "step", "config", "signal")

    agent: AgentLike
    turn: int
    step: int
    config: RequestConfig
    signal: AbortSignal

    def __init__(
        self,
        agent: AgentLike,
        turn: int,
        step: int,
        config: RequestConfig,
        signal: AbortSignal,
    ) -> None:
        set_field(self, "agent", agent)
        set_field(self, "turn", turn)
        set_field(self, "step", step)
        set_field(self, "config", config)
        set_field(self, "signal", signal)


# The public path (``agentloop_nb.Enter``, ...), as the package root's eager names report:
# reprs, docs and pickles name them whichever home loads them.
Enter.__module__ = Reject.__module__ = Retry.__module__ = RequestConfig.__module__ = "agentloop_nb"
