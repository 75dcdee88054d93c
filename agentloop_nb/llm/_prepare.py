"""Prepared calls: what ``ctx.llm.prepare_call`` resolves before a model request is logged and
dispatched, plus the two frozen records request-error recovery receives.

- :class:`RetryPolicy`: how a failed request is retried (codes, backoff, bounded or unbounded).
  An adapter registration may carry one; the retry plugin uses it.
- :class:`RequestFacts`: the immutable provider facts of one failed request.
- :class:`PreparedCall`: the effective config (the adapter's defaults filled in), the names of
  the fields the adapter supplied, the registration's retry policy and the exact adapter object
  that must serve the request.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt

from .._record import Record, set_field
from ..errors import InvalidTypeError

if TYPE_CHECKING:
    from ._chunks import ErrorFinish

#: The failure codes a default policy retries: transient provider or network trouble.
DEFAULT_RETRY_CODES = (
    "RATE_LIMIT",
    "OVERLOADED",
    "SERVER",
    "TIMEOUT",
    "TRANSPORT",
    "EMPTY_RESPONSE",
)

#: The exponent is capped so an unbounded policy's ten-thousandth retry still computes a delay.
_MAX_EXPONENT = 62


class RetryPolicy(BaseModel):
    """How to retry a failed model request (frozen; unknown fields are rejected).

    ``codes`` are the failure codes worth retrying. Retry number ``n`` (1-based) waits the
    server's ``Retry-After`` clamped to ``max_retry_after`` when it sent one, else
    ``base_delay * 2**(n-1)`` capped at ``max_delay``, minus up to ``jitter`` of it. After
    ``max_retries`` retries the failure stands — unless ``unbounded``: then the request is
    retried until the turn is cancelled, every wait still capped by ``max_delay``.
    """

    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    max_retries: NonNegativeInt = 5
    unbounded: bool = False
    base_delay: NonNegativeFloat = 0.5
    max_delay: NonNegativeFloat = 30.0
    max_retry_after: NonNegativeFloat = 60.0
    jitter: float = Field(0.2, ge=0.0, le=1.0)
    codes: tuple[str, ...] = DEFAULT_RETRY_CODES

    def allows(self, code: str, attempt: int) -> bool:
        """Whether failure ``code`` on attempt ``attempt`` (1-based) is retried."""
        return code in self.codes and (self.unbounded or attempt <= self.max_retries)

    def delay(self, attempt: int, retry_after: float | None, unit: float = 1.0) -> float:
        """Seconds to wait before retry ``attempt`` (1-based). ``unit`` in ``[0, 1)`` is the
        jitter draw (``1.0`` would remove the whole jitter share; pass ``random()``)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_retry_after)
        exponent = min(max(attempt - 1, 0), _MAX_EXPONENT)
        raw = min(self.base_delay * (2.0**exponent), self.max_delay)
        return raw * (1.0 - self.jitter * unit)


def as_retry_policy(
    value: RetryPolicy | Mapping[str, Any] | None, *, label: str
) -> RetryPolicy | None:
    """``value`` as a :class:`RetryPolicy` (a mapping is validated); ``TypeError`` otherwise."""
    if value is None or isinstance(value, RetryPolicy):
        return value
    if isinstance(value, Mapping):
        return RetryPolicy.model_validate(dict(value))
    raise InvalidTypeError(
        f"{label}: expected a RetryPolicy or a mapping, got {type(value).__name__}"
    )


class RequestFacts(Record):
    """What the provider said about one failed request: the route it was sent on, the failure
    ``code``, the HTTP ``status`` when there was one and the server's ``retry_after`` seconds."""

    __slots__ = ("code", "model", "provider", "retry_after", "status")
    __match_args__ = ("provider", "model", "code", "status", "retry_after")

    provider: str
    model: str
    code: str
    status: int | None
    retry_after: float | None

    def __init__(
        self,
        provider: str,
        model: str,
        code: str,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        set_field(self, "provider", provider)
        set_field(self, "model", model)
        set_field(self, "code", code)
        set_field(self, "status", status)
        set_field(self, "retry_after", retry_after)

    @classmethod
    def of(cls, provider: str, model: str, failure: "ErrorFinish") -> "RequestFacts":
        return cls(provider, model, str(failure.code), failure.status, failure.retry_after)


C = TypeVar("C", bound=BaseModel)


class PreparedCall(Record, Generic[C]):
    """One request, resolved against the adapter that will serve it.

    ``config`` is the effective config: the proposal with the adapter's defaults filled into
    fields it left unset. ``adapter_defaults`` names exactly those fields. ``retry_policy`` is
    the adapter registration's (``None`` when it has none or the route has no adapter).
    ``adapter`` is the exact adapter object (``None``: no adapter is registered for the
    provider, and the config is kept unchanged so an ``llm/stream`` listener can serve it).
    Pass the prepared call to ``ctx.llm.stream(options, prepared=...)`` so the request goes
    to this adapter even if the registration changes in between.
    """

    __slots__ = ("adapter", "adapter_defaults", "config", "retry_policy")
    __match_args__ = ("config", "adapter_defaults", "retry_policy", "adapter")

    config: C
    adapter_defaults: frozenset[str]
    retry_policy: RetryPolicy | None
    adapter: Any

    def __init__(
        self,
        config: C,
        adapter_defaults: frozenset[str] = frozenset(),
        retry_policy: RetryPolicy | None = None,
        adapter: Any = None,
    ) -> None:
        set_field(self, "config", config)
        set_field(self, "adapter_defaults", adapter_defaults)
        set_field(self, "retry_policy", retry_policy)
        set_field(self, "adapter", adapter)


def restrict_defaults(adapter: Any, config: BaseModel, proposed: Any) -> dict[str, Any]:
    """``proposed`` (what the adapter's ``defaults(config)`` answered) restricted to the
    config's unset fields. Raises ``TypeError`` when it is not a mapping (``None`` means no
    defaults) or names a field the config does not have."""
    if proposed is None:
        return {}
    if not isinstance(proposed, Mapping):
        raise InvalidTypeError(
            f"{type(adapter).__name__}.defaults() returned {type(proposed).__name__}; "
            "return a dict of config field names to default values"
        )
    fields = type(config).model_fields
    update: dict[str, Any] = {}
    for key, value in proposed.items():
        if key not in fields:
            unknown = sorted(str(k) for k in proposed if k not in fields)
            raise InvalidTypeError(
                f"{type(adapter).__name__}.defaults() names unknown config field(s) {unknown}; "
                f"known: {sorted(fields)}"
            )
        # An adapter default never overrides a setting the proposal made explicitly.
        if value is not None and getattr(config, key) is None:
            update[key] = value
    return update


__all__ = [
    "DEFAULT_RETRY_CODES",
    "PreparedCall",
    "RequestFacts",
    "RetryPolicy",
    "as_retry_policy",
    "restrict_defaults",
]
