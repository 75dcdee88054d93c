"""Whole agents through each shipped provider over real loopback HTTP: a tool round trip, then
the answer, with the invariant companion checking every request.

llmock (its pytest fixture, one server per session) plays OpenAI and Anthropic and keeps a
request journal; aimock (one server for this module) plays DeepSeek ``reasoning_content`` and
Anthropic extended thinking; the offline demo model drives the same loop with no network."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from peers.aimock import aimock_url  # noqa: F401  (pytest fixture)
from peers.wire import anthropic_tool_result, anthropic_tool_use, openai_tool_call_message

from agentloop_nb import Agent, AgentOptions, App, tool
from agentloop_nb.llm.offline import OfflineModel

pytestmark = pytest.mark.anyio

KEY = "sk-test-e2e-0123456789"
WAIT = 10.0  # seconds: a guard against a hang, never a synchronisation point

TURN_EVENTS = [
    "agent/inbox/spliced",  # followup
    "turn/start",
    "agent/inbox/spliced",  # claim
    "step/start",
    "user/message",
    "request/header",
    "assistant/message",  # the tool call
    "tool/call",
    "tool/result",
    "step/end",
    "step/start",
    "assistant/message",  # the answer
    "step/end",
    "turn/end",
]

# Runtime fixtures for aimock: a DeepSeek tool loop whose both answers carry reasoning.
DEEPSEEK_PROMPT = "deepseek: weather in Oslo?"
DEEPSEEK_FIXTURES = [
    {
        "match": {"userMessage": DEEPSEEK_PROMPT, "hasToolResult": False},
        "response": {
            "reasoning": "I need the weather tool for Oslo.",
            "toolCalls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
        },
    },
    {
        "match": {"userMessage": DEEPSEEK_PROMPT, "hasToolResult": True},
        "response": {
            "reasoning": "The tool answered; report it.",
            "content": "It is sunny in Oslo.",
        },
    },
]


class WeatherTool:
    """A ``get_weather`` tool that records the cities it was asked about."""

    def __init__(self) -> None:
        self.cities: list[str] = []

        @tool
        def get_weather(city: str) -> str:
            """Current weather for a city."""
            self.cities.append(city)
            return f"sunny in {city}"

        self.tool = get_weather


@asynccontextmanager
async def running_app(**kw: Any) -> AsyncIterator[App]:
    """``App(invariants=True, **kw)``, closed afterwards together with its HTTP adapters."""
    app = App(invariants=True, **kw)
    adapters = [app.ctx.llm.adapter_for(name) for name in app.ctx.llm.providers()]
    try:
        yield app
    finally:
        await app.aclose()
        # App.aclose() leaves the adapters' own HTTP clients open; close them here.
        for adapter in adapters:
            close = getattr(adapter, "aclose", None)
            if close is not None:
                await close()


async def ask(app: App, provider: str, model: str, prompt: str) -> Agent:
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider=provider, model=model))
    agent.followup(prompt)
    with anyio.fail_after(WAIT):
        await agent.when_idle()
    return agent


def types(agent: Agent) -> list[str]:
    return [e.type for e in agent.session.events if e.type != "assistant/chunk"]


def data(agent: Agent, type_: str) -> list[Any]:
    return [e.data for e in agent.session.events if e.type == type_]


def jsonable(value: Any) -> Any:
    """A frozen event payload as plain JSON values (FrozenDict/tuples → dict/list)."""
    return json.loads(json.dumps(value))


def assert_tool_round_trip(agent: Agent, weather: WeatherTool, city: str) -> tuple[str, Any]:
    """The common shape of a completed tool turn; returns ``(call_id, final message)``."""
    assert types(agent) == TURN_EVENTS, types(agent)
    assert jsonable(data(agent, "turn/end")) == [{"turn": 1, "reason": {"kind": "completed"}}]
    assert weather.cities == [city]
    (call,) = data(agent, "tool/call")
    (result,) = data(agent, "tool/result")
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": city}
    assert result["call_id"] == call["call_id"]
    assert (result["content"], result["is_error"]) == (f"sunny in {city}", False)
    first, final = data(agent, "assistant/message")
    assert [b["id"] for b in first["message"]["content"] if b["type"] == "tool-call"] == [
        call["call_id"]
    ]
    return call["call_id"], jsonable(final["message"])


# -- OpenAI and Anthropic through llmock ----------------------------------------------------------


@pytest.mark.peer
async def test_openai_agent_runs_a_tool_round_trip_and_answers(llmock: Any) -> None:
    llmock.call_tool("get_weather", {"city": "Paris"})
    llmock.reply("It is sunny in Paris.")
    weather = WeatherTool()
    # llmock answers every request from its script, a window probe too: name the window.
    entry = {"base_url": llmock.base_url("openai"), "api_key": KEY, "context_window": 128_000}
    providers = {"openai": entry}
    async with running_app(providers=providers) as app:
        app.ctx.tools.register(weather.tool)
        agent = await ask(app, "openai", "gpt-4o-mini", "weather in Paris?")
    call_id, final = assert_tool_round_trip(agent, weather, "Paris")
    assert final == {
        "role": "assistant",
        "content": [{"type": "text", "text": "It is sunny in Paris."}],
    }
    first, second = llmock.requests
    assert (first.path, first.status, second.status) == ("/v1/chat/completions", 200, 200)
    assert [t["function"]["name"] for t in first.body["tools"]] == ["get_weather"]
    # The second request extends the first with the assistant tool call and the tool result.
    assert second.body["messages"][: len(first.body["messages"])] == first.body["messages"]
    assert second.body["messages"][len(first.body["messages"]) :] == [
        openai_tool_call_message(call_id, "get_weather", '{"city": "Paris"}'),
        {"role": "tool", "tool_call_id": call_id, "content": "sunny in Paris"},
    ]


@pytest.mark.peer
async def test_anthropic_agent_runs_a_tool_round_trip_and_answers(llmock: Any) -> None:
    llmock.call_tool("get_weather", {"city": "Paris"})
    llmock.reply("It is sunny in Paris.")
    weather = WeatherTool()
    providers = {"anthropic": {"base_url": llmock.base_url("anthropic"), "api_key": KEY}}
    async with running_app(providers=providers) as app:
        app.ctx.tools.register(weather.tool)
        agent = await ask(app, "anthropic", "claude-sonnet-4-5", "weather in Paris?")
    call_id, final = assert_tool_round_trip(agent, weather, "Paris")
    assert final["content"] == [{"type": "text", "text": "It is sunny in Paris."}]
    first, second = llmock.requests
    assert first.path.endswith("/v1/messages") and (first.status, second.status) == (200, 200)
    assert first.body["system"] == second.body["system"] and "anthropic" in first.body["system"]
    assert second.body["messages"][: len(first.body["messages"])] == first.body["messages"]
    assert second.body["messages"][len(first.body["messages"]) :] == [
        {
            "role": "assistant",
            "content": [anthropic_tool_use(call_id, "get_weather", {"city": "Paris"})],
        },
        {"role": "user", "content": [anthropic_tool_result(call_id, "sunny in Paris")]},
    ]


# -- DeepSeek reasoning and Anthropic thinking through aimock ------------------------------------


@pytest.fixture(scope="module")
def aimock(aimock_url: str) -> str:  # noqa: F811
    """The module's aimock server, with the DeepSeek tool-loop fixtures added at runtime."""
    reply = httpx.post(f"{aimock_url}/__aimock/fixtures", json={"fixtures": DEEPSEEK_FIXTURES})
    assert reply.status_code == 200, reply.text
    return aimock_url


