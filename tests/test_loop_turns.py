"""Turns and steps: order, pre-step, request config, headers, stream logging, max-tokens,
error containment, request-error recovery, turn-stopping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from _loop_helpers import (
    OPTIONS,
    data,
    events,
    idle,
    make_app,
    new_agent,
    reasons,
    register,
    run,
    scripted,
    types,
    user_texts,
)
from pydantic import ValidationError

from agentloop_nb.app import App
from agentloop_nb.llm import (
    BlockEnd,
    BlockStart,
    ErrorFinish,
    Finish,
    MaxTokens,
    ReasoningDelta,
    Stop,
    TextDelta,
    ToolCallDelta,
    Usage,
    UsageChunk,
)
from agentloop_nb.loop import AgentOptions, Enter, Reject, RequestConfig, Retry
from agentloop_nb.messages import ReasoningBlock, TextBlock, UserMessage
from agentloop_nb.plugins.retry import RetryPlugin
from agentloop_nb.testing import error, max_tokens, text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


@pytest.fixture
async def app() -> AsyncIterator[App]:
    app = make_app(retry=False)
    yield app
    await app.aclose()


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


async def test_a_tool_turn_logs_events_in_spec_order(app: App) -> None:
    register(app, echo)
    agent, model = new_agent(app, tool_call("c1", "echo", {"text": "ping"}), text("done"))
    await run(agent)
    assert types(agent) == [
        "agent/inbox/spliced",  # followup
        "turn/start",
        "agent/inbox/spliced",  # claim
        "step/start",
        "user/message",
        "request/header",
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert data(agent, "turn/end") == [{"turn": 1, "reason": {"kind": "completed"}}]
    assert [dict(d) for d in data(agent, "step/start")] == [
        {"turn": 1, "step": 1},
        {"turn": 1, "step": 2},
    ]
    result = data(agent, "tool/result")[0]
    assert (result["turn"], result["step"], result["call_id"], result["content"]) == (
        1,
        1,
        "c1",
        "ping",
    )
    assert result["is_error"] is False
    assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "tool"]
    assert tuple(model.requests[1].messages) == tuple(agent.session.derive_messages()[:3])


async def test_status_flips_running_then_idle_around_the_turns(app: App) -> None:
    agent, _ = new_agent(app, text("a"), text("b"))
    statuses: list[str] = []
    app.ctx.on("agent/status", lambda p: statuses.append(p.status))
    agent.followup("1")
    agent.followup("2")
    await idle(agent)
    assert statuses == ["running", "idle"]
    assert [d["turn"] for d in data(agent, "turn/start")] == [1, 2]
    assert agent.turn == 2


async def test_pre_step_reject_ends_the_turn_rejected_without_a_step(app: App) -> None:
    agent, model = new_agent(app, text("never"))
    payloads: list[Any] = []

    async def reject(payload: Any, next: Any) -> Any:
        payloads.append(payload)
        return Reject()

    app.ctx.on("agent/pre-step", reject)
    await run(agent, "blocked")
    assert reasons(agent) == ["rejected"] and "step/start" not in types(agent)
    assert model.requests == [] and agent.inbox.next_turn == ()  # the claim stays removed
    (p,) = payloads
    assert (p.agent, p.turn, p.step, [m.text for m in p.messages]) == (agent, 1, 1, ["blocked"])
    assert dict(data(agent, "turn/end")[0]["reason"]) == {"kind": "rejected"}
    assert not p.signal.aborted


def test_the_pre_step_payload_the_loop_builds_is_what_the_constructor_builds() -> None:
    """The loop sets the record's slots itself (docs/architecture.md "Step, session 13"); the
    result must be the constructor's, field by field, and still frozen."""
    from dataclasses import FrozenInstanceError

    from agentloop_nb._hook_payloads import pre_step_payload
    from agentloop_nb.hooks import PreStepPayload
    from agentloop_nb.signals import AbortController

    agent, signal = object(), AbortController().signal
    messages = (UserMessage(id="u", content=(TextBlock(text="hi"),)),)
    built = pre_step_payload(agent, messages, 2, 3, signal)  # type: ignore[arg-type]
    expected = PreStepPayload(agent, messages, 2, 3, signal)  # type: ignore[arg-type]
    assert type(built) is PreStepPayload
    for name in PreStepPayload.__match_args__:
        assert getattr(built, name) is getattr(expected, name), name
    assert built == expected
    with pytest.raises(FrozenInstanceError):
        built.step = 4  # type: ignore[misc]


