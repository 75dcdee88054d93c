"""Byte-for-byte replays of streams recorded from the live OpenAI and Anthropic APIs
(``tests/recordings/streams``, see ``tests/recordings/README.md``), served from a loopback HTTP server in small pieces so lines and UTF-8 sequences split across
network reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from peers.loopback import LoopbackServer, Reply, json_reply, sse_reply
from peers.streams import Assembled, run, user

from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm._chunks import ErrorFinish
from agentloop_nb.llm.anthropic import AnthropicAdapter
from agentloop_nb.llm.openai import OpenAIAdapter

pytestmark = pytest.mark.anyio


ROOT = Path(__file__).resolve().parent / "recordings" / "streams"
OPENAI_FILES = sorted((ROOT / "openai").glob("*.bin"))
ANTHROPIC_FILES = sorted((ROOT / "anthropic").glob("*.txt"))
SNAPSHOTS = sorted((ROOT / "anthropic" / "http_snapshots").glob("*.json"))


def _file(provider: str, prefix: str) -> Path:
    matches = [p for p in (ROOT / provider).iterdir() if p.name.startswith(prefix)]
    assert len(matches) == 1, f"expected one recorded file {prefix}*, found {matches}"
    return matches[0]


async def replay(provider: str, reply: Reply) -> Assembled:
    with LoopbackServer(reply) as server:
        adapter: OpenAIAdapter | AnthropicAdapter
        if provider == "openai":
            adapter = OpenAIAdapter(server.url + "/v1", "sk-test-replay")
            model = "gpt-4o-2024-08-06"
        else:
            adapter = AnthropicAdapter(server.url, "sk-ant-test-replay")
            model = "claude-haiku-4-5"
        try:
            return await run(
                adapter, GenerateOptions(provider=provider, model=model, messages=[user("hi")])
            )
        finally:
            await adapter.aclose()


async def replay_file(provider: str, path: Path, piece: int = 37) -> Assembled:
    raw = await anyio.Path(path).read_bytes()
    return await replay(provider, sse_reply(raw, piece=piece))


def kind(result: Assembled) -> str:
    assert result.finish is not None
    return result.finish.kind


# -- every recorded stream ----------------------------------------------------------------------


@pytest.mark.parametrize("path", OPENAI_FILES, ids=lambda p: p.name[:8])
async def test_every_recorded_openai_stream_replays_to_a_clean_finish(path: Path) -> None:
    result = await replay_file("openai", path)
    assert not isinstance(result.finish, ErrorFinish) or result.finish.code not in (
        "BAD_RESPONSE",
        "TRANSPORT",
    ), result.finish
    assert result.usage is not None and result.usage.input_tokens > 0
    for call in result.calls:
        json.loads(call["arguments"])  # whole arguments, never two names glued together


@pytest.mark.parametrize("path", ANTHROPIC_FILES, ids=lambda p: p.stem)
async def test_every_recorded_anthropic_stream_replays_to_a_clean_finish(path: Path) -> None:
    result = await replay_file("anthropic", path, piece=29)
    assert not isinstance(result.finish, ErrorFinish) or result.finish.code not in (
        "BAD_RESPONSE",
        "TRANSPORT",
    ), result.finish
    assert result.usage is not None and result.usage.input_tokens > 0


# -- OpenAI layouts -----------------------------------------------------------------------------


async def test_openai_first_chunk_with_role_and_tool_calls_together() -> None:
    result = await replay_file("openai", _file("openai", "2018feb6"))
    assert [(c["id"], c["name"]) for c in result.calls] == [
        ("call_4XzlGBLtUe9dy3GVNV4jhq7h", "get_weather")
    ]
    assert json.loads(result.calls[0]["arguments"]) == {"city": "New York City"}
    assert kind(result) == "tool-calls"
    assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (
        44,
        16,
    )
    assert result.usage.reasoning_tokens == 0


async def test_openai_two_parallel_tool_calls() -> None:
    result = await replay_file("openai", _file("openai", "f82268f2"), piece=11)
    assert [c["name"] for c in result.calls] == ["GetWeatherArgs", "get_stock_price"]
    assert [json.loads(c["arguments"]) for c in result.calls] == [
        {"city": "Edinburgh", "country": "GB", "units": "c"},
        {"ticker": "AAPL", "exchange": "NASDAQ"},
    ]
    assert result.block_types == ["tool-call", "tool-call"]
    assert kind(result) == "tool-calls"


async def test_openai_length_finish_is_max_tokens() -> None:
    result = await replay_file("openai", _file("openai", "4cc50a61"))
    assert kind(result) == "max-tokens" and result.text == '{"'


async def test_openai_refusal_is_shown_as_text() -> None:
    result = await replay_file("openai", _file("openai", "173417d5"))
    assert result.text.startswith("I'm sorry") and kind(result) == "stop"


async def test_openai_only_the_first_of_several_choices_is_read() -> None:
    result = await replay_file("openai", _file("openai", "a491adda"))
    assert json.loads(result.text) == {"city": "San Francisco", "temperature": 65, "units": "f"}


# -- Anthropic layouts --------------------------------------------------------------------------


async def test_anthropic_live_tool_use_with_padding_ping_and_cache_usage() -> None:
    result = await replay_file(
        "anthropic", _file("anthropic", "live_tool_use_stream_haiku45"), piece=13
    )
    assert [(c["id"], c["name"]) for c in result.calls] == [
        ("toolu_018acGYLtfR52q9yDbWaEdQZ", "get_weather")
    ]
    assert result.call_args() == {"location": "San Francisco, CA", "units": "f"}
    assert kind(result) == "tool-calls"
    usage = result.usage
    assert usage is not None
    assert (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    ) == (656, 74, 0, 0)


async def test_anthropic_refusal_is_a_bad_request_error_with_the_explanation() -> None:
    result = await replay_file("anthropic", _file("anthropic", "refusal_response"))
    assert result.error.code == "BAD_REQUEST"
    assert "refused" in result.error.message and "cyber" in result.error.message


async def test_anthropic_max_tokens_inside_a_tool_call_is_max_tokens() -> None:
    result = await replay_file("anthropic", _file("anthropic", "incomplete_partial_json_response"))
    assert kind(result) == "max-tokens"
    assert result.text.startswith("I'll create a comprehensive tax guide")


@pytest.mark.parametrize("name", ["compaction_response", "fallback_response"])
async def test_anthropic_unknown_block_types_are_skipped(name: str) -> None:
    result = await replay_file("anthropic", _file("anthropic", name))
    assert (
        result.block_types == ["text"] and result.text == "Hello there!" and kind(result) == "stop"
    )


# -- whole HTTP exchanges -----------------------------------------------------------------------


def _exchanges() -> list[Any]:
    out = []
    for path in SNAPSHOTS:
        for n, exchange in enumerate(json.loads(path.read_text())):
            response = exchange["response"]
            streamed = isinstance(response["body"], str)
            if streamed or response["status_code"] >= 400:
                out.append(pytest.param(response, id=f"{path.stem.split('__')[-1][:8]}-{n}"))
    return out


@pytest.mark.parametrize("response", _exchanges())
async def test_anthropic_http_snapshot(response: dict[str, Any]) -> None:
    status = response["status_code"]
    if status >= 400:
        headers = {
            k: v
            for k, v in response["headers"].items()
            if k not in ("content-length", "connection")
        }
        result = await replay("anthropic", json_reply(status, response["body"], headers))
        assert result.error.status == status
        assert result.error.code == ("RATE_LIMIT" if status == 429 else "BAD_REQUEST")
        assert response["body"]["error"]["message"][:60] in result.error.message
    else:
        result = await replay("anthropic", sse_reply(response["body"], piece=53))
        assert kind(result) in ("stop", "tool-calls")
        assert result.text or result.calls
