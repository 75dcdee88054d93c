"""Provider error bodies as real servers send them, over loopback: context overflow wording,
error labels, keyless local servers and provider entries checked at App construction."""

from __future__ import annotations

import json
from typing import Any

import pytest
from peers.loopback import LoopbackServer, json_reply, sse_reply
from peers.streams import run_served, user
from peers.wire import chunk, openai_body

from agentloop_nb import App
from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm.anthropic import AnthropicAdapter
from agentloop_nb.llm.openai import OpenAIAdapter
from agentloop_nb.llm.providers import build_adapter

pytestmark = pytest.mark.anyio

# Each server's own body for "the prompt does not fit", with the status it uses.
OVERFLOW_BODIES: dict[str, tuple[int, dict[str, Any]]] = {
    "openai": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens. However, your "
                "messages resulted in 130412 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        },
    ),
    "deepseek": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 65536 tokens. However, you "
                "requested 70234 tokens (70234 in the messages, 0 in the completion). Please "
                "reduce the length of the messages or completion.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        },
    ),
    "vllm": (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 2048 tokens. However, you "
            "requested 2600 tokens (2500 in the messages, 100 in the completion). Please reduce "
            "the length of the messages or completion.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ),
    "vllm-decoder": (
        400,
        {
            "error": {
                "message": "The decoder prompt (length 4120) is longer than the maximum model "
                "length of 4096. Make sure that `max_model_len` is no smaller than the number "
                "of text tokens.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
    ),
    "ollama": (
        500,
        {
            "error": {
                "message": "prompt too long; exceeded max context length by 12 tokens",
                "type": "api_error",
                "param": None,
                "code": None,
            }
        },
    ),
    "llamacpp": (
        400,
        {
            "error": {
                "code": 400,
                "message": "request (6056 tokens) exceeds the available context size (4096 "
                "tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 6056,
                "n_ctx": 4096,
            }
        },
    ),
}

ANTHROPIC_OVERFLOW = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 208310 tokens > 200000 maximum",
    },
}


def options(provider: str = "openai") -> GenerateOptions:
    return GenerateOptions(provider=provider, model="m", messages=(user("hi"),))


async def openai_error(status: int, body: dict[str, Any], provider: str = "local") -> Any:
    result, _ = await run_served(
        json_reply(status, body),
        lambda url: OpenAIAdapter(url, "sk-test-overflow", name=provider),
        options(provider),
    )
    return result.error


@pytest.mark.parametrize("server", sorted(OVERFLOW_BODIES))
async def test_each_servers_overflow_body_is_context_window_exceeded(server: str) -> None:
    status, body = OVERFLOW_BODIES[server]
    error = await openai_error(status, body)
    assert error.code == "CONTEXT_WINDOW_EXCEEDED", error
    assert error.status == status
    assert "compact" in error.message  # the hint says what to do


async def test_anthropic_prompt_too_long_is_context_window_exceeded() -> None:
    result, _ = await run_served(
        json_reply(400, ANTHROPIC_OVERFLOW),
        lambda url: AnthropicAdapter(url, "sk-ant-test-overflow"),
        options("anthropic"),
    )
    assert result.error.code == "CONTEXT_WINDOW_EXCEEDED"
    assert "prompt is too long" in result.error.message


async def test_llamacpp_overflow_inside_the_stream_is_context_window_exceeded() -> None:
    _, body = OVERFLOW_BODIES["llamacpp"]
    stream = sse_reply(f"data: {json.dumps(body)}\n\n")
    result, _ = await run_served(
        stream, lambda url: OpenAIAdapter(url, "sk-test", name="llamacpp"), options()
    )
    assert result.error.code == "CONTEXT_WINDOW_EXCEEDED"
    assert result.error.message.startswith("llamacpp stream error (exceed_context_size_error)")


