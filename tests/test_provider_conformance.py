"""What every provider adapter does alike, run once per adapter over real loopback HTTP: a text
reply (llmock), the max-tokens end, an empty reply, an error inside a 200 stream and a missing
key. Each adapter's wire details (the request body it sends, the error event it parses) are
the ``Provider`` row; behaviours only one adapter has stay in ``test_provider_<name>.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from llmock.scenarios import Reply as LlmockReply
from peers.loopback import sse_events
from peers.streams import (
    Assembled,
    assert_answered,
    collect,
    options_for,
    run,
    run_closing,
    run_sse,
)
from peers.wire import (
    anthropic_text_stream,
    block_start,
    chunk,
    message_start,
    openai_body,
    text_delta,
)

from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm.anthropic import AnthropicAdapter
from agentloop_nb.llm.openai import OpenAIAdapter

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Provider:
    name: str
    model: str
    make: Callable[..., Any]  # the adapter class
    key: str  # a test key for a loopback server
    key_env: str  # the variable named when no key is found
    unreachable_url: str
    check_text_body: Callable[[dict[str, Any]], None]  # the request a text reply was asked by
    check_cut_body: Callable[[dict[str, Any]], None]  # the request of a max_tokens=5 reply
    cut_options: dict[str, Any]  # extra options for the max-tokens request
    empty_stream: bytes
    broken_stream: bytes  # ``broken_text`` then an in-stream error
    broken_text: str
    broken_code: str
    broken_message: str

    def options(self, **kw: Any) -> GenerateOptions:
        return options_for(self.name, self.model, **kw)


def _openai_text_body(body: dict[str, Any]) -> None:
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert "max_tokens" not in body and "tools" not in body


def _anthropic_text_body(body: dict[str, Any]) -> None:
    assert body["max_tokens"] == 4096 and body["stream"] is True and body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def _openai_cut_body(body: dict[str, Any]) -> None:
    assert (body["max_tokens"], body["temperature"], body["stop"]) == (5, 0.2, ["\n\n"])


def _anthropic_cut_body(body: dict[str, Any]) -> None:
    assert body["max_tokens"] == 5


OPENAI = Provider(
    name="openai",
    model="gpt-4o-mini",
    make=OpenAIAdapter,
    key="sk-test",
    key_env="OPENAI_API_KEY",
    unreachable_url="http://127.0.0.1:9/v1",
    check_text_body=_openai_text_body,
    check_cut_body=_openai_cut_body,
    cut_options={"temperature": 0.2, "stop": ["\n\n"]},
    empty_stream=openai_body(chunk({"role": "assistant", "content": ""}), chunk({}, "stop")),
    broken_stream=openai_body(
        chunk({"role": "assistant", "content": "Part"}),
        {
            "error": {
                "message": "The server had an error while processing your request.",
                "type": "server_error",
            }
        },
        done=False,
    ),
    broken_text="Part",
    broken_code="SERVER",
    broken_message="had an error while processing",
)

ANTHROPIC = Provider(
    name="anthropic",
    model="claude-sonnet-4-5",
    make=AnthropicAdapter,
    key="sk-ant-test",
    key_env="ANTHROPIC_API_KEY",
    unreachable_url="http://127.0.0.1:9",
    check_text_body=_anthropic_text_body,
    check_cut_body=_anthropic_cut_body,
    cut_options={},
    empty_stream=anthropic_text_stream(""),
    broken_stream=sse_events(
        [
            message_start(),
            block_start(0),
            text_delta(0, "Par"),
            (
                "error",
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            ),
        ]
    ),
    broken_text="Par",
    broken_code="OVERLOADED",
    broken_message="Overloaded",
)

PROVIDERS = pytest.mark.parametrize("provider", [OPENAI, ANTHROPIC], ids=lambda p: p.name)


async def served(provider: Provider, body: bytes) -> Assembled:
    """The result of one request to a loopback server streaming ``body``."""
    return await run_sse(body, lambda url: provider.make(url, provider.key), provider.options())


@pytest.mark.peer
@PROVIDERS
async def test_text_reply_streams_one_text_block_with_usage_and_stop(
    llmock: Any, provider: Provider
) -> None:
    llmock.reply(f"Hello from {provider.name}.")
    # The base URL and key come from the env llmock sets.
    result = await run_closing(provider.make(), provider.options(system="Be brief."))
    assert_answered(result, f"Hello from {provider.name}.")
    provider.check_text_body(llmock.last_request.body)


@pytest.mark.peer
@PROVIDERS
async def test_a_length_cut_ends_with_max_tokens(llmock: Any, provider: Provider) -> None:
    llmock.add(LlmockReply(text="This answer is cut", finish_reason="length"))
    result = await run_closing(
        provider.make(), provider.options(max_tokens=5, **provider.cut_options)
    )
    assert result.kind == "max-tokens"
    assert result.text == "This answer is cut"
    provider.check_cut_body(llmock.last_request.body)


@PROVIDERS
async def test_a_reply_without_text_or_tool_calls_is_an_empty_response(
    provider: Provider,
) -> None:
    result = await served(provider, provider.empty_stream)
    assert result.error.code == "EMPTY_RESPONSE"
    assert result.block_types == []


@PROVIDERS
async def test_an_error_inside_the_stream_ends_with_its_code_and_message(
    provider: Provider,
) -> None:
    result = await served(provider, provider.broken_stream)
    assert result.text == provider.broken_text
    assert result.error.code == provider.broken_code
    assert provider.broken_message in result.error.message


@PROVIDERS
async def test_missing_key_is_one_auth_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, provider: Provider
) -> None:
    monkeypatch.delenv(provider.key_env, raising=False)
    adapter = provider.make(provider.unreachable_url)
    chunks = await collect(adapter, provider.options())
    result = await run(adapter, provider.options())
    assert len(chunks) == 1
    assert result.error.code == "AUTH"
    assert provider.key_env in result.error.message
    if provider is OPENAI:  # the OpenAI-compatible presets say where a key can be given
        assert "providers=" in result.error.message
