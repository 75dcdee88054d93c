"""The retry plugin (on by default in ``App``) against real HTTP failures from llmock: a rate
limit honouring ``Retry-After``, giving up after ``max_retries``, leaving non-transient codes
alone, bounded jittered backoff, a wait that ``agent.cancel()`` interrupts; then its policies
(per provider, per adapter registration, unbounded) against scripted failures."""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from peers.loopback import LoopbackServer, json_reply, sse_reply
from pydantic import ValidationError

from agentloop_nb import Agent, AgentOptions, App
from agentloop_nb.llm import ErrorFinish, Finish, RetryPolicy
from agentloop_nb.plugins.retry import DEFAULT_CODES, RetryConfig, RetryPlugin
from agentloop_nb.testing import ScriptedModel, text

pytestmark = pytest.mark.anyio

KEY = "sk-test-retry-0123456789"
WAIT = 10.0  # seconds: a guard against a hang, never a synchronisation point
MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5"}


class SleepRecorder:
    """Stands in for the plugin's ``sleep``: records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@asynccontextmanager
async def llmock_app(llmock: Any, provider: str, **kw: Any) -> AsyncIterator[App]:
    entry: dict[str, Any] = {"base_url": llmock.base_url(provider), "api_key": KEY}
    if provider == "openai":  # llmock answers a window probe from its script: name the window
        entry["context_window"] = 128_000
    app = App(invariants=True, providers={provider: entry}, **kw)
    adapter = app.ctx.llm.adapter_for(provider)
    try:
        yield app
    finally:
        await app.aclose()
        await adapter.aclose()  # App.aclose() leaves the adapter's HTTP client open


def start(app: App, provider: str, prompt: str = "hi") -> Agent:
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider=provider, model=MODELS[provider]))
    agent.followup(prompt)
    return agent


async def idle(agent: Agent) -> None:
    with anyio.fail_after(WAIT):
        await agent.when_idle()


def data(agent: Agent, type_: str) -> list[Any]:
    return [json.loads(json.dumps(e.data)) for e in agent.session.events if e.type == type_]


def turn_ends(agent: Agent) -> list[dict[str, Any]]:
    return [d["reason"] for d in data(agent, "turn/end")]


# -- through the App and real HTTP -----------------------------------------------------------------


def test_app_publishes_its_retry_plugin_as_a_service() -> None:
    app = App(retry={"max_retries": 3})
    assert isinstance(app.ctx.retry, RetryPlugin)
    assert app.ctx.retry.config.max_retries == 3
    # Re-applying the named plugin replaces the instance behind the service.
    app.ctx.plugin(RetryPlugin, {"max_retries": 1})
    assert app.ctx.retry.config.max_retries == 1
    with pytest.raises(AttributeError, match="no service 'retry'"):
        _ = App(retry=False).ctx.retry


@pytest.mark.peer
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_rate_limit_then_success_is_one_turn_with_one_retry_honouring_retry_after(
    llmock: Any, provider: str
) -> None:
    llmock.fail(429, retry_after=2.5)
    llmock.reply("Recovered.")
    async with llmock_app(llmock, provider) as app:
        sleep = app.ctx.retry.sleep = SleepRecorder()
        agent = start(app, provider)
        await idle(agent)
    assert sleep.delays == [2.5]
    retries = data(agent, "llm/retry")
    assert [(r["code"], r["attempt"], r["delay"]) for r in retries] == [("RATE_LIMIT", 1, 2.5)]
    assert turn_ends(agent) == [{"kind": "completed"}]
    assert len(data(agent, "turn/start")) == 1 and len(data(agent, "step/start")) == 1
    (attempt,) = data(agent, "assistant/attempt")
    assert (attempt["failure"]["code"], attempt["failure"]["status"]) == ("RATE_LIMIT", 429)
    (message,) = data(agent, "assistant/message")
    assert message["message"]["content"] == [{"type": "text", "text": "Recovered."}]
    first, second = llmock.requests
    assert (first.status, second.status) == (429, 200)
    assert first.fingerprint == second.fingerprint  # the very same request, re-sent


@pytest.mark.peer
async def test_exhausted_retries_end_the_turn_error_with_the_failure_code(llmock: Any) -> None:
    llmock.fail(503, times=3, retry_after=0.2, message="upstream exploded")
    llmock.reply("never reached")
    async with llmock_app(llmock, "openai", retry={"max_retries": 2}) as app:
        sleep = app.ctx.retry.sleep = SleepRecorder()
        agent = start(app, "openai")
        await idle(agent)
    assert [(r["code"], r["attempt"]) for r in data(agent, "llm/retry")] == [
        ("SERVER", 1),
        ("SERVER", 2),
    ]
    assert sleep.delays == [0.2, 0.2]  # the server's Retry-After, each time
    (reason,) = turn_ends(agent)
    assert (reason["kind"], reason["code"]) == ("error", "SERVER")
    assert "upstream exploded" in reason["message"]
    assert [r.status for r in llmock.requests] == [503, 503, 503]
    assert data(agent, "assistant/message") == []


async def test_failures_without_retry_after_back_off_exponentially() -> None:
    # llmock always sends Retry-After on 5xx; this server answers a bare 500 twice, then text.
    failure = json_reply(500, {"error": {"message": "try later", "type": "server_error"}})
    answer = sse_reply(
        'data: {"choices":[{"index":0,"delta":{"content":"Up again."}}]}\n\n'
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        "data: [DONE]\n\n"
    )
    with LoopbackServer([failure, failure, answer]) as server:
        entry = {"base_url": server.url + "/v1", "api_key": KEY, "context_window": 128_000}
        providers = {"openai": entry}
        app = App(invariants=True, providers=providers, retry={"base_delay": 0.25, "jitter": 0})
        adapter = app.ctx.llm.adapter_for("openai")
        sleep = app.ctx.retry.sleep = SleepRecorder()
        try:
            agent = start(app, "openai")
            await idle(agent)
        finally:
            await app.aclose()
            await adapter.aclose()
    assert sleep.delays == [0.25, 0.5]
    assert [r["delay"] for r in data(agent, "llm/retry")] == [0.25, 0.5]
    assert turn_ends(agent) == [{"kind": "completed"}] and len(server.requests) == 3


@pytest.mark.peer
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_auth_failure_is_not_retried(llmock: Any, provider: str) -> None:
    llmock.fail(401, message="invalid api key")
    llmock.reply("never reached")
    async with llmock_app(llmock, provider) as app:
        sleep = app.ctx.retry.sleep = SleepRecorder()
        agent = start(app, provider)
        await idle(agent)
    assert "AUTH" not in DEFAULT_CODES
    assert data(agent, "llm/retry") == [] and sleep.delays == []
    (reason,) = turn_ends(agent)
    assert (reason["kind"], reason["code"]) == ("error", "AUTH")
    assert [r.status for r in llmock.requests] == [401]


@pytest.mark.peer
async def test_cancel_during_the_retry_wait_ends_the_turn_aborted_promptly(llmock: Any) -> None:
    llmock.fail(429, retry_after=30)  # the plugin really waits 30 s unless cancelled
    llmock.reply("never reached")
    async with llmock_app(llmock, "openai") as app:
        waiting = anyio.Event()

        def on_event(payload: Any) -> None:
            if payload.event.type == "llm/retry":
                waiting.set()

        app.ctx.on("session/event", on_event)
        agent = start(app, "openai")
        with anyio.fail_after(WAIT):
            await waiting.wait()
        began = time.monotonic()
        assert agent.status == "running"
        agent.cancel()
        await idle(agent)
        elapsed = time.monotonic() - began
    assert elapsed < 5.0  # nowhere near the 30 s Retry-After
    (retry,) = data(agent, "llm/retry")
    assert (retry["code"], retry["delay"]) == ("RATE_LIMIT", 30)
    assert turn_ends(agent) == [{"kind": "aborted", "cause": {"kind": "user"}}]
    assert [r.status for r in llmock.requests] == [429]  # no retry after the cancel


# -- delay_for --------------------------------------------------------------------------------------


def plugin(**config: Any) -> RetryPlugin:
    retry = App(retry=config).ctx.retry
    assert isinstance(retry, RetryPlugin)
    return retry


def test_backoff_doubles_up_to_max_delay_and_jitter_only_shortens_it() -> None:
    retry = plugin(base_delay=0.5, max_delay=4.0, jitter=0.25)
    retry.random = random.Random(1234)
    delays = [retry.delay_for(attempt, None) for attempt in range(1, 9) for _ in range(50)]
    for i, delay in enumerate(delays):
        raw = min(0.5 * 2 ** (i // 50), 4.0)
        assert raw * 0.75 <= delay <= raw, (i // 50 + 1, delay)
    assert len(set(delays)) > 300  # jitter really varies the delay
    # Seeded, the sequence is reproducible.
    again = plugin(base_delay=0.5, max_delay=4.0, jitter=0.25)
    again.random = random.Random(1234)
    assert [again.delay_for(a, None) for a in range(1, 9) for _ in range(50)] == delays


def test_zero_jitter_gives_the_exact_exponential_schedule() -> None:
    retry = plugin(base_delay=0.25, max_delay=3.0, jitter=0)
    assert [retry.delay_for(a, None) for a in range(1, 7)] == [0.25, 0.5, 1.0, 2.0, 3.0, 3.0]


def test_retry_after_is_honoured_without_jitter_and_clamped_to_max_retry_after() -> None:
    retry = plugin(jitter=1.0, max_retry_after=10.0)
    retry.random = random.Random(0)
    assert retry.delay_for(3, 2.5) == 2.5
    assert retry.delay_for(1, 0.0) == 0.0
    assert retry.delay_for(1, 120.0) == 10.0


# -- policies: per provider, per registration, unbounded --------------------------------------------


def failure(code: str = "SERVER") -> list[Any]:
    return [Finish(reason=ErrorFinish(code=code, message=f"{code.lower()} trouble"))]


class AlwaysFailing:
    """An adapter whose every request fails with ``code``."""

    def __init__(self, code: str = "OVERLOADED") -> None:
        self.code = code
        self.requests = 0

    async def stream(self, options: Any) -> AsyncIterator[Any]:
        self.requests += 1
        for chunk in failure(self.code):
            yield chunk


class BlockAfter(SleepRecorder):
    """Records delays; the ``n``-th wait never ends on its own (only a cancel ends it)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.reached = anyio.Event()

    async def __call__(self, seconds: float) -> None:
        await super().__call__(seconds)
        if len(self.delays) >= self.n:
            self.reached.set()
            await anyio.Event().wait()