def test_the_default_enter_decision_is_what_model_construct_builds() -> None:
    """The loop sets the decision's slots itself (docs/architecture.md "Turn, session 14"):
    the same state as ``Enter.model_construct(messages=...)``, still frozen, and its own
    fields-set per decision."""
    from pydantic import ValidationError

    from agentloop_nb.hooks import Enter
    from agentloop_nb.loop._driver import _enter_claimed

    messages = (UserMessage(id="u", content=(TextBlock(text="hi"),)),)
    built = _enter_claimed(messages)
    expected = Enter.model_construct(messages=messages)
    assert type(built) is Enter
    assert built.__getstate__() == expected.__getstate__()
    assert built.messages is messages
    assert built == expected
    assert _enter_claimed(messages).model_fields_set is not built.model_fields_set
    with pytest.raises(ValidationError):
        built.messages = ()  # type: ignore[misc]


async def test_a_pre_step_listener_passing_a_later_step_on_enters_nothing_new(app: App) -> None:
    agent, _ = new_agent(app, tool_call("c1", "noop", {}), text("done"))

    @tool
    async def noop() -> str:
        """Do nothing."""
        return "ok"

    app.ctx.tools.register(noop)
    decisions: list[Any] = []

    async def spy(payload: Any, next: Any) -> Any:
        decision = await next()
        decisions.append((payload.step, decision))
        return decision

    app.ctx.on("agent/pre-step", spy)
    await run(agent, "hi")
    assert [step for step, _ in decisions] == [1, 2]
    assert [m.text for m in decisions[0][1].messages] == ["hi"]
    assert type(decisions[1][1]) is Enter and decisions[1][1].messages == ()
    assert reasons(agent) == ["completed"]


async def test_a_reject_reason_is_logged_with_the_turn_end(app: App) -> None:
    agent, _model = new_agent(app, text("never"))
    app.ctx.on("agent/pre-step", lambda payload, next: Reject("off-topic prompt"))
    await run(agent, "blocked")
    assert dict(data(agent, "turn/end")[0]["reason"]) == {
        "kind": "rejected",
        "reason": "off-topic prompt",
    }


async def test_pre_step_enter_with_no_messages_at_step_one_completes_without_a_step(
    app: App,
) -> None:
    agent, model = new_agent(app, text("never"))

    async def swallow(payload: Any, next: Any) -> Any:
        return Enter(messages=())

    app.ctx.on("agent/pre-step", swallow)
    await run(agent)
    assert reasons(agent) == ["completed"] and "step/start" not in types(agent)
    assert model.requests == []


async def test_pre_step_enter_decides_which_messages_enter_the_step(app: App) -> None:
    agent, model = new_agent(app, text("ok"))
    extra = UserMessage(id="extra", content=(TextBlock(text="added by plugin"),))

    async def add(payload: Any, next: Any) -> Any:
        decision = await next()
        return Enter(messages=(*decision.messages, extra))

    app.ctx.on("agent/pre-step", add)
    await run(agent, "hi")
    assert user_texts(agent) == ["hi", "added by plugin"]
    assert [m.role for m in model.requests[0].messages] == ["user", "user"]


