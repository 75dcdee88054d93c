"""Budget plugin: limits on cost, tokens and steps per turn that **pause** an agent.

``app.ctx.plugin(BudgetPlugin)`` publishes the instance as ``ctx.budgets``;
``ctx.budgets.set(agent=None, *, max_cost_usd=None, max_tokens=None, max_steps_per_turn=None)``
sets a budget: for one agent, or (``agent=None``) one budget shared by every agent of the App.
The plugin's config takes the App-wide limits too (``config={"max_tokens": 10_000}``).

What counts (from the session logs, see ``UsageTotals``): ``max_cost_usd`` the summed
``cost_usd`` (a cost that is unknown because a model has no price never reaches the limit);
``max_tokens`` input + output tokens; ``max_steps_per_turn`` the steps the running turn has
already run. An agent budget counts that agent; the App budget counts every live agent for cost
and tokens and the running turn of the agent at hand for steps.

At ``agent/pre-step`` a reached limit pauses the agent: a durable
``budget/reached{limit, value, used, scope}`` event, then
``await ctx.approval.request(BudgetRequest(agent, limit, used, increase), reason)`` — the same
approval service tool ``Ask`` decisions use. An exact ``True`` grows the limit by ``increase``
(its original value) and the step runs (asked again while it is still reached); anything else
— a refusal, no approval service, a failing one — answers ``Reject("budget")``, so the turn ends
``rejected`` with reason ``budget``. Cancelling the turn while it waits interrupts the wait.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from uuid import uuid4

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, PositiveInt

from ..events import BUDGET_REACHED
from ..hooks import AGENT_PRE_STEP, Reject
from ..usage import UsageTotals

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["LIMITS", "BudgetConfig", "BudgetPlugin", "BudgetRequest"]

_log = logging.getLogger(__name__)

Limit = Literal["max_cost_usd", "max_tokens", "max_steps_per_turn"]
LIMITS: tuple[Limit, ...] = ("max_cost_usd", "max_tokens", "max_steps_per_turn")
Scope = Literal["agent", "app"]


class BudgetConfig(BaseModel):
    """The App-wide limits (``None``: no limit)."""

    model_config = ConfigDict(extra="forbid")

    max_cost_usd: NonNegativeFloat | None = None
    max_tokens: PositiveInt | None = None
    max_steps_per_turn: PositiveInt | None = None


@dataclass(frozen=True, slots=True)
class BudgetRequest:
    """What the approval service is asked: may ``agent`` go past ``limit`` (``used`` so far)
    if the limit grows by ``increase``? ``value`` is the limit now, ``scope`` ``"agent"`` or
    ``"app"``. ``call_id``, ``name`` and ``arguments`` let an approval UI built for tool calls
    show the request as it shows a tool call."""

    agent: Any
    limit: str
    used: float
    increase: float
    value: float = 0.0
    scope: Scope = "agent"
    call_id: str = field(default_factory=lambda: f"budget-{uuid4().hex[:12]}")

    @property
    def name(self) -> str:
        return "budget"

    @property
    def arguments(self) -> str:
        # tool-call argument text, spaced as a model writes it (like ``dumps_arguments``)
        return json.dumps(
            {
                "limit": self.limit,
                "value": self.value,
                "used": self.used,
                "increase": self.increase,
                "scope": self.scope,
            }
        )


@dataclass(slots=True)
class _Budget:
    original: dict[str, float]
    current: dict[str, float]


def _limits(**values: float | None) -> dict[str, float]:
    return {k: v for k, v in values.items() if v is not None}


class BudgetPlugin:
    """Class plugin; see the module docstring. Named ``budgets``: applying it again replaces
    the earlier instance (and its budgets)."""

    name = "budgets"
    Config = BudgetConfig

    def __init__(self, ctx: Context, config: BudgetConfig) -> None:
        self.ctx = ctx
        self._budgets: dict[str | None, _Budget] = {}
        app = config.model_dump(exclude_none=True)
        if app:
            self._budgets[None] = _Budget(dict(app), dict(app))
        ctx.on(AGENT_PRE_STEP, self._on_pre_step)
        ctx.provide("budgets", self)

    # -- public -------------------------------------------------------------------------------

    def set(
        self,
        agent: Any = None,
        *,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        max_steps_per_turn: int | None = None,
    ) -> None:
        """Set the budget of ``agent`` (an ``Agent`` or its id), or the App-wide one for
        ``None``; it replaces that scope's earlier budget (all ``None``: no budget). Raises
        ``ValueError`` for a negative limit or a non-positive token/step limit."""
        checked = BudgetConfig(
            max_cost_usd=max_cost_usd, max_tokens=max_tokens, max_steps_per_turn=max_steps_per_turn
        )
        limits = checked.model_dump(exclude_none=True)
        key = _key(agent)
        if limits:
            self._budgets[key] = _Budget(dict(limits), dict(limits))
        else:
            self._budgets.pop(key, None)

    def get(self, agent: Any = None) -> dict[str, float]:
        """The current limits of ``agent`` (or the App-wide ones): grown by approvals."""
        budget = self._budgets.get(_key(agent))
        return dict(budget.current) if budget is not None else {}

    def used(
        self, agent: Any, limit: str, scope: Scope = "agent", step: int = 1
    ) -> int | float | None:
        """How much of ``limit`` is used for ``agent`` in ``scope`` before step ``step`` of its
        running turn: steps and tokens as ints, cost in USD (``None``: unknown, a cost
        without a price)."""
        if limit == "max_steps_per_turn":
            return max(0, step - 1)
        usage = self._usage(agent, scope)
        if limit == "max_tokens":
            return usage.total_tokens
        return usage.cost_usd

    # -- the hook -----------------------------------------------------------------------------

    async def _on_pre_step(self, payload: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        agent = payload.agent
        scopes: tuple[tuple[str | None, Scope], ...] = ((agent.id, "agent"), (None, "app"))
        for key, scope in scopes:
            budget = self._budgets.get(key)
            if budget is None:
                continue
            for limit in LIMITS:
                if limit in budget.current and not await self._within(
                    agent, budget, limit, scope, payload.step
                ):
                    return Reject(reason="budget")
        return await next()

    async def _within(
        self, agent: Any, budget: _Budget, limit: str, scope: Scope, step: int
    ) -> bool:
        """Whether the step may run under ``limit``: not reached, or approved until it is not."""
        while True:
            value = budget.current.get(limit)
            used = self.used(agent, limit, scope, step)
            if value is None or used is None or used < value:
                return True
            agent.session.append(
                BUDGET_REACHED, {"limit": limit, "value": value, "used": used, "scope": scope}
            )
            increase = budget.original[limit]
            request = BudgetRequest(agent, limit, used, increase, value, scope)
            reason = f"{scope} budget {limit} reached: used {used:g} of {value:g}"
            if not await self._approve(agent, request, reason):
                return False
            budget.current[limit] = value + increase

    async def _approve(self, agent: Any, request: BudgetRequest, reason: str) -> bool:
        service = _service(agent.ctx, "approval") or _service(self.ctx, "approval")
        if service is None or not callable(getattr(service, "request", None)):
            return False
        try:
            answer = await service.request(request, reason)
        except Exception:
            _log.warning("approval service failed for a budget request", exc_info=True)
            return False
        return answer is True

    def _usage(self, agent: Any, scope: Scope) -> UsageTotals:
        if scope == "agent":
            usage: UsageTotals = agent.usage
            return usage
        total = UsageTotals()
        agent_loop = _service(self.ctx, "agent_loop")
        others = agent_loop.list() if agent_loop is not None else [agent]
        for other in others:
            total = total + other.usage
        return total


def _key(agent: Any) -> str | None:
    if agent is None or isinstance(agent, str):
        return agent
    return str(agent.id)


def _service(ctx: Any, name: str) -> Any:
    try:
        return getattr(ctx, name, None)
    except Exception:  # a context names the missing service in its own error
        return None
