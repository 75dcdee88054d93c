"""Retry plugin: retries transient model-request failures with exponential backoff.

Handles ``agent/request-error`` for the codes in ``Config.codes``; each retry logs a durable,
non-surface ``llm/retry{code, attempt, delay}`` event (widgets show it) and waits — a wait the
turn's signal cancels — then returns ``Retry()``. After ``max_retries`` the failure stands and
the turn ends ``error``.

The plugin instance is published as the ``retry`` service of the context it is applied to
(``app.ctx.retry``), so callers can read its ``config``, compute ``delay_for`` or replace its
``sleep`` (tests record the delays instead of waiting).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

from ..loop import Retry

if TYPE_CHECKING:
    from ..context import Context
    from ..hooks import RequestErrorPayload

DEFAULT_CODES = ("RATE_LIMIT", "OVERLOADED", "SERVER", "TIMEOUT", "TRANSPORT", "EMPTY_RESPONSE")


class RetryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: NonNegativeInt = 5
    base_delay: NonNegativeFloat = 0.5
    max_delay: NonNegativeFloat = 30.0
    max_retry_after: NonNegativeFloat = 60.0
    jitter: float = Field(0.2, ge=0.0, le=1.0)
    codes: tuple[str, ...] = DEFAULT_CODES


class RetryPlugin:
    """Class plugin (``ctx.plugin(RetryPlugin, {...})``); on by default in ``App``.

    Applying it provides the instance as the ``retry`` service (``ctx.retry``); re-applying
    the named plugin through the same context replaces the instance and the service.
    Attributes: ``config``, ``random`` (the jitter source; seed it for reproducible delays),
    ``sleep`` (an ``async (seconds) -> None``; cancelled with the turn)."""

    name = "retry"
    Config = RetryConfig

    def __init__(self, ctx: Context, config: RetryConfig) -> None:
        self.config = config
        self.random = random.Random()
        self.sleep: Callable[[float], Awaitable[Any]] = anyio.sleep
        ctx.on("agent/request-error", self.on_request_error)
        # The public handle on the live instance (App keeps no reference to its plugins).
        ctx.provide("retry", self)

    def delay_for(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based).

        A server's ``retry_after`` is honoured but clamped to ``max_retry_after``; otherwise
        ``base_delay * 2**(attempt-1)`` capped at ``max_delay``, minus up to ``jitter`` of it."""
        c = self.config
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, c.max_retry_after)
        raw = min(c.base_delay * (2 ** (attempt - 1)), c.max_delay)
        return raw * (1.0 - c.jitter * self.random.random())

    async def on_request_error(
        self, payload: RequestErrorPayload, next: Callable[[], Awaitable[Any]]
    ) -> Any:
        failure = payload.failure
        attempt = payload.attempt
        if failure.code not in self.config.codes or attempt > self.config.max_retries:
            return await next()
        delay = round(self.delay_for(attempt, failure.retry_after), 3)
        payload.agent.session.append(
            "llm/retry",
            {
                "code": failure.code,
                "attempt": attempt,
                "delay": delay,
                "turn": payload.turn,
                "step": payload.step,
            },
        )
        await self.sleep(delay)  # the loop runs this hook under the turn's signal: cancel ends it
        return Retry()


__all__ = ["DEFAULT_CODES", "RetryConfig", "RetryPlugin"]