async def test_pre_step_listener_returning_garbage_ends_the_turn_error(app: App) -> None:
    agent, _ = new_agent(app)

    async def bad(payload: Any, next: Any) -> Any:
        return "yes"

    app.ctx.on("agent/pre-step", bad)
    await run(agent)
    (end,) = data(agent, "turn/end")
    assert end["reason"]["kind"] == "error" and end["reason"]["code"] == "UNKNOWN"
    assert "Enter" in end["reason"]["message"]


async def test_agent_request_waterfall_replaces_the_frozen_config(app: App) -> None:
    agent, model = new_agent(app, text("ok"))
    app.ctx.llm.register_adapter(["other"], scripted_other := _Other())
    seen: list[Any] = []

    async def switch(payload: Any, next: Any) -> Any:
        config = await next()
        with pytest.raises(ValidationError):
            config.model = "mutated"
        seen.append((payload.turn, payload.step, payload.config))
        return config.model_copy(update={"provider": "other", "model": "big", "max_tokens": 99})

    app.ctx.on("agent/request", switch)
    await run(agent)
    assert seen == [(1, 1, RequestConfig(provider="scripted", model="m"))]
    assert model.requests == []
    (request,) = scripted_other.requests
    assert (request.provider, request.model, request.max_tokens) == ("other", "big", 99)
    header = data(agent, "request/header")[0]["header"]
    assert header["config"] == {"provider": "other", "model": "big", "max_tokens": 99}


class _Other:
    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def stream(self, options: Any) -> AsyncIterator[Any]:
        self.requests.append(options)
        for chunk in text("from other"):
            yield chunk


async def test_agent_request_may_supply_a_missing_provider_and_model(app: App) -> None:
    model = scripted(app, text("ok"))
    agent = app.ctx.agent_loop.create("a", AgentOptions())

    async def supply(payload: Any, next: Any) -> Any:
        return payload.config.model_copy(update={"provider": "scripted", "model": "m"})

    app.ctx.on("agent/request", supply)
    await run(agent)
    assert reasons(agent) == ["completed"] and len(model.requests) == 1


async def test_missing_provider_or_model_ends_the_turn_error(app: App) -> None:
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="scripted"))
    await run(agent)
    reason = data(agent, "turn/end")[0]["reason"]
    assert reason["kind"] == "error" and "provider/model" in reason["message"]
    assert types(agent)[-2:] == ["step/end", "turn/end"]


async def test_request_header_is_logged_only_when_it_changes(app: App) -> None:
    register(app, echo)
    agent, _ = new_agent(app, tool_call("c1", "echo", {"text": "x"}), text("a"), text("b"))
    await run(agent)
    assert [d["reason"] for d in data(agent, "request/header")] == ["initial"]
    header = data(agent, "request/header")[0]["header"]
    assert set(header) == {"config", "system", "tools"}
    assert [t["name"] for t in header["tools"]] == ["echo"]
    app.ctx.system_prompt.section("new", "a new section")
    await run(agent)
    assert [d["reason"] for d in data(agent, "request/header")] == ["initial", "change"]
    header = agent.session.request_header()
    assert header is not None and "a new section" in header["system"]


async def test_a_streamed_answer_is_logged_coalesced_and_the_message_points_at_it(
    app: App,
) -> None:
    agent, _model = new_agent(app, text("hey"))
    await run(agent)
    chunks = events(agent, "assistant/chunk")
    assert all((c.data["turn"], c.data["step"]) == (1, 1) for c in chunks)
    # The three one-letter deltas are one delta of their joined text; the usage and the
    # ``stop`` finish are the message's to imply (log version 3).
    assert [c.data["chunk"]["type"] for c in chunks] == ["block-start", "text-delta", "block-end"]
    assert chunks[1].data["chunk"] == {"type": "text-delta", "index": 0, "text": "hey"}
    (message,) = events(agent, "assistant/message")
    assert list(message.source_event_seqs) == [c.seq for c in chunks]
    assert message.data["message"] == {
        "role": "assistant",
        "content": ({"type": "text", "text": "hey"},),
    }
    assert message.data["usage"] == {"input_tokens": 10, "output_tokens": 3}
    assert "interrupted" not in message.data


