"""``RequestErrorPayload``, the ``agent/request-error`` waterfall's payload (public through
:mod:`agentloop_nb.hooks`).

Apart from the other loop payloads (``_hook_payloads``) because its ``failure`` is an
``ErrorFinish``: the stream-chunk models load with the first stream, not with
``import agentloop_nb`` (start-up cost), and a payload's type hints must resolve where it is
defined (typing, pydantic and the docs generator evaluate them). A failed request has streamed,
so loading this module then costs nothing more.
"""

from __future__ import annotations

from ._hook_payloads import AgentLike
from ._record import Record, set_field
from .llm import ErrorFinish, RequestFacts, RetryPolicy
from .signals import AbortSignal

__all__ = ["RequestErrorPayload"]


class RequestErrorPayload(Record):
    """Payload of the ``agent/request-error`` waterfall: the failed attempt's error finish
    (``attempt`` counts the attempts of this step, from 1). ``policy``: the prepared call's
    retry policy (``None`` when the route had no adapter or the registration has none).
    ``facts``: the failed request's provider, model, code, status and retry-after."""

    __slots__ = ("agent", "attempt", "facts", "failure", "policy", "signal", "step", "turn")
    __match_args__ = ("agent", "turn", "step", "failure", "signal", "attempt", "policy", "facts")

    agent: AgentLike
    turn: int
    step: int
    failure: ErrorFinish
    signal: AbortSignal
    attempt: int
    policy: RetryPolicy | None
    facts: RequestFacts | None

    def __init__(
        self,
        agent: AgentLike,
        turn: int,
        step: int,
        failure: ErrorFinish,
        signal: AbortSignal,
        attempt: int = 1,
        policy: RetryPolicy | None = None,
        facts: RequestFacts | None = None,
    ) -> None:
        set_field(self, "agent", agent)
        set_field(self, "turn", turn)
        set_field(self, "step", step)
        set_field(self, "failure", failure)
        set_field(self, "signal", signal)
        set_field(self, "attempt", attempt)
        set_field(self, "policy", policy)
        set_field(self, "facts", facts)
