"""The budget plugin through the public API: a reached limit pauses the agent with a durable
`budget/reached` and an approval request; approval grows the limit by its original value and
the step runs; a refusal or no approver ends the turn `rejected` with reason `budget`; App-wide
budgets count every agent; a cancel interrupts the wait."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _loop_helpers import OPTIONS, WAIT, data, events, make_app, new_agent, register, run, scripted

from agentloop_nb import tool
from agentloop_nb.llm import BlockEnd, BlockStart, Finish, Stop, TextDelta, Usage, UsageChunk
from agentloop_nb.plugins.budgets import BudgetPlugin, BudgetRequest
from agentloop_nb.testing import text, tool_call

pytestmark = pytest.mark.anyio


class Approver:
    """An approval service answering ``answer`` and recording what it was asked."""

    def __init__(self, answer: Any = True) -> None:
        self.answer = answer
        self.asked: list[tuple[Any, str | None]] = []
        self.waiting = anyio.Event()
        self.release = anyio.Event()

    async def request(self, request: Any, reason: str | None) -> Any:
        self.asked.append((request, reason))
        if self.answer == "raise":
            raise RuntimeError("the approval UI is gone")
        if self.answer == "wait":
            self.waiting.set()
            await self.release.wait()
            return True
        return self.answer


@tool
def echo(word: str) -> str:
    """Echo a word."""
    return word


def answer(s: str, input_tokens: int, output_tokens: int) -> list[Any]:
    return [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text=s),
        BlockEnd(index=0),
        UsageChunk(usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens)),
        Finish(reason=Stop()),
    ]


def three_steps() -> list[Any]:
    return [
        tool_call("c1", "echo", {"word": "a"}),
        tool_call("c2", "echo", {"word": "b"}),
        text("done"),
    ]


async def test_an_approved_step_limit_grows_by_its_original_value_and_the_step_runs() -> None:
    app = make_app()
    app.ctx.plugin(BudgetPlugin)
    approver = Approver(True)
    app.ctx.provide("approval", approver)
    try:
        register(app, echo)
        agent, _ = new_agent(app, *three_steps())
        app.ctx.budgets.set(agent, max_steps_per_turn=2)
        await run(agent, "go")
        assert data(agent, "budget/reached") == [
            {"limit": "max_steps_per_turn", "value": 2, "used": 2, "scope": "agent"}
        ]
        [(request, reason)] = approver.asked
        assert isinstance(request, BudgetRequest)
        assert (request.agent, request.limit, request.used, request.increase) == (
            agent,
            "max_steps_per_turn",
            2,
            2,
        )
        assert reason is not None and "max_steps_per_turn" in reason
        assert app.ctx.budgets.get(agent) == {"max_steps_per_turn": 4}
        assert data(agent, "turn/end")[-1]["reason"] == {"kind": "completed"}
        assert len(events(agent, "step/start")) == 3
    finally:
        await app.aclose()


@pytest.mark.parametrize("approval", ["deny", "none", "raises", "not-true"])
async def test_a_refused_budget_ends_the_turn_rejected_with_reason_budget(approval: str) -> None:
    app = make_app()
    app.ctx.plugin(BudgetPlugin)
    if approval == "deny":
        app.ctx.provide("approval", Approver(False))
    elif approval == "raises":
        app.ctx.provide("approval", Approver("raise"))
    elif approval == "not-true":
        app.ctx.provide("approval", Approver("yes"))  # only an exact True approves
    try:
        register(app, echo)
        agent, model = new_agent(app, *three_steps())
        app.ctx.budgets.set(agent, max_steps_per_turn=2)
        await run(agent, "go")
        assert data(agent, "turn/end")[-1]["reason"] == {"kind": "rejected", "reason": "budget"}
        assert len(events(agent, "step/start")) == 2
        assert len(model.requests) == 2
        assert len(events(agent, "budget/reached")) == 1
    finally:
        await app.aclose()


async def test_an_app_wide_token_budget_counts_every_agent() -> None:
    app = make_app()
    app.ctx.plugin(BudgetPlugin, {"max_tokens": 30})
    try:
        scripted(app, answer("x", 20, 5), answer("y", 20, 5), answer("z", 1, 1))
        a = app.ctx.agent_loop.create("a", OPTIONS)
        b = app.ctx.agent_loop.create("b", OPTIONS)
        await run(a, "one")  # 25 used: under 30
        await run(b, "one")  # 25 used before it: runs, 50 in all
        await run(a, "two")
        assert data(a, "budget/reached") == [
            {"limit": "max_tokens", "value": 30, "used": 50, "scope": "app"}
        ]
        assert data(a, "turn/end")[-1]["reason"] == {"kind": "rejected", "reason": "budget"}
        assert not events(b, "budget/reached")
    finally:
        await app.aclose()


async def test_a_cost_budget_pauses_and_approval_resumes_the_turn() -> None:
    app = make_app(models={"m": {"input": 1.0, "output": 1.0}})
    app.ctx.plugin(BudgetPlugin)
    approver = Approver(True)
    app.ctx.provide("approval", approver)
    try:
        agent, _ = new_agent(app, answer("x", 600_000, 400_000), answer("y", 10, 10))
        app.ctx.budgets.set(agent, max_cost_usd=0.5)
        await run(agent, "one")  # $1.00 spent: the next step is over the $0.50 budget
        await run(agent, "two")
        reached = data(agent, "budget/reached")
        assert [(d["limit"], d["value"], d["used"]) for d in reached] == [
            ("max_cost_usd", 0.5, pytest.approx(1.0)),
            ("max_cost_usd", 1.0, pytest.approx(1.0)),  # grown once: still reached, asked again
        ]
        assert app.ctx.budgets.get(agent) == {"max_cost_usd": 1.5}
        assert data(agent, "turn/end")[-1]["reason"] == {"kind": "completed"}
    finally:
        await app.aclose()


async def test_cancel_while_waiting_for_budget_approval_aborts_the_turn() -> None:
    app = make_app()
    app.ctx.plugin(BudgetPlugin)
    approver = Approver("wait")
    app.ctx.provide("approval", approver)
    try:
        register(app, echo)
        agent, _ = new_agent(app, *three_steps())
        app.ctx.budgets.set(agent, max_steps_per_turn=1)
        agent.followup("go")
        with anyio.fail_after(WAIT):
            await approver.waiting.wait()
        agent.cancel()
        with anyio.fail_after(WAIT):
            await agent.when_idle()
        assert data(agent, "turn/end")[-1]["reason"]["kind"] == "aborted"
        assert len(events(agent, "step/start")) == 1
    finally:
        await app.aclose()


async def test_without_a_budget_nothing_is_counted_or_asked() -> None:
    app = make_app()
    app.ctx.plugin(BudgetPlugin)
    approver = Approver(False)
    app.ctx.provide("approval", approver)
    try:
        register(app, echo)
        agent, _ = new_agent(app, *three_steps())
        app.ctx.budgets.set(agent, max_steps_per_turn=1)
        app.ctx.budgets.set(agent)  # all None: the budget is removed
        await run(agent, "go")
        assert not approver.asked and not events(agent, "budget/reached")
        assert data(agent, "turn/end")[-1]["reason"] == {"kind": "completed"}
    finally:
        await app.aclose()


def test_a_bad_limit_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="max_steps_per_turn"):
        BudgetPlugin.Config(max_steps_per_turn=0)