async def test_every_chunk_kind_is_logged_as_its_json_dump_coalesced(app: App) -> None:
    # The loop freezes common chunks from their fields instead of dumping them: the log must
    # hold exactly what the model's JSON dump gives, for every kind and with optional fields
    # set or unset, deltas of a block joined and a tool-call block as its assembled block.
    chunks = [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="hm"),
        BlockEnd(index=0, block=ReasoningBlock(text="hm", signature="sig")),
        BlockStart(index=1, block_type="text"),
        TextDelta(index=1, text="hé"),
        TextDelta(index=1, text="llo"),
        BlockEnd(index=1),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="c1", name="echo", arguments_delta='{"text":'),
        ToolCallDelta(index=2, id="c1", arguments_delta='"x"}'),
        BlockEnd(index=2),
        UsageChunk(usage=Usage(input_tokens=5, output_tokens=2, cache_read_tokens=1)),
        Finish(reason=MaxTokens()),
    ]
    failed = Finish(reason=ErrorFinish(message="boom", code="SERVER", status=503, retry_after=2))
    agent, _ = new_agent(app, chunks, [failed])
    await run(agent)
    logged = [e.data["chunk"] for e in events(agent, "assistant/chunk")]
    dump = [c.model_dump(mode="json", exclude_none=True) for c in chunks]
    tool_block = {"type": "tool-call", "id": "c1", "name": "echo", "arguments": '{"text":"x"}'}
    assert logged == [
        *dump[0:4],
        {"type": "text-delta", "index": 1, "text": "héllo"},
        dump[6],
        {"type": "block-end", "index": 2, "block": tool_block},
        *dump[11:],
    ]
    usage = data(agent, "assistant/message")[0]["usage"]
    assert usage == {"input_tokens": 5, "output_tokens": 2, "cache_read_tokens": 1}
    await run(agent, "again")
    (attempt,) = events(agent, "assistant/attempt")
    chunk = agent.session.events[attempt.data["chunks"][0]].data["chunk"]
    assert chunk == failed.model_dump(mode="json", exclude_none=True)
    assert type(chunk["reason"]["retry_after"]) is float


async def test_a_content_less_answer_still_logs_exactly_one_assistant_message(app: App) -> None:
    agent, model = new_agent(app, [Finish(reason=Stop())], text("next"))
    await run(agent, "one")
    (message,) = events(agent, "assistant/message")
    assert message.data["message"]["content"] == () and len(message.source_event_seqs) == 1
    assert [m.role for m in agent.session.derive_messages()] == ["user"]  # empty skipped
    await run(agent, "two")
    assert [m.role for m in model.requests[1].messages] == ["user", "user"]


async def test_max_tokens_ends_the_turn_max_tokens(app: App) -> None:
    agent, _ = new_agent(app, max_tokens("cut"))
    await run(agent)
    assert reasons(agent) == ["max-tokens"]
    assert len(data(agent, "assistant/message")) == 1


async def test_tool_calls_in_a_max_tokens_response_never_run(app: App) -> None:
    ran: list[str] = []

    @tool
    def side_effect() -> str:
        """Must not run."""
        ran.append("ran")
        return "x"

    register(app, side_effect)
    response = [*tool_call("c1", "side_effect", {})[:-1], Finish(reason=MaxTokens())]
    agent, model = new_agent(app, response)
    await run(agent)
    assert ran == [] and "tool/call" not in types(agent)
    assert reasons(agent) == ["max-tokens"] and len(model.requests) == 1
    assert agent.session.derive_messages()[-1].role == "user"  # no dangling call


async def test_max_tokens_is_sticky_within_a_turn_only(app: App) -> None:
    def cut_and_steer(options: Any) -> Any:
        agent.steer("go on")
        return max_tokens("cut")

    agent, _ = new_agent(app, cut_and_steer, text("rest"), text("fresh"))
    await run(agent)
    assert reasons(agent) == ["max-tokens"]
    assert len(data(agent, "step/start")) == 2
    await run(agent)
    assert reasons(agent) == ["max-tokens", "completed"]