async def scripted_run(app: App, provider: str = "scripted") -> Agent:
    agent = app.ctx.agent_loop.create(provider, AgentOptions(provider=provider, model="m"))
    agent.followup("hi")
    await idle(agent)
    return agent


async def test_a_provider_entry_changes_only_its_fields_for_that_provider_only() -> None:
    config = {
        "max_retries": 0,
        "base_delay": 0.1,
        "jitter": 0,
        "providers": {"scripted": {"max_retries": 2}},
    }
    app = App(retry=config)
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel([failure()] * 3 + [text("never")]))
    app.ctx.llm.register_adapter(["other"], ScriptedModel([failure(), text("never")]))
    sleep = app.ctx.retry.sleep = SleepRecorder()
    scripted_agent = await scripted_run(app)
    other_agent = await scripted_run(app, "other")
    await app.aclose()
    retries = data(scripted_agent, "llm/retry")
    assert [(r["attempt"], r["delay"], r["provider"]) for r in retries] == [
        (1, 0.1, "scripted"),
        (2, 0.2, "scripted"),  # base_delay and jitter come from the plugin's own fields
    ]
    assert sleep.delays == [0.1, 0.2]
    assert [r["kind"] for r in turn_ends(scripted_agent)] == ["error"]
    assert data(other_agent, "llm/retry") == []  # max_retries 0 still applies elsewhere


