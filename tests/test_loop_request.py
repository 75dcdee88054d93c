"""The loop's request path: prepared calls fill adapter defaults and mark them in the header,
the marks are stripped before the next proposal, the prepared adapter serves the request, a
route without adapter stays open to ``llm/stream`` listeners, and ``agent/request-error``
carries the prepared call's policy and the failed request's facts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _loop_helpers import OPTIONS, WAIT, data, make_app, reasons, register, run

from agentloop_nb import AgentOptions, App, Retry
from agentloop_nb.llm import (
    ErrorFinish,
    Finish,
    GenerateOptions,
    RequestFacts,
    RetryPolicy,
    StreamChunk,
)
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import ScriptedModel, text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


class DefaultingModel(ScriptedModel):
    """A scripted adapter that supplies request defaults (and optionally a retry policy)."""

    def __init__(
        self,
        script: Iterable[Any] = (),
        *,
        defaults: dict[str, Any] | None = None,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(script)
        self.offered = dict(defaults or {})
        self.retry_policy = retry_policy
        self.configs: list[Any] = []

    def defaults(self, config: Any) -> dict[str, Any]:
        self.configs.append(config)
        return dict(self.offered)


def app_with(model: Any, provider: str = "scripted", **kw: Any) -> App:
    app = make_app(**kw)
    app.ctx.llm.register_adapter([provider], model)
    return app


def proposals(app: App) -> list[Any]:
    """Record the config each ``agent/request`` waterfall receives."""
    seen: list[Any] = []

    def record(payload: Any, next: Any) -> Any:
        seen.append(payload.config)
        return next()

    app.ctx.on("agent/request", record)
    return seen


def headers(agent: Any) -> list[dict[str, Any]]:
    """The logged headers as plain JSON (the log keeps frozen snapshots)."""
    return [json.loads(json.dumps(d["header"])) for d in data(agent, "request/header")]


# -- adapter defaults ---------------------------------------------------------------------------


async def test_adapter_defaults_fill_unset_fields_and_the_header_marks_them() -> None:
    model = DefaultingModel([text("ok")], defaults={"max_tokens": 512, "reasoning_effort": "low"})
    app = app_with(model)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    (request,) = model.requests
    assert (request.max_tokens, request.reasoning_effort) == (512, "low")
    (header,) = headers(agent)
    assert header["config"] == {
        "provider": "scripted",
        "model": "m",
        "max_tokens": 512,
        "reasoning_effort": "low",
    }
    assert header["adapter_defaults"] == ["max_tokens", "reasoning_effort"]
    assert reasons(agent) == ["completed"]  # the invariant companion rebuilt it from the log
    await app.aclose()


async def test_an_explicit_setting_wins_over_the_adapter_default_and_is_not_marked() -> None:
    model = DefaultingModel([text("ok")], defaults={"max_tokens": 512})
    app = app_with(model)
    options = AgentOptions(provider="scripted", model="m", max_tokens=100)
    agent = app.ctx.agent_loop.create("a", options)
    await run(agent)
    assert model.requests[0].max_tokens == 100
    (header,) = headers(agent)
    assert header["config"]["max_tokens"] == 100
    assert "adapter_defaults" not in header  # nothing came from the adapter
    await app.aclose()


async def test_an_adapter_without_defaults_logs_the_header_unchanged() -> None:
    model = ScriptedModel([text("ok")])
    app = app_with(model)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    (header,) = headers(agent)
    assert set(header) == {"config", "system", "tools"}
    assert header["config"] == {"provider": "scripted", "model": "m"}
    await app.aclose()


async def test_adapter_defaults_are_stripped_from_the_next_steps_proposal() -> None:
    model = DefaultingModel(
        [tool_call("c1", "echo", {"text": "x"}), text("done")], defaults={"max_tokens": 512}
    )
    app = app_with(model)
    register(app, echo)
    seen = proposals(app)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    assert [c.max_tokens for c in seen] == [None, None]  # never masquerades as a user setting
    assert [c.max_tokens for c in model.configs] == [None, None]  # the adapter refills it
    assert [r.max_tokens for r in model.requests] == [512, 512]
    assert len(headers(agent)) == 1  # the same effective header: logged once
    await app.aclose()


async def test_explicit_listener_settings_persist_while_the_new_route_refills_its_defaults() -> (
    None
):
    first = DefaultingModel([tool_call("c1", "echo", {"text": "x"})], defaults={"max_tokens": 512})
    other = DefaultingModel([text("done")], defaults={"max_tokens": 64})
    app = app_with(first)
    app.ctx.llm.register_adapter(["other"], other)
    register(app, echo)
    seen = proposals(app)

    def steer(payload: Any, next: Any) -> Any:
        if payload.step == 1:
            return payload.config.model_copy(update={"temperature": 0.3})
        return payload.config.model_copy(update={"provider": "other"})  # a route change

    app.ctx.on("agent/request", steer)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    assert [(c.temperature, c.max_tokens) for c in seen] == [(None, None), (0.3, None)]
    (sent_first,) = first.requests
    (sent_other,) = other.requests
    assert (sent_first.temperature, sent_first.max_tokens) == (0.3, 512)
    assert (sent_other.provider, sent_other.temperature, sent_other.max_tokens) == (
        "other",
        0.3,
        64,
    )
    second = headers(agent)[1]
    assert second["config"]["max_tokens"] == 64 and second["adapter_defaults"] == ["max_tokens"]
    assert [d["reason"] for d in data(agent, "request/header")] == ["initial", "change"]
    await app.aclose()


async def test_new_agent_options_restart_the_proposal() -> None:
    model = DefaultingModel([text("one"), text("two")])
    app = app_with(model)
    seen = proposals(app)

    def once(payload: Any, next: Any) -> Any:
        if payload.turn == 1:
            return payload.config.model_copy(update={"temperature": 0.9})
        return next()

    app.ctx.on("agent/request", once)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent, "first")
    agent.options = AgentOptions(provider="scripted", model="m2")
    await run(agent, "second")
    assert [(c.model, c.temperature) for c in seen] == [("m", None), ("m2", None)]
    assert [(r.model, r.temperature) for r in model.requests] == [("m", 0.9), ("m2", None)]
    await app.aclose()


async def test_an_async_defaults_hook_is_awaited_and_cancel_interrupts_it() -> None:
    entered = anyio.Event()

    class Slow(ScriptedModel):
        async def defaults(self, config: Any) -> dict[str, Any]:
            entered.set()
            await anyio.Event().wait()  # ignores the signal on purpose
            return {}

    model = Slow([text("never")])
    app = app_with(model)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    agent.followup("hi")
    with anyio.fail_after(WAIT):
        await entered.wait()
    agent.cancel()
    with anyio.fail_after(WAIT):
        await agent.when_idle()
    assert reasons(agent) == ["aborted"] and model.requests == []
    await app.aclose()


async def test_a_resumed_agent_does_not_take_an_adapter_default_as_its_setting(
    tmp_path: Path,
) -> None:
    model = DefaultingModel([text("first")], defaults={"max_tokens": 512})
    app = app_with(model, persistence=JsonlPersistence(tmp_path))
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    await run(handle.agent, "first")
    await app.aclose()

    model = DefaultingModel([text("second")], defaults={"max_tokens": 2048})
    app = app_with(model, persistence=JsonlPersistence(tmp_path))
    seen = proposals(app)
    agent = (await app.ctx.agents.resume(resume_session_id="s1")).agent
    assert agent.options.max_tokens is None
    await run(agent, "second")
    assert seen[0].max_tokens is None and model.requests[0].max_tokens == 2048
    assert [h["config"]["max_tokens"] for h in headers(agent)] == [512, 2048]
    await app.aclose()


# -- the prepared adapter serves the request ----------------------------------------------------


async def test_the_stream_goes_to_the_prepared_adapter_even_if_the_registration_changes() -> None:
    prepared = DefaultingModel([text("from the prepared adapter")], defaults={"max_tokens": 512})
    replacement = ScriptedModel([text("from the replacement")])
    app = make_app()
    disposer = app.ctx.llm.register_adapter(["scripted"], prepared)

    def swap(payload: Any) -> None:
        # Between header logging and dispatch (as a hot reload of the adapter's cell would).
        if payload.event.type == "request/header" and not replacement.requests:
            disposer()
            app.ctx.llm.register_adapter(["scripted"], replacement)

    app.ctx.on("session/event", swap)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    assert len(prepared.requests) == 1 and replacement.requests == []
    assert app.ctx.llm.adapter_for("scripted") is replacement
    (message,) = data(agent, "assistant/message")
    assert message["message"]["content"][0]["text"] == "from the prepared adapter"
    await app.aclose()


# -- a route without adapter ------------------------------------------------------------------


async def _chunks(chunks: Iterable[StreamChunk]) -> AsyncIterator[StreamChunk]:
    for chunk in chunks:
        yield chunk


async def test_a_route_without_adapter_keeps_its_config_for_an_llm_stream_listener() -> None:
    app = make_app()
    served: list[GenerateOptions] = []

    async def serve(payload: Any, next: Any) -> Any:
        if payload.options.provider != "ghost":
            return await next()
        served.append(payload.options)
        return _chunks(text("served by a listener"))

    app.ctx.on("llm/stream", serve)
    options = AgentOptions(provider="ghost", model="g", max_tokens=77)
    agent = app.ctx.agent_loop.create("a", options)
    await run(agent)
    (request,) = served
    assert (request.provider, request.model, request.max_tokens) == ("ghost", "g", 77)
    (header,) = headers(agent)
    assert header["config"] == {"provider": "ghost", "model": "g", "max_tokens": 77}
    assert "adapter_defaults" not in header
    assert reasons(agent) == ["completed"]
    await app.aclose()


async def test_a_route_without_adapter_or_listener_ends_the_turn_no_adapter() -> None:
    app = make_app(retry=False)
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="ghost", model="g"))
    await run(agent)
    (reason,) = [d["reason"] for d in data(agent, "turn/end")]
    assert (reason["kind"], reason["code"]) == ("error", "NO_ADAPTER")
    await app.aclose()


# -- agent/request-error ------------------------------------------------------------------------


def failing(code: str = "RATE_LIMIT", status: int = 429, retry_after: float = 1.5) -> list[Any]:
    error = ErrorFinish(code=code, message="slow down", status=status, retry_after=retry_after)
    return [Finish(reason=error)]


async def test_request_error_carries_the_registrations_policy_and_the_requests_facts() -> None:
    policy = RetryPolicy(max_retries=1, base_delay=0.0, jitter=0.0)
    model = ScriptedModel([failing(), text("recovered")])
    app = make_app(retry=False)
    app.ctx.llm.register_adapter(["scripted"], model, retry_policy=policy)
    payloads: list[Any] = []

    def recover(payload: Any, next: Any) -> Any:
        payloads.append(payload)
        return Retry()

    app.ctx.on("agent/request-error", recover)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    (payload,) = payloads
    assert payload.policy is policy
    assert payload.facts == RequestFacts(
        provider="scripted", model="m", code="RATE_LIMIT", status=429, retry_after=1.5
    )
    assert (payload.turn, payload.step, payload.attempt) == (1, 1, 1)
    with pytest.raises(AttributeError):
        payload.facts.code = "SERVER"  # frozen
    assert reasons(agent) == ["completed"]
    await app.aclose()


async def test_an_adapters_own_retry_policy_is_the_registrations_policy() -> None:
    policy = RetryPolicy(unbounded=True)
    model = DefaultingModel([failing(), text("ok")], retry_policy=policy)
    app = app_with(model, retry=False)
    policies: list[Any] = []

    def recover(payload: Any, next: Any) -> Any:
        policies.append(payload.policy)
        return Retry()

    app.ctx.on("agent/request-error", recover)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    assert policies == [policy]
    await app.aclose()


async def test_an_unprepared_route_has_no_policy_but_still_its_facts() -> None:
    app = make_app(retry=False)

    async def serve(payload: Any, next: Any) -> Any:
        return _chunks(failing("SERVER", 503, 0.5))

    app.ctx.on("llm/stream", serve)
    payloads: list[Any] = []
    app.ctx.on("agent/request-error", lambda payload, next: payloads.append(payload) or next())
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="ghost", model="g"))
    await run(agent)
    (payload,) = payloads
    assert payload.policy is None
    assert payload.facts == RequestFacts("ghost", "g", "SERVER", 503, 0.5)
    assert reasons(agent) == ["error"]
    await app.aclose()


# -- the system prompt names the effective request ----------------------------------------------


async def test_the_system_prompt_names_the_provider_and_model_an_agent_request_listener_chose() -> (
    None
):
    first = ScriptedModel([tool_call("c1", "echo", {"text": "x"})])
    other = ScriptedModel([text("done")])
    app = app_with(first)
    app.ctx.llm.register_adapter(["other"], other)
    register(app, echo)

    def reroute(payload: Any, next: Any) -> Any:
        if payload.step == 1:
            return payload.config.model_copy(update={"model": "m-large"})
        return payload.config.model_copy(update={"provider": "other", "model": "o-1"})

    app.ctx.on("agent/request", reroute)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    (sent_first,) = first.requests
    (sent_other,) = other.requests
    assert "Provider: scripted. Model: m-large." in sent_first.system
    assert "Provider: other. Model: o-1." in sent_other.system
    assert [h["system"] for h in headers(agent)] == [sent_first.system, sent_other.system]
    assert reasons(agent) == ["completed"]
    await app.aclose()


async def test_a_plugins_own_model_variable_is_not_overridden_by_the_request() -> None:
    model = ScriptedModel([text("done")])
    app = app_with(model)
    app.ctx.system_prompt.variable("model", lambda agent: "my-label")
    app.ctx.on(
        "agent/request", lambda payload, next: payload.config.model_copy(update={"model": "m2"})
    )
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    (sent,) = model.requests
    assert sent.model == "m2" and "Model: my-label." in sent.system
    await app.aclose()


async def test_services_provided_mid_turn_and_between_turns_serve_the_next_request() -> None:
    # The loop keeps the services it resolved while none is provided or withdrawn: a system
    # prompt provided by a tool (mid-turn) serves the turn's next step, and an ``llm``
    # provided on the agent's context between turns serves the next turn.
    from agentloop_nb.llm import LlmRuntime
    from agentloop_nb.prompt import SystemPrompt

    app = make_app()
    model = ScriptedModel([tool_call("c1", "shadow", {}), text("one")])
    app.ctx.llm.register_adapter(["scripted"], model)
    agent = app.ctx.agent_loop.create("a", OPTIONS)

    @tool
    def shadow() -> str:
        """Shadow the system prompt."""
        agent.ctx.provide("system_prompt", SystemPrompt(agent.ctx, persona="Shadowed."))
        return "done"

    register(app, shadow)
    try:
        await run(agent, "first")
        assert [r.system == "Shadowed." for r in model.requests] == [False, True]
        other = ScriptedModel([text("two")])
        runtime = LlmRuntime(agent.ctx)
        runtime.register_adapter(["scripted"], other)
        agent.ctx.provide("llm", runtime)
        await run(agent, "second")
        assert len(model.requests) == 2 and len(other.requests) == 1
        assert reasons(agent) == ["completed", "completed"]
    finally:
        await app.aclose()


def test_the_request_options_the_loop_builds_are_what_the_constructor_builds() -> None:
    """The loop sets the frozen dataclass's slots itself (benchmarks/README.md "Step (session
    12)"); the result must be the constructor's, field by field, and still frozen."""
    import dataclasses

    from agentloop_nb.llm._options import request_options
    from agentloop_nb.signals import AbortController

    signal = AbortController().signal
    values: dict[str, Any] = {
        "provider": "p",
        "model": "m",
        "messages": (),
        "system": "s",
        "tools": ({"name": "t"},),
        "max_tokens": 7,
        "reasoning_effort": "low",
        "temperature": 0.5,
        "session_id": "id",
        "signal": signal,
    }
    built = request_options(**values)
    expected = GenerateOptions(**values)
    assert type(built) is GenerateOptions
    for field in dataclasses.fields(GenerateOptions):
        assert getattr(built, field.name) is getattr(expected, field.name), field.name
    assert built == expected
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.model = "other"  # type: ignore[misc]
    assert dataclasses.replace(built, model="other").model == "other"