async def test_a_raising_plugin_ends_the_turn_once_and_the_next_send_works(app: App) -> None:
    agent, _model = new_agent(app, text("fine"))
    errors: list[Any] = []
    app.ctx.on("agent/error", errors.append)
    calls = 0

    async def flaky(payload: Any, next: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("plugin bug")
        return await next()

    app.ctx.on("agent/request", flaky)
    await run(agent, "first")
    (err,) = errors
    assert (err.agent, err.turn, err.step, type(err.error)) == (agent, 1, 1, KeyError)
    reason = data(agent, "turn/end")[0]["reason"]
    assert reason["kind"] == "error" and reason["code"] == "UNKNOWN"
    assert "plugin bug" in reason["message"]
    assert types(agent)[-2:] == ["step/end", "turn/end"]
    await run(agent, "second")
    assert reasons(agent) == ["error", "completed"] and len(errors) == 1


async def test_a_provider_failure_ends_the_turn_with_its_code(app: App) -> None:
    agent, _ = new_agent(app, error("AUTH", "bad key"), text("after"))
    errors: list[Any] = []
    app.ctx.on("agent/error", errors.append)
    await run(agent)
    reason = data(agent, "turn/end")[0]["reason"]
    assert (reason["kind"], reason["code"]) == ("error", "AUTH") and "bad key" in reason["message"]
    (attempt,) = data(agent, "assistant/attempt")
    assert attempt["failure"]["code"] == "AUTH" and len(attempt["chunks"]) == 1
    assert "assistant/message" not in types(agent) and len(errors) == 1
    await run(agent)
    assert reasons(agent) == ["error", "completed"]


async def test_request_error_retry_reruns_the_same_step_without_readmitting_input(
    app: App,
) -> None:
    agent, model = new_agent(app, error("SERVER", "boom"), text("ok"))
    failures: list[Any] = []

    async def retry_once(payload: Any, next: Any) -> Any:
        failures.append((payload.turn, payload.step, payload.failure.code))
        return Retry()

    app.ctx.on("agent/request-error", retry_once)
    await run(agent)
    assert failures == [(1, 1, "SERVER")]
    assert reasons(agent) == ["completed"] and len(model.requests) == 2
    assert len(data(agent, "step/start")) == 1 and user_texts(agent) == ["hi"]
    assert model.requests[0].messages == model.requests[1].messages
    attempt = data(agent, "assistant/attempt")[0]
    assert (attempt["turn"], attempt["step"], attempt["failure"]["message"]) == (1, 1, "boom")


async def test_request_error_without_an_answer_ends_the_turn_error(app: App) -> None:
    agent, _ = new_agent(app, error("SERVER", "boom"))

    async def decline(payload: Any, next: Any) -> Any:
        return await next()

    app.ctx.on("agent/request-error", decline)
    await run(agent)
    reason = data(agent, "turn/end")[0]["reason"]
    assert (reason["kind"], reason["code"]) == ("error", "SERVER")


async def test_builtin_retry_plugin_retries_a_rate_limit_once_with_one_llm_retry_event(
    app: App,
) -> None:
    fiber = app.ctx.plugin(RetryPlugin, {"base_delay": 0.25, "jitter": 0})
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)

    fiber.instance.sleep = fake_sleep
    agent, model = new_agent(app, error("RATE_LIMIT", "slow down"), text("ok"))
    await run(agent)
    assert reasons(agent) == ["completed"] and len(model.requests) == 2
    (retry,) = data(agent, "llm/retry")
    assert (retry["code"], retry["attempt"], retry["delay"]) == ("RATE_LIMIT", 1, 0.25)
    assert delays == [0.25]
    assert [m.role for m in agent.session.derive_messages()] == ["user", "assistant"]


