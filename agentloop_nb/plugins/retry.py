"""Retry plugin: retries transient model-request failures with exponential backoff.

Handles ``agent/request-error``. The policy for a failure is chosen in this order:

1. ``providers[<provider>]`` of the plugin's config, for the exact provider that failed — each
   entry names only the fields it changes, the rest come from the plugin's own fields;
2. the request's ``policy``: the retry policy of the adapter registration the call was
   prepared against (``ctx.llm.register_adapter(..., retry_policy=...)``);
3. the plugin's own fields (``max_retries``, ``base_delay``, ...).

When the failure's code is one the policy retries and the retry budget allows it, the plugin
logs a durable, non-surface ``llm/retry{code, attempt, delay, turn, step, provider}`` event
(widgets show it) and waits — a wait the turn's signal cancels — then returns ``Retry()``.
Otherwise the failure stands and the turn ends ``error``. An ``unbounded`` policy retries until
the turn is cancelled (``agent.cancel()``), each wait capped by ``max_delay``.

The plugin instance is published as the ``retry`` service of the context it is applied to
(``app.ctx.retry``), so callers can read its ``config``, compute ``delay_for`` or replace its
``sleep`` (tests record the delays instead of waiting).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from pydantic import Field, ValidationInfo, field_validator

from ..events import LLM_RETRY
from ..hooks import AGENT_REQUEST_ERROR
from ..llm import DEFAULT_RETRY_CODES, RequestFacts, RetryPolicy

if TYPE_CHECKING:
    from ..context import Context
    from ..llm import ErrorFinish  # the chunk models load with the first stream
    from ..signals import AbortSignal

DEFAULT_CODES = DEFAULT_RETRY_CODES


class RetryConfig(RetryPolicy):
    """The plugin's default policy (the inherited fields) plus per-provider policies.

    ``providers`` maps a provider name to the fields that differ for it, e.g.
    ``{"anthropic": {"unbounded": True, "max_delay": 60}}``; unnamed fields keep the plugin's
    values."""

    providers: dict[str, RetryPolicy] = Field(default_factory=dict)

    @field_validator("providers", mode="before")
    @classmethod
    def _over_base(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, Mapping):
            return value  # pydantic names the type error
        base = {k: v for k, v in info.data.items() if k in RetryPolicy.model_fields}
        merged: dict[str, Any] = {}
        for name, entry in value.items():
            if isinstance(entry, RetryPolicy):
                merged[name] = entry
            elif isinstance(entry, Mapping):
                merged[name] = RetryPolicy.model_validate({**base, **entry})
            else:
                merged[name] = entry  # rejected by the field's own validation
        return merged

    @property
    def default_policy(self) -> RetryPolicy:
        """The inherited fields as a plain :class:`RetryPolicy`."""
        # This config's own values, valid already: constructed, not validated again.
        return RetryPolicy.model_construct(
            **{name: getattr(self, name) for name in RetryPolicy.model_fields}
        )


class RequestError(Protocol):
    """The ``agent/request-error`` payload attributes this plugin reads."""

    @property
    def agent(self) -> Any: ...
    @property
    def turn(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def failure(self) -> ErrorFinish: ...
    @property
    def attempt(self) -> int: ...
    @property
    def signal(self) -> AbortSignal: ...
    @property
    def policy(self) -> RetryPolicy | None: ...
    @property
    def facts(self) -> RequestFacts | None: ...


class RetryPlugin:
    """Class plugin (``ctx.plugin(RetryPlugin, {...})``); on by default in ``App``.

    Applying it provides the instance as the ``retry`` service (``ctx.retry``); re-applying
    the named plugin through the same context replaces the instance and the service.
    Attributes: ``config``, ``random`` (the jitter source; seed it for reproducible delays),
    ``sleep`` (an ``async (seconds) -> None``; an abort of the turn's signal cancels it and
    the hook raises ``AbortError``)."""

    name = "retry"
    Config = RetryConfig

    def __init__(self, ctx: Context, config: RetryConfig) -> None:
        self.config = config
        self._default = config.default_policy
        self.random = random.Random()
        self.sleep: Callable[[float], Awaitable[Any]] = anyio.sleep
        ctx.on(AGENT_REQUEST_ERROR, self.on_request_error)
        # The public handle on the live instance (App keeps no reference to its plugins).
        ctx.provide("retry", self)

    def policy_for(self, provider: str | None, request_policy: RetryPolicy | None) -> RetryPolicy:
        """The policy applied to a failure of ``provider`` whose prepared call carried
        ``request_policy`` (see the module docstring for the order)."""
        if provider is not None:
            configured = self.config.providers.get(provider)
            if configured is not None:
                return configured
        return request_policy if request_policy is not None else self._default

    def delay_for(
        self, attempt: int, retry_after: float | None, policy: RetryPolicy | None = None
    ) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based) under ``policy`` (the
        plugin's own by default).

        A server's ``retry_after`` is honoured but clamped to ``max_retry_after``; otherwise
        ``base_delay * 2**(attempt-1)`` capped at ``max_delay``, minus up to ``jitter`` of it."""
        policy = policy or self._default
        if retry_after is not None and retry_after >= 0:
            return policy.delay(attempt, retry_after)
        return policy.delay(attempt, None, self.random.random())

    async def on_request_error(
        self, payload: RequestError, next: Callable[[], Awaitable[Any]]
    ) -> Any:
        failure = payload.failure
        attempt = payload.attempt
        facts = payload.facts
        provider = facts.provider if facts is not None else None
        policy = self.policy_for(provider, payload.policy)
        if not policy.allows(str(failure.code), attempt):
            return await next()
        delay = round(self.delay_for(attempt, failure.retry_after, policy), 3)
        record: dict[str, Any] = {
            "code": failure.code,
            "attempt": attempt,
            "delay": delay,
            "turn": payload.turn,
            "step": payload.step,
        }
        if provider is not None:
            record["provider"] = provider
        payload.agent.session.append(LLM_RETRY, record)
        # An abort ends the wait at once with AbortError (the turn ends aborted, no retry).
        await payload.signal.run(self.sleep(delay))
        from ..loop import Retry  # the loop's decisions load with the first agent

        return Retry()


__all__ = ["DEFAULT_CODES", "RequestError", "RetryConfig", "RetryPlugin"]