OPTION_CASES = {
    "route only": AgentOptions(provider="p", model="m"),
    "every field": AgentOptions(
        provider="p", model="m", max_tokens=5, temperature=0.5, reasoning_effort="low"
    ),
    "an int temperature, validated": AgentOptions(provider="p", model="m", temperature=1),
    "an int temperature, unvalidated": AgentOptions.model_construct(
        provider="p", model="m", temperature=1
    ),
    "nothing": AgentOptions(),
}


@pytest.mark.parametrize("name", OPTION_CASES)
def test_the_seed_config_is_what_the_constructor_builds(name: str) -> None:
    # The seed is built from validated options' fields (docs/architecture.md "Turn, session
    # 14"); it must be the constructor's config in every respect.
    from agentloop_nb.hooks import RequestConfig
    from agentloop_nb.loop._request import seed_config

    options = OPTION_CASES[name]
    built = seed_config(options)
    expected = RequestConfig(
        provider=options.provider,
        model=options.model,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        reasoning_effort=options.reasoning_effort,
    )
    assert type(built) is RequestConfig
    assert built.__getstate__() == expected.__getstate__()
    assert [type(v) for v in built.__dict__.values()] == [
        type(v) for v in expected.__dict__.values()
    ]


def test_the_seed_configs_field_types_are_the_request_configs() -> None:
    from agentloop_nb.hooks import RequestConfig
    from agentloop_nb.loop._request import _CONFIG_FIELDS, _CONFIG_TYPES

    assert tuple(AgentOptions.model_fields) == _CONFIG_FIELDS
    for name, kind in zip(_CONFIG_FIELDS, _CONFIG_TYPES, strict=True):
        assert RequestConfig.model_fields[name].annotation == kind | None, name


@pytest.mark.parametrize("name", OPTION_CASES)
def test_the_headers_config_is_the_configs_dump(name: str) -> None:
    from agentloop_nb.loop._request import _config_dump, seed_config
    from agentloop_nb.session import freeze_json

    config = seed_config(OPTION_CASES[name])
    assert _config_dump(config) == config.model_dump(exclude_none=True)
    assert freeze_json(_config_dump(config), label="x") == _config_dump(config)