def journal(url: str, test_id: str) -> list[dict[str, Any]]:
    """aimock's journal entries for the requests tagged ``X-Test-Id: test_id``, in order."""
    reply = httpx.get(f"{url}/__aimock/journal", params={"testId": test_id})
    reply.raise_for_status()
    return sorted(reply.json(), key=lambda entry: entry["timestamp"])


@pytest.mark.peer
async def test_deepseek_reasoning_is_logged_but_never_sent_back(aimock: str) -> None:
    weather = WeatherTool()
    providers = {
        "deepseek": {
            "base_url": aimock + "/v1",
            "api_key": KEY,
            "headers": {"X-Test-Id": "e2e-deepseek"},
        }
    }
    async with running_app(providers=providers) as app:
        app.ctx.tools.register(weather.tool)
        agent = await ask(app, "deepseek", "deepseek-reasoner", DEEPSEEK_PROMPT)
    _, final = assert_tool_round_trip(agent, weather, "Oslo")
    first_message = jsonable(data(agent, "assistant/message")[0]["message"])
    assert first_message["content"][0] == {
        "type": "reasoning",
        "text": "I need the weather tool for Oslo.",
        "signature": None,
    }
    assert final["content"] == [
        {"type": "reasoning", "text": "The tool answered; report it.", "signature": None},
        {"type": "text", "text": "It is sunny in Oslo."},
    ]
    first, second = journal(aimock, "e2e-deepseek")
    assert [e["response"]["status"] for e in (first, second)] == [200, 200]
    sent = second["body"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    # The reasoning went into the log only: DeepSeek rejects reasoning_content in input.
    assert "reasoning_content" not in sent[2] and sent[2]["content"] is None
    assert "I need the weather tool" not in json.dumps(second["body"])
    assert sent[3]["content"] == "sunny in Oslo"


@pytest.mark.peer
async def test_anthropic_thinking_and_signature_round_trip_in_the_next_request(
    aimock: str,
) -> None:
    # aimock's journal stores Anthropic bodies converted to the OpenAI shape (thinking dropped),
    # so the bytes on the wire are captured from the adapter's HTTP client as well.
    sent: list[dict[str, Any]] = []

    async def capture(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    weather = WeatherTool()
    async with httpx.AsyncClient(event_hooks={"request": [capture]}) as client:
        providers = {
            "anthropic": {
                "base_url": aimock,
                "api_key": KEY,
                "client": client,
                "headers": {"X-Test-Id": "e2e-thinking"},
            }
        }
        async with running_app(providers=providers) as app:
            app.ctx.tools.register(weather.tool)
            agent = await ask(app, "anthropic", "claude-sonnet-4-5", "claude: weather in Paris?")
    call_id, final = assert_tool_round_trip(agent, weather, "Paris")
    assert final["content"] == [{"type": "text", "text": "It is sunny in Paris."}]
    thinking = {
        "type": "reasoning",
        "text": "I should call the weather tool.",
        "signature": "EqQBCkYIBxgCKkDsig-aimock-tool",
    }
    assert jsonable(data(agent, "assistant/message")[0]["message"])["content"][0] == thinking
    assert [e["response"]["status"] for e in journal(aimock, "e2e-thinking")] == [200, 200]
    assert len(sent) == 2
    assert sent[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "I should call the weather tool.",
                    "signature": "EqQBCkYIBxgCKkDsig-aimock-tool",
                },
                anthropic_tool_use(call_id, "get_weather", {"city": "Paris"}),
            ],
        },
        {"role": "user", "content": [anthropic_tool_result(call_id, "sunny in Paris")]},
    ]


