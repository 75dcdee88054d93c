"""``ctx.llm.prepare_call``: adapter defaults fill unset fields and are named, a registration's
retry policy travels with the prepared call, the prepared adapter serves the stream even after
the registration changed, and ``RetryPolicy`` computes bounded or unbounded delays."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _llm_helpers import collect, make_ctx, opts
from pydantic import ValidationError

from agentloop_nb import RequestConfig
from agentloop_nb.llm import (
    LlmStreamPayload,
    PreparedCall,
    RetryPolicy,
    StreamChunk,
    assemble,
)
from agentloop_nb.signals import AbortController, AbortError
from agentloop_nb.testing import ScriptedModel, text


class Defaulting(ScriptedModel):
    def __init__(self, offered: Any, *, retry_policy: RetryPolicy | None = None) -> None:
        super().__init__([text("ok")])
        self.offered = offered
        self.retry_policy = retry_policy

    def defaults(self, config: Any) -> Any:
        return self.offered


@pytest.mark.anyio
async def test_prepare_call_fills_only_unset_fields_and_names_them() -> None:
    ctx = make_ctx()
    adapter = Defaulting({"max_tokens": 512, "temperature": 0.5, "reasoning_effort": None})
    ctx.llm.register_adapter(["scripted"], adapter)
    config = RequestConfig(provider="scripted", model="m", temperature=0.1)
    prepared = await ctx.llm.prepare_call(config)
    assert prepared.config == config.model_copy(update={"max_tokens": 512})
    assert prepared.adapter_defaults == frozenset({"max_tokens"})
    assert prepared.adapter is adapter and prepared.retry_policy is None


@pytest.mark.anyio
async def test_prepare_call_without_an_adapter_keeps_the_config() -> None:
    ctx = make_ctx()
    config = RequestConfig(provider="ghost", model="g", max_tokens=3)
    prepared = await ctx.llm.prepare_call(config)
    assert prepared == PreparedCall(config)
    assert (prepared.adapter, prepared.retry_policy, prepared.adapter_defaults) == (
        None,
        None,
        frozenset(),
    )


@pytest.mark.anyio
async def test_prepare_call_awaits_async_defaults() -> None:
    class Async(ScriptedModel):
        async def defaults(self, config: Any) -> dict[str, Any]:
            await asyncio.sleep(0)  # a real suspension point, not synchronisation
            return {"reasoning_effort": "high"}

    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], Async())
    prepared = await ctx.llm.prepare_call(RequestConfig(provider="scripted", model="m"))
    assert prepared.config.reasoning_effort == "high"
    assert prepared.adapter_defaults == frozenset({"reasoning_effort"})


@pytest.mark.anyio
async def test_prepare_call_rejects_bad_defaults_naming_the_problem() -> None:
    ctx = make_ctx()
    config = RequestConfig(provider="scripted", model="m")
    dispose = ctx.llm.register_adapter(["scripted"], Defaulting({"max_output": 5}))
    with pytest.raises(TypeError, match=r"unknown config field\(s\) \['max_output'\]"):
        await ctx.llm.prepare_call(config)
    dispose()
    dispose = ctx.llm.register_adapter(["scripted"], Defaulting([("max_tokens", 5)]))
    with pytest.raises(TypeError, match="return a dict"):
        await ctx.llm.prepare_call(config)
    dispose()
    ctx.llm.register_adapter(["scripted"], Defaulting({"max_tokens": "many"}))
    with pytest.raises(ValidationError, match="max_tokens"):
        await ctx.llm.prepare_call(config)


@pytest.mark.anyio
async def test_prepare_call_with_an_aborted_signal_raises_abort_error() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], Defaulting({"max_tokens": 5}))
    controller = AbortController()
    controller.abort("stop")
    with pytest.raises(AbortError):
        await ctx.llm.prepare_call(
            RequestConfig(provider="scripted", model="m"), signal=controller.signal
        )


@pytest.mark.anyio
async def test_an_abort_interrupts_async_defaults_that_ignore_the_signal() -> None:
    entered = asyncio.Event()

    class Stuck(ScriptedModel):
        async def defaults(self, config: Any) -> dict[str, Any]:
            entered.set()
            await asyncio.Event().wait()  # ignores the signal on purpose
            return {}

    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], Stuck())
    controller = AbortController()
    config = RequestConfig(provider="scripted", model="m")
    task = asyncio.ensure_future(ctx.llm.prepare_call(config, signal=controller.signal))
    await entered.wait()
    controller.abort("enough")
    with pytest.raises(AbortError):
        await asyncio.wait_for(task, 5)


@pytest.mark.anyio
async def test_registration_retry_policy_wins_over_the_adapters_own() -> None:
    ctx = make_ctx()
    own = RetryPolicy(max_retries=1)
    ctx.llm.register_adapter(["a"], Defaulting({}, retry_policy=own))
    ctx.llm.register_adapter(
        ["b"], Defaulting({}, retry_policy=own), retry_policy={"unbounded": True}
    )
    ctx.llm.register_adapter(["c"], Defaulting({}))
    a, b, c = [
        await ctx.llm.prepare_call(RequestConfig(provider=p, model="m")) for p in ("a", "b", "c")
    ]
    assert a.retry_policy is own
    assert b.retry_policy == RetryPolicy(unbounded=True)
    assert c.retry_policy is None
    with pytest.raises(TypeError, match="RetryPolicy or a mapping"):
        ctx.llm.register_adapter(["d"], Defaulting({}), retry_policy=3)  # type: ignore[arg-type]
    assert "d" not in ctx.llm.providers()


@pytest.mark.anyio
async def test_a_prepared_stream_goes_to_the_prepared_adapter_not_the_current_one() -> None:
    ctx = make_ctx()
    first = ScriptedModel([text("first")])
    dispose = ctx.llm.register_adapter(["scripted"], first)
    prepared = await ctx.llm.prepare_call(RequestConfig(provider="scripted", model="m"))
    dispose()
    second = ScriptedModel([text("second")])
    ctx.llm.register_adapter(["scripted"], second)
    recorded: list[StreamChunk] = []

    async def record(payload: LlmStreamPayload, next: Any) -> Any:
        async def wrap(source: Any) -> AsyncIterator[StreamChunk]:
            async for chunk in source:
                recorded.append(chunk)
                yield chunk

        return wrap(await next())

    ctx.on("llm/stream", record)  # listeners still see (and wrap) a prepared stream
    assert assemble(await collect(ctx.llm.stream(opts(), prepared=prepared)))[0].text == "first"
    assert len(first.requests) == 1 and second.requests == [] and recorded
    assert assemble(await collect(ctx.llm.stream(opts())))[0].text == "second"


def test_retry_policy_delays_double_cap_and_never_overflow() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0, jitter=0.0, unbounded=True)
    assert [policy.delay(n, None) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert policy.delay(100_000, None) == 4.0
    assert policy.delay(3, 120.0) == 60.0  # Retry-After, clamped to max_retry_after
    assert policy.allows("RATE_LIMIT", 10**6) and not policy.allows("AUTH", 1)
    bounded = RetryPolicy(max_retries=2)
    assert bounded.allows("SERVER", 2) and not bounded.allows("SERVER", 3)