async def test_the_registrations_policy_applies_when_the_config_names_no_provider() -> None:
    policy = RetryPolicy(max_retries=1, base_delay=0.0, jitter=0.0, codes=("SERVER",))
    app = App(retry={"max_retries": 5})
    model = ScriptedModel([failure()] * 3)
    app.ctx.llm.register_adapter(["scripted"], model, retry_policy=policy)
    app.ctx.retry.sleep = SleepRecorder()
    agent = await scripted_run(app)
    await app.aclose()
    assert [r["attempt"] for r in data(agent, "llm/retry")] == [1]  # not the plugin's 5
    assert len(model.requests) == 2
    (reason,) = turn_ends(agent)
    assert (reason["kind"], reason["code"]) == ("error", "SERVER")


async def test_a_provider_entry_wins_over_the_registrations_policy() -> None:
    app = App(retry={"providers": {"scripted": {"max_retries": 0}}})
    app.ctx.llm.register_adapter(
        ["scripted"], ScriptedModel([failure(), text("x")]), retry_policy={"max_retries": 3}
    )
    agent = await scripted_run(app)
    await app.aclose()
    assert data(agent, "llm/retry") == [] and turn_ends(agent)[0]["code"] == "SERVER"


async def test_an_unbounded_policy_retries_past_max_retries_until_the_agent_is_cancelled() -> None:
    config = {"max_retries": 2, "base_delay": 0.5, "max_delay": 2.0, "jitter": 0}
    app = App(retry={**config, "providers": {"flaky": {"unbounded": True}}})
    model = AlwaysFailing()
    app.ctx.llm.register_adapter(["flaky"], model)
    sleep = app.ctx.retry.sleep = BlockAfter(25)
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="flaky", model="m"))
    agent.followup("hi")
    with anyio.fail_after(WAIT):
        await sleep.reached.wait()
    assert agent.status == "running"
    agent.cancel()
    await idle(agent)
    await app.aclose()
    assert sleep.delays == [0.5, 1.0] + [2.0] * 23  # capped, never giving up on its own
    assert [r["attempt"] for r in data(agent, "llm/retry")] == list(range(1, 26))
    assert model.requests == 25
    assert turn_ends(agent) == [{"kind": "aborted", "cause": {"kind": "user"}}]


def test_provider_entries_are_validated_over_the_plugins_fields() -> None:
    config = RetryConfig(max_delay=7.0, providers={"a": {"unbounded": True}})
    assert config.providers["a"] == RetryPolicy(max_delay=7.0, unbounded=True)
    assert config.default_policy == RetryPolicy(max_delay=7.0)
    with pytest.raises(ValidationError, match="max_retrys"):
        RetryConfig(providers={"a": {"max_retrys": 1}})
    with pytest.raises(ValidationError):
        App(retry={"providers": {"a": 3}})