async def test_ordinary_bad_request_and_server_errors_keep_their_codes() -> None:
    bad = await openai_error(
        400, {"error": {"code": 400, "message": "invalid 'tools'", "type": "invalid_request_error"}}
    )
    server = await openai_error(
        500, {"error": {"code": 500, "message": "out of memory", "type": "server_error"}}
    )
    assert (bad.code, server.code) == ("BAD_REQUEST", "SERVER")


async def test_error_label_does_not_repeat_the_status_a_server_echoes_as_code() -> None:
    status, body = OVERFLOW_BODIES["llamacpp"]
    error = await openai_error(status, body, provider="llamacpp")
    assert error.message.startswith("llamacpp HTTP 400 (exceed_context_size_error): ")
    assert "(400)" not in error.message


async def test_error_label_keeps_a_code_that_differs_from_the_status() -> None:
    status, body = OVERFLOW_BODIES["openai"]
    error = await openai_error(status, body, provider="openai")
    assert error.message.startswith("openai HTTP 400 (context_length_exceeded): ")


async def test_error_label_with_only_a_numeric_code_shows_no_parenthesis() -> None:
    error = await openai_error(503, {"error": {"code": 503, "message": "Loading model"}})
    assert error.code == "SERVER"
    assert error.message.startswith("local HTTP 503: ") and "(503)" not in error.message


# -- keyless local servers ----------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.2", "[::1]"])
def test_custom_entry_on_loopback_needs_no_key(host: str) -> None:
    adapter = build_adapter("llamacpp", {"type": "openai", "base_url": f"http://{host}:8080/v1"})
    assert adapter.require_key is False


def test_custom_entry_elsewhere_still_needs_a_key() -> None:
    adapter = build_adapter(
        "gateway", {"type": "openai", "base_url": "https://gateway.example.com/v1"}
    )
    assert adapter.require_key is True


async def test_loopback_entry_with_require_key_true_insists_on_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LOCAL_KEY", raising=False)
    adapter = build_adapter(
        "local",
        {
            "type": "openai",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key_env": "LOCAL_KEY",
            "require_key": True,
        },
    )
    result, server = await run_served(json_reply(500, {}), lambda _url: adapter, options())
    assert result.error.code == "AUTH" and "LOCAL_KEY" in result.error.message
    assert server.requests == []


async def test_readme_llamacpp_entry_streams_from_a_keyless_loopback_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    reply = sse_reply(openai_body(chunk({"content": "hi there"}, "stop")))
    with LoopbackServer(reply) as server:
        # The README's entry, with this server's port.
        app = App(providers={"llamacpp": {"type": "openai", "base_url": server.url + "/v1"}})
        try:
            text = ""
            async for piece in app.ctx.llm.stream(options("llamacpp")):
                if piece.type == "text-delta":
                    text += piece.text
                if piece.type == "finish":
                    assert piece.reason.kind == "stop", piece.reason
        finally:
            await app.aclose()
    assert text == "hi there"
    assert server.requests[0].path == "/v1/chat/completions"
    assert "authorization" not in server.requests[0].headers


# -- provider entries checked at App construction -----------------------------------------------


@pytest.mark.parametrize("field", ["base_url", "api_key", "api_key_env", "base_url_env"])
def test_non_string_provider_option_is_rejected_at_app_construction(field: str) -> None:
    with pytest.raises(ValueError, match=rf"providers\['local'\]\.{field} must be a string"):
        App(providers={"local": {"type": "openai", field: 5}})


def test_base_url_without_http_scheme_is_rejected_naming_provider_and_field() -> None:
    with pytest.raises(ValueError, match=r"providers\['local'\]\.base_url must be an http"):
        App(providers={"local": {"type": "openai", "base_url": "localhost:8080/v1"}})


def test_bad_base_url_error_never_quotes_its_credentials() -> None:
    with pytest.raises(ValueError) as info:
        App(providers={"local": {"type": "openai", "base_url": "ftp://user:s3cr3t-pw@host/v1"}})
    assert "s3cr3t-pw" not in str(info.value)