async def test_builtin_retry_plugin_gives_up_after_max_retries(app: App) -> None:
    fiber = app.ctx.plugin(RetryPlugin, {"max_retries": 2, "base_delay": 0})
    fiber.instance.sleep = _no_sleep
    agent, model = new_agent(app, *[error("OVERLOADED", "busy")] * 3)
    await run(agent)
    assert [d["attempt"] for d in data(agent, "llm/retry")] == [1, 2]
    assert len(model.requests) == 3
    assert data(agent, "turn/end")[0]["reason"]["code"] == "OVERLOADED"


async def _no_sleep(delay: float) -> None:
    return None


async def test_retry_plugin_leaves_non_transient_codes_alone(app: App) -> None:
    app.ctx.plugin(RetryPlugin, {"base_delay": 0})
    agent, model = new_agent(app, error("BAD_REQUEST", "no"), text("never"))
    await run(agent)
    assert data(agent, "llm/retry") == [] and len(model.requests) == 1


async def test_turn_stopping_listener_that_steers_continues_the_turn(app: App) -> None:
    agent, model = new_agent(app, text("first"), text("second"))
    stops: list[int] = []

    async def keep_going(payload: Any) -> None:
        stops.append(payload.turn)
        if len(stops) == 1:
            payload.agent.steer("one more thing")

    app.ctx.on("agent/turn-stopping", keep_going)
    await run(agent)
    assert stops == [1, 1] and types(agent).count("turn/start") == 1
    assert user_texts(agent) == ["hi", "one more thing"] and len(model.requests) == 2


async def test_turn_stopping_is_not_consulted_while_tools_continue_the_turn(app: App) -> None:
    register(app, echo)
    agent, _ = new_agent(app, tool_call("c1", "echo", {"text": "x"}), text("done"))
    stops: list[int] = []
    app.ctx.on("agent/turn-stopping", lambda p: stops.append(p.turn))
    await run(agent)
    assert stops == [1]


async def test_requests_are_rebuilt_from_the_log_with_system_and_tools(app: App) -> None:
    register(app, echo)
    app.ctx.system_prompt.section("persona", "You are terse.")
    agent, model = new_agent(app, tool_call("c1", "echo", {"text": "x"}), text("done"))
    await run(agent)
    first, second = model.requests
    assert first.system is not None and "You are terse." in first.system
    assert first.system == second.system
    assert [t["name"] for t in first.tools] == ["echo"]
    assert second.messages[: len(first.messages)] == first.messages  # prefix extension
    assert (first.provider, first.model, first.session_id) == ("scripted", "m", agent.id)
    assert first.signal is not None


async def test_options_max_tokens_seed_every_request(app: App) -> None:
    model = scripted(app, text("ok"))
    agent = app.ctx.agent_loop.create(
        "a", AgentOptions(provider="scripted", model="m", max_tokens=64, temperature=0.5)
    )
    await run(agent)
    assert (model.requests[0].max_tokens, model.requests[0].temperature) == (64, 0.5)
    config = agent.session.request_header()["config"]
    assert config["max_tokens"] == 64
    assert OPTIONS.max_tokens is None


async def test_an_assemble_listener_can_hide_a_tool_from_the_request(app: App) -> None:
    @tool
    def secret() -> str:
        """Not for this agent."""
        return "s"

    @tool
    def public() -> str:
        """Fine."""
        return "p"

    app.ctx.tools.register(secret)
    app.ctx.tools.register(public)

    def hide(payload: Any, next: Any) -> Any:
        a = payload.assembly
        return a.replace(tools=tuple(t for t in a.tools if t["name"] != "secret"))

    app.ctx.on("system-prompt/assemble", hide)
    agent, model = new_agent(app, text("ok"))
    await run(agent)
    assert [t["name"] for t in model.requests[0].tools] == ["public"]
    (header,) = data(agent, "request/header")
    assert [t["name"] for t in header["header"]["tools"]] == ["public"]