# -- the offline demo model -----------------------------------------------------------------------


def register_demo_tools(app: App, calls: list[str]) -> None:
    @tool
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        calls.append(expression)
        return str(eval(expression, {"__builtins__": {}}))  # test-only: a fixed, trusted input

    @tool
    def now() -> str:
        """The current time."""
        return "12:00"

    @tool
    def echo(text: str) -> str:
        """Echo text back."""
        return text

    for t in (calculate, now, echo):
        app.ctx.tools.register(t)


async def test_offline_model_drives_a_calculate_tool_round_trip_through_the_loop() -> None:
    calls: list[str] = []
    async with running_app() as app:
        # The shipped `offline` adapter streams with a visible delay; a zero-delay twin keeps
        # the test fast and exercises the same model.
        app.ctx.llm.register_adapter(["offline-fast"], OfflineModel(token_delay=0))
        register_demo_tools(app, calls)
        agent = await ask(app, "offline-fast", "demo", "what is 2+3*4")
    assert jsonable(data(agent, "turn/end")) == [{"turn": 1, "reason": {"kind": "completed"}}]
    assert calls == ["2+3*4"]
    (call,) = data(agent, "tool/call")
    assert call["name"] == "calculate" and json.loads(call["arguments"]) == {"expression": "2+3*4"}
    (result,) = data(agent, "tool/result")
    assert (result["call_id"], result["content"], result["is_error"]) == (
        call["call_id"],
        "14",
        False,
    )
    answer = "".join(
        b["text"]
        for b in data(agent, "assistant/message")[-1]["message"]["content"]
        if b["type"] == "text"
    )
    assert "14" in answer
    assert types(agent) == TURN_EVENTS


async def test_default_offline_provider_answers_through_app_without_configuration() -> None:
    calls: list[str] = []
    async with running_app() as app:
        register_demo_tools(app, calls)
        agent = await ask(app, "offline", "demo", "what is 2+3*4")
    assert calls == ["2+3*4"] and [r["content"] for r in data(agent, "tool/result")] == ["14"]
    assert data(agent, "turn/end")[0]["reason"]["kind"] == "completed"
