"""OpenAIAdapter over real loopback HTTP: llmock (tool loop, request journal), aimock (DeepSeek
``reasoning_content``) and hand-written streams for layouts the peers do not produce."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from peers.aimock import aimock_url  # noqa: F401  (pytest fixture)
from peers.loopback import LoopbackServer, sse_reply
from peers.streams import (
    WEATHER_TOOL,
    Assembled,
    options_for,
    run,
    run_closing,
    run_served,
    run_sse,
    user,
)
from peers.wire import chunk, openai_body, openai_tool_call_message

from agentloop_nb import App, RequestConfig
from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm.openai import OpenAIAdapter
from agentloop_nb.llm.providers import build_adapters
from agentloop_nb.messages import (
    AssistantMessage,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
)

pytestmark = pytest.mark.anyio


def options(*messages: Any, **kw: Any) -> GenerateOptions:
    return options_for("openai", "gpt-4o-mini", *messages, **kw)


async def served(body: bytes, *messages: Any, **kw: Any) -> Assembled:
    """One request (``options(*messages, **kw)``) to a server streaming ``body``."""
    return await run_sse(body, lambda url: OpenAIAdapter(url, "sk-test"), options(*messages, **kw))


# -- llmock -------------------------------------------------------------------------------------


@pytest.mark.peer
async def test_tool_loop_sends_the_call_and_its_result_back(llmock: Any) -> None:
    llmock.call_tool("get_weather", {"city": "Paris"})
    llmock.reply("It is sunny in Paris.")
    adapter = OpenAIAdapter()
    try:
        first = await run(adapter, options(user("weather in Paris?"), tools=[WEATHER_TOOL]))
        assert first.kind == "tool-calls"
        assert [c["name"] for c in first.calls] == ["get_weather"]
        assert first.call_args() == {"city": "Paris"}
        call = first.calls[0]
        history = (
            user("weather in Paris?"),
            AssistantMessage(
                content=(
                    ToolCallBlock(id=call["id"], name="get_weather", arguments=call["arguments"]),
                )
            ),
            ToolResultMessage(call_id=call["id"], name="get_weather", content="sunny, 21 C"),
        )
        second = await run(adapter, options(*history, tools=[WEATHER_TOOL]))
    finally:
        await adapter.aclose()
    assert second.text == "It is sunny in Paris."
    assert second.kind == "stop"
    sent = llmock.requests[-1].body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER_TOOL["parameters"],
            },
        }
    ]
    assert sent["messages"][1:] == [
        openai_tool_call_message(call["id"], "get_weather", call["arguments"]),
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"},
    ]


# -- aimock: DeepSeek reasoning ----------------------------------------------------------------


@pytest.mark.peer
async def test_deepseek_reasoning_content_becomes_a_reasoning_block(aimock_url: str) -> None:  # noqa: F811
    adapter = build_adapters(
        {"deepseek": {"base_url": aimock_url + "/v1", "api_key": "sk-deepseek-test"}}
    )["deepseek"]
    result = await run_closing(
        adapter,
        GenerateOptions(
            provider="deepseek",
            model="deepseek-reasoner",
            messages=[user("deepseek: what is 6 times 7?")],
        ),
    )
    assert result.block_types == ["reasoning", "text"]
    assert result.reasoning == "Six sevens: 7+7+7+7+7+7 = 42."
    assert result.text == "6 times 7 is 42."
    assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (
        12,
        9,
    )
    assert result.kind == "stop"


async def test_reasoning_is_never_sent_back_to_an_openai_compatible_server() -> None:
    history = (
        user("what is 6 times 7?"),
        AssistantMessage(content=(ReasoningBlock(text="Six sevens."), TextBlock(text="42."))),
        user("and 6 times 8?", id="u2"),
    )
    body = openai_body(chunk({"content": "48."}, "stop"))
    result, server = await run_served(
        sse_reply(body),
        lambda url: OpenAIAdapter(url + "/v1", "sk-test", name="deepseek"),
        options(*history, model="deepseek-reasoner"),
    )
    assert result.text == "48."
    sent = server.requests[0].json()
    assert sent["messages"][1] == {"role": "assistant", "content": "42."}
    assert "reasoning_content" not in json.dumps(sent)


# -- request mapping, hand-written streams ------------------------------------------------------


async def test_request_carries_bearer_key_images_and_path() -> None:
    image = ImageBlock(media_type="image/png", data="iVBORw0KGgo=")
    message = user("describe").model_copy(update={"content": (TextBlock(text="describe"), image)})
    body = openai_body(chunk({"role": "assistant", "content": "A dot."}, "stop"))
    _, server = await run_served(
        sse_reply(body),
        lambda url: OpenAIAdapter(url + "/v1/", "sk-test-bearer", headers={"x-extra": "1"}),
        options(message, reasoning_effort="low"),
    )
    request = server.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test-bearer"
    assert request.headers["x-extra"] == "1"
    sent = request.json()
    assert sent["reasoning_effort"] == "low"
    assert sent["messages"][0]["content"] == [
        {"type": "text", "text": "describe"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]


async def test_interleaved_parallel_calls_with_repeated_ids_and_names_stay_separate() -> None:
    def part(index: int, call_id: str, name: str, args: str) -> dict[str, Any]:
        # Like llama.cpp: every delta repeats the id and the name.
        return {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": args},
        }

    body = openai_body(
        chunk(
            {"role": "assistant", "content": None, "tool_calls": [part(0, "c0", "get_weather", "")]}
        ),
        chunk({"tool_calls": [part(1, "c1", "get_time", "")]}),
        chunk({"tool_calls": [part(0, "c0", "get_weather", '{"city": ')]}),
        chunk({"tool_calls": [part(1, "c1", "get_time", '{"tz": "UTC"}')]}),
        chunk({"tool_calls": [part(0, "c0", "get_weather", '"Oslo"}')]}),
        chunk({}, "tool_calls"),
        chunk({}, None, usage={"prompt_tokens": 30, "completion_tokens": 20}) | {"choices": []},
    )
    result = await served(body, tools=[WEATHER_TOOL])
    assert [(c["id"], c["name"]) for c in result.calls] == [
        ("c0", "get_weather"),
        ("c1", "get_time"),
    ]
    assert [json.loads(c["arguments"]) for c in result.calls] == [{"city": "Oslo"}, {"tz": "UTC"}]
    assert result.kind == "tool-calls"
    assert result.usage is not None and result.usage.output_tokens == 20


async def test_content_filter_finish_is_a_bad_request_error() -> None:
    body = openai_body(chunk({"role": "assistant", "content": "I"}), chunk({}, "content_filter"))
    result = await served(body)
    assert result.error.code == "BAD_REQUEST"
    assert "content filter" in result.error.message


async def test_finish_reason_without_done_terminator_still_completes() -> None:
    body = openai_body(chunk({"content": "Fine."}, "stop"), done=False)
    result = await served(body)
    assert result.text == "Fine." and result.kind == "stop"


async def test_stop_finish_with_tool_calls_is_reported_as_tool_calls() -> None:
    # Ollama-style: the tool call arrives whole and the finish reason says "stop".
    call = {
        "index": 0,
        "id": "c9",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Rome"}},
    }
    body = openai_body(chunk({"role": "assistant", "tool_calls": [call]}), chunk({}, "stop"))
    result, server = await run_served(
        sse_reply(body),
        lambda url: build_adapters({"ollama": {"base_url": url + "/v1"}})["ollama"],
        GenerateOptions(provider="ollama", model="qwen3", messages=[user("hi")]),
    )
    assert result.kind == "tool-calls"
    assert result.call_args() == {"city": "Rome"}
    assert "authorization" not in server.requests[0].headers  # ollama needs no key


async def test_injected_client_is_used_and_left_open() -> None:
    body = openai_body(chunk({"content": "ok"}, "stop"))
    with LoopbackServer(sse_reply(body)) as server:
        async with httpx.AsyncClient() as client:
            adapter = OpenAIAdapter(server.url, "sk-test", client=client)
            result = await run(adapter, options())
            await adapter.aclose()
            assert not client.is_closed
    assert result.text == "ok"


# -- presets ------------------------------------------------------------------------------------


def test_presets_build_without_keys_and_explicit_config_beats_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("OPENAI_API_KEY", "DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("VLLM_BASE_URL", "http://gpu-box:8000/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://from-env/v1")
    adapters = build_adapters({"openai": {"base_url": "http://explicit/v1"}})
    assert sorted(adapters) == ["anthropic", "deepseek", "offline", "ollama", "openai", "vllm"]
    assert adapters["openai"].base_url == "http://explicit/v1"
    assert adapters["deepseek"].base_url == "https://api.deepseek.com/v1"
    assert adapters["vllm"].base_url == "http://gpu-box:8000/v1"
    assert adapters["ollama"].base_url == "http://localhost:11434/v1"
    assert adapters["anthropic"].messages_url == "https://api.anthropic.com/v1/messages"
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-later-0123456789")  # read at request time
    assert "sk-…redacted" in repr(adapters["deepseek"])


def test_custom_provider_needs_a_type_and_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"unknown provider 'openrouter'.*'type': 'openai'"):
        build_adapters({"openrouter": {"base_url": "https://openrouter.ai/api/v1"}})
    with pytest.raises(ValueError, match=r"does not take option\(s\) \['base_ur'\]"):
        build_adapters({"openai": {"base_ur": "typo"}})
    adapters = build_adapters(
        {
            "openrouter": {
                "type": "openai",
                "base_url": "https://openrouter.ai/api/v1",
                "api_key_env": "OPENROUTER_API_KEY",
            }
        }
    )
    assert adapters["openrouter"].name == "openrouter"
    assert adapters["openrouter"].api_key_env == "OPENROUTER_API_KEY"


@pytest.mark.anyio
async def test_configured_defaults_are_offered_to_prepare_call_and_none_otherwise() -> None:
    app = App(providers={"ollama": {"default_max_tokens": 256, "default_reasoning_effort": "low"}})
    try:
        plain = await app.ctx.llm.prepare_call(RequestConfig(provider="openai", model="m"))
        assert plain.adapter_defaults == frozenset()  # Chat Completions requires neither
        tuned = await app.ctx.llm.prepare_call(RequestConfig(provider="ollama", model="m"))
        assert (tuned.config.max_tokens, tuned.config.reasoning_effort) == (256, "low")
        assert tuned.adapter_defaults == frozenset({"max_tokens", "reasoning_effort"})
        explicit = await app.ctx.llm.prepare_call(
            RequestConfig(provider="ollama", model="m", max_tokens=9)
        )
        assert explicit.config.max_tokens == 9
        assert explicit.adapter_defaults == frozenset({"reasoning_effort"})
    finally:
        await app.aclose()


@pytest.mark.anyio
async def test_a_server_on_this_machine_gets_a_default_output_cap() -> None:
    from agentloop_nb.llm.openai import LOCAL_DEFAULT_MAX_TOKENS

    app = App(
        providers={
            "llamacpp": {"type": "openai", "base_url": "http://127.0.0.1:8080/v1"},
            "tuned": {
                "type": "openai",
                "base_url": "http://localhost:8081/v1",
                "default_max_tokens": 300,
            },
        }
    )
    try:
        local = await app.ctx.llm.prepare_call(RequestConfig(provider="llamacpp", model="any"))
        assert local.config.max_tokens == LOCAL_DEFAULT_MAX_TOKENS == 1024
        tuned = await app.ctx.llm.prepare_call(RequestConfig(provider="tuned", model="any"))
        assert tuned.config.max_tokens == 300
        own = await app.ctx.llm.prepare_call(
            RequestConfig(provider="llamacpp", model="any", max_tokens=64)
        )
        assert own.config.max_tokens == 64
        remote = await app.ctx.llm.prepare_call(RequestConfig(provider="openai", model="m"))
        assert remote.config.max_tokens is None
    finally:
        await app.aclose()
