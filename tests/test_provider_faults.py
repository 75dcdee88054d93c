"""Failure mapping of both HTTP adapters: HTTP statuses, stream faults, timeouts, dropped and
refused connections and cancellation — all over real loopback HTTP, never raising, never
hanging, always ending with exactly one finish."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
from llmock.scenarios import Fail
from peers.loopback import DROP, STALL, LoopbackServer, Reply, json_reply, sse_events, sse_reply
from peers.streams import Assembled, check_contract, run_closing, user
from peers.wire import block_start, message_start, text_delta

from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm._chunks import Aborted, Finish, StreamChunk
from agentloop_nb.llm._http import parse_retry_after
from agentloop_nb.llm.anthropic import AnthropicAdapter
from agentloop_nb.llm.openai import OpenAIAdapter
from agentloop_nb.signals import AbortController

pytestmark = pytest.mark.anyio

PROVIDERS = ["openai", "anthropic"]


def adapter_for(
    provider: str, base_url: str | None = None, **kw: Any
) -> OpenAIAdapter | AnthropicAdapter:
    if provider == "openai":
        return OpenAIAdapter(
            base_url + "/v1" if base_url else None, "sk-test-faults" if base_url else None, **kw
        )
    return AnthropicAdapter(base_url, "sk-ant-test-faults" if base_url else None, **kw)


def options(provider: str, signal: Any = None) -> GenerateOptions:
    model = "gpt-4o-mini" if provider == "openai" else "claude-sonnet-4-5"
    return GenerateOptions(provider=provider, model=model, messages=[user("hi")], signal=signal)


async def run_llmock(provider: str, **kw: Any) -> Assembled:
    return await run_closing(adapter_for(provider, **kw), options(provider))


async def run_loopback(provider: str, reply: Reply) -> Assembled:
    """One request to a :class:`LoopbackServer` answering ``reply``."""
    with LoopbackServer(reply) as server:
        return await run_llmock(provider, base_url=server.url)


# -- HTTP statuses (llmock) ---------------------------------------------------------------------


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_429_is_rate_limit_with_retry_after_from_headers(llmock: Any, provider: str) -> None:
    llmock.fail(429, retry_after=2.5)
    result = await run_llmock(provider)
    assert result.error.code == "RATE_LIMIT"
    assert result.error.status == 429
    assert result.error.retry_after == pytest.approx(2.5)  # from retry-after-ms, not the rounded 3
    assert llmock.last_request.status == 429


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_529_is_overloaded(llmock: Any, provider: str) -> None:
    llmock.fail(529)
    result = await run_llmock(provider)
    assert (result.error.code, result.error.status) == ("OVERLOADED", 529)


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_server(llmock: Any, provider: str, status: int) -> None:
    llmock.fail(status, message="upstream exploded")
    result = await run_llmock(provider)
    # llmock answers Anthropic's 503 with an ``overloaded_error`` body, which wins.
    expected = "OVERLOADED" if (provider, status) == ("anthropic", 503) else "SERVER"
    assert (result.error.code, result.error.status) == (expected, status)
    assert "upstream exploded" in result.error.message


async def test_overloaded_error_body_is_overloaded_whatever_the_status() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    result = await run_loopback("anthropic", json_reply(500, body))
    assert (result.error.code, result.error.status) == ("OVERLOADED", 500)


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [401, 403])
async def test_401_and_403_are_auth_naming_the_key_variable(
    llmock: Any, provider: str, status: int
) -> None:
    llmock.fail(status, message="invalid x-api-key")
    result = await run_llmock(provider)
    assert (result.error.code, result.error.status) == ("AUTH", status)
    assert "invalid x-api-key" in result.error.message
    assert (
        "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    ) in result.error.message


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_400_context_overflow_is_context_window_exceeded(llmock: Any, provider: str) -> None:
    llmock.context_overflow()
    result = await run_llmock(provider)
    assert (result.error.code, result.error.status) == ("CONTEXT_WINDOW_EXCEEDED", 400)
    assert "maximum context length" in result.error.message


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [400, 422])
async def test_other_400_and_422_are_bad_request(llmock: Any, provider: str, status: int) -> None:
    llmock.add(Fail(status, message="messages: field required"))
    result = await run_llmock(provider)
    assert (result.error.code, result.error.status) == ("BAD_REQUEST", status)
    assert "messages: field required" in result.error.message


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_404_is_bad_request_saying_model_not_found(llmock: Any, provider: str) -> None:
    llmock.fail(404, message="The model `gpt-9` does not exist")
    result = await run_llmock(provider)
    assert (result.error.code, result.error.status) == ("BAD_REQUEST", 404)
    assert "not found" in result.error.message and "does not exist" in result.error.message


async def test_anthropic_prompt_too_long_is_context_window_exceeded() -> None:
    body = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 210012 tokens > 200000 maximum",
        },
    }
    result = await run_loopback("anthropic", json_reply(400, body))
    assert (
        result.error.code == "CONTEXT_WINDOW_EXCEEDED" and "210012 tokens" in result.error.message
    )


async def test_long_error_bodies_are_truncated_in_the_message() -> None:
    result = await run_loopback("openai", json_reply(500, {"error": {"message": "x" * 5000}}))
    assert result.error.code == "SERVER"
    assert len(result.error.message) < 600 and "more chars" in result.error.message


# -- stream faults (llmock) ---------------------------------------------------------------------


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_mid_stream_disconnect_is_transport(llmock: Any, provider: str) -> None:
    llmock.reply("one two three four five six seven eight")
    llmock.disconnect(after_chunks=3)
    result = await run_llmock(provider)
    assert result.error.code == "TRANSPORT"


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_clean_early_end_is_transport_truncated(llmock: Any, provider: str) -> None:
    llmock.reply("one two three four five six seven eight")
    llmock.truncate(after_chunks=3)
    result = await run_llmock(provider)
    assert result.error.code == "TRANSPORT" and "truncated" in result.error.message


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_malformed_json_is_bad_response_quoting_the_data(llmock: Any, provider: str) -> None:
    llmock.reply("one two three four five six")
    llmock.corrupt(after_chunks=2)
    result = await run_llmock(provider)
    assert result.error.code == "BAD_RESPONSE"
    assert "malformed JSON" in result.error.message and "'" in result.error.message


@pytest.mark.peer
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_stall_beyond_the_read_timeout_is_timeout(llmock: Any, provider: str) -> None:
    llmock.reply("one two three four five six")
    llmock.stall(after_chunks=2, seconds=3)
    result = await run_llmock(provider, timeout=httpx.Timeout(5.0, read=0.3))
    assert result.error.code == "TIMEOUT" and "read timeout" in result.error.message


# -- transport (loopback) -----------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_refused_connection_is_transport(provider: str) -> None:
    with LoopbackServer(Reply()) as server:
        url = server.url  # the port is free again once the server has stopped
    result = await run_llmock(provider, base_url=url)
    assert result.error.code == "TRANSPORT" and "could not connect" in result.error.message


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_connection_dropped_mid_body_is_transport(provider: str) -> None:
    first = b'data: {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}\n\n'
    result = await run_loopback(provider, Reply(parts=[first, DROP]))
    assert result.error.code == "TRANSPORT"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_200_that_is_not_an_event_stream_is_bad_response(provider: str) -> None:
    reply = Reply(headers={"content-type": "text/html"}, parts=[b"<html>captive portal</html>"])
    result = await run_loopback(provider, reply)
    assert result.error.code == "BAD_RESPONSE" and "captive portal" in result.error.message


@pytest.mark.parametrize(
    ("provider", "body"),
    [
        (
            "openai",
            b'data: {"choices": [], "usage": {"prompt_tokens": "many"}}\n\n',
        ),
        (
            "anthropic",
            b'event: content_block_start\ndata: {"type": "content_block_start", "index": {}}\n\n',
        ),
        ("openai", b"data: [1, 2]\n\n"),
    ],
)
async def test_json_of_an_unexpected_shape_is_bad_response(provider: str, body: bytes) -> None:
    result = await run_loopback(provider, sse_reply(body))
    assert result.error.code == "BAD_RESPONSE"


async def test_invalid_base_url_is_an_error_finish_not_an_exception() -> None:
    result = await run_llmock("openai", base_url="ftp://example.invalid")
    assert result.error.code in ("BAD_REQUEST", "TRANSPORT")


# -- cancellation -------------------------------------------------------------------------------


def _stalled_reply(provider: str) -> Reply:
    if provider == "openai":
        first = sse_events([(None, {"choices": [{"index": 0, "delta": {"content": "Thinking"}}]})])
    else:
        first = sse_events([message_start(1, None), block_start(0), text_delta(0, "Thinking")])
    return Reply(parts=[first, STALL])


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_abort_closes_a_stalled_stream_promptly(provider: str) -> None:
    controller = AbortController()
    chunks: list[StreamChunk] = []
    ended_at: list[float] = []
    first_chunk = anyio.Event()
    with LoopbackServer(_stalled_reply(provider)) as server:
        adapter = adapter_for(provider, server.url)
        try:
            async with anyio.create_task_group() as tg:

                async def consume() -> None:
                    async for chunk in adapter.stream(options(provider, controller.signal)):
                        chunks.append(chunk)
                        first_chunk.set()
                    ended_at.append(time.perf_counter())

                tg.start_soon(consume)
                # Every task is blocked: the consumer is parked in the network read of the
                # stalled stream (the server has sent its first event and stopped).
                await first_chunk.wait()
                # The server thread marks the stall right after writing the first event: wait
                # for that mark (it lives in another thread) rather than racing it.
                assert await anyio.to_thread.run_sync(server.stalled.wait, 10)
                await anyio.wait_all_tasks_blocked()
                aborted_at = time.perf_counter()
                controller.abort("user")
        finally:
            await adapter.aclose()
    gap = ended_at[0] - aborted_at
    print(f"\n{provider}: abort → generator exit took {gap * 1000:.2f} ms")
    assert gap < 1.0  # guards against hangs; typically well under 10 ms
    result = check_contract(chunks)
    assert result.text == "Thinking"
    assert isinstance(result.finish, Aborted)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_abort_while_waiting_for_response_headers(provider: str) -> None:
    controller = AbortController()
    with LoopbackServer(Reply(parts=[STALL])) as server:  # not even a status line
        adapter = adapter_for(provider, server.url)
        try:
            async with anyio.create_task_group() as tg:
                out: list[StreamChunk] = []

                async def consume() -> None:
                    out.extend(
                        [c async for c in adapter.stream(options(provider, controller.signal))]
                    )

                tg.start_soon(consume)
                await anyio.wait_all_tasks_blocked()
                await anyio.to_thread.run_sync(server.stalled.wait)
                await anyio.wait_all_tasks_blocked()
                controller.abort("user")
        finally:
            await adapter.aclose()
    assert out == [Finish(reason=Aborted())]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_already_aborted_signal_sends_nothing(provider: str) -> None:
    controller = AbortController()
    controller.abort("user")
    with LoopbackServer(Reply()) as server:
        adapter = adapter_for(provider, server.url)
        try:
            chunks = [c async for c in adapter.stream(options(provider, controller.signal))]
        finally:
            await adapter.aclose()
    assert chunks == [Finish(reason=Aborted())]
    assert server.requests == []


# -- retry-after parsing ------------------------------------------------------------------------


def test_retry_after_prefers_milliseconds_then_seconds_then_http_date() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < (parse_retry_after({"retry-after": when}) or 0) <= 30
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"retry-after": past}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
