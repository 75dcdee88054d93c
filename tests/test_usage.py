"""`agent.usage` and `agent.usage_by_turn`: summed from the log, priced per the models table
(overrides included), unreported usage counting 0, unknown prices making the cost unknown,
and the totals surviving a resume (they are derived from the log alone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _loop_helpers import OPTIONS, WAIT, make_app, new_agent, run, scripted

from agentloop_nb import App, UsageTotals
from agentloop_nb.llm import BlockEnd, BlockStart, Finish, Stop, TextDelta, Usage, UsageChunk

pytestmark = pytest.mark.anyio

PRICES = {"m": {"input": 1.0, "output": 2.0, "cache_read": 0.5, "cache_write": 4.0}}


def answer(text: str, usage: Usage | None) -> list[Any]:
    chunks: list[Any] = [BlockStart(index=0, block_type="text"), TextDelta(index=0, text=text)]
    chunks.append(BlockEnd(index=0))
    if usage is not None:
        chunks.append(UsageChunk(usage=usage))
    return [*chunks, Finish(reason=Stop())]


@pytest.fixture
async def priced_app() -> AsyncIterator[App]:
    """An app that knows ``PRICES``, closed after the test."""
    app = make_app(models=PRICES)
    yield app
    await app.aclose()


async def test_usage_sums_every_reported_category_and_prices_it(priced_app: App) -> None:
    app = priced_app
    agent, _ = new_agent(
        app,
        answer("a", Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=400)),
        answer("b", Usage(input_tokens=2000, output_tokens=50, cache_write_tokens=300,
                          reasoning_tokens=7)),
    )  # fmt: skip
    await run(agent, "one")
    await run(agent, "two")
    usage = agent.usage
    assert isinstance(usage, UsageTotals)
    assert (usage.input_tokens, usage.output_tokens) == (3000, 150)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (400, 300)
    assert usage.reasoning_tokens == 7
    expected = (3000 * 1.0 + 150 * 2.0 + 400 * 0.5 + 300 * 4.0) / 1e6
    assert usage.cost_usd == pytest.approx(expected)


async def test_usage_by_turn_has_one_entry_per_turn_that_add_up_to_the_total(
    priced_app: App,
) -> None:
    app = priced_app
    agent, _ = new_agent(
        app,
        answer("a", Usage(input_tokens=10, output_tokens=1)),
        answer("b", Usage(input_tokens=20, output_tokens=2)),
        answer("c", None),
    )
    for prompt in ("one", "two", "three"):
        await run(agent, prompt)
    turns = agent.usage_by_turn
    assert [t.input_tokens for t in turns] == [10, 20, 0]
    assert [t.output_tokens for t in turns] == [1, 2, 0]
    assert turns[2].cost_usd == 0.0  # nothing reported: counts 0, costs nothing
    total = turns[0] + turns[1] + turns[2]
    assert total == agent.usage


async def test_an_unknown_model_makes_the_cost_unknown_but_keeps_the_tokens() -> None:
    app = make_app()
    try:
        agent, _ = new_agent(app, answer("a", Usage(input_tokens=5, output_tokens=3)))
        await run(agent)
        assert agent.usage.total_tokens == 8
        assert agent.usage.cost_usd is None
        assert agent.usage_by_turn[0].cost_usd is None
    finally:
        await app.aclose()


async def test_a_free_model_reports_zero_cost() -> None:
    app = make_app(models={"m": {"input": 0, "output": 0}})
    try:
        agent, _ = new_agent(app, answer("a", Usage(input_tokens=5, output_tokens=3)))
        await run(agent)
        assert agent.usage.cost_usd == 0.0
    finally:
        await app.aclose()


async def test_each_message_is_priced_at_the_model_of_its_request() -> None:
    from agentloop_nb.hooks import RequestPayload

    prices = {"cheap": {"input": 1.0, "output": 1.0}, "dear": {"input": 10.0, "output": 10.0}}
    app = make_app(models=prices)
    try:
        scripted(app, answer("a", Usage(input_tokens=100)), answer("b", Usage(input_tokens=100)))
        agent = app.ctx.agent_loop.create("a", OPTIONS.model_copy(update={"model": "cheap"}))
        await run(agent, "one")

        async def to_dear(payload: RequestPayload, next: Any) -> Any:
            config = await next()
            return config.model_copy(update={"model": "dear"})

        app.ctx.on("agent/request", to_dear)
        await run(agent, "two")
        assert [t.cost_usd for t in agent.usage_by_turn] == pytest.approx([100e-6, 1000e-6])
    finally:
        await app.aclose()


async def test_usage_is_rebuilt_from_the_log_after_a_resume(tmp_path: Path) -> None:
    app = App(persistence_root=tmp_path, models=PRICES)
    try:
        scripted(app, answer("a", Usage(input_tokens=10, output_tokens=4)))
        handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
        await run(handle.agent, "one")
        before = handle.agent.usage
        await handle.dispose()
    finally:
        await app.aclose()
    app2 = App(persistence_root=tmp_path, models=PRICES)
    try:
        with anyio.fail_after(WAIT):
            handle = await app2.ctx.agents.resume(resume_session_id="s1")
        assert handle.agent.usage == before
        assert len(handle.agent.usage_by_turn) == 1
    finally:
        await app2.aclose()


async def test_usage_read_between_turns_follows_the_growing_log(priced_app: App) -> None:
    app = priced_app
    agent, _ = new_agent(
        app,
        answer("a", Usage(input_tokens=10, output_tokens=1)),
        answer("b", Usage(input_tokens=20, output_tokens=2)),
    )
    await run(agent, "one")
    assert agent.usage.total_tokens == 11 and len(agent.usage_by_turn) == 1
    await run(agent, "two")
    assert agent.usage.total_tokens == 33
    assert [t.total_tokens for t in agent.usage_by_turn] == [11, 22]
