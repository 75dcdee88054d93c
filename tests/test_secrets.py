"""API keys never leak: not in reprs, error messages or anything an adapter yields — even when
a server echoes the request headers back in its error body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from peers.loopback import Captured, LoopbackServer, Reply, json_reply, sse_events, sse_reply
from peers.streams import collect, user

from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm._chunks import StreamChunk
from agentloop_nb.llm._errors import LlmError
from agentloop_nb.llm._http import key_hint, redact
from agentloop_nb.llm.anthropic import AnthropicAdapter
from agentloop_nb.llm.openai import OpenAIAdapter
from agentloop_nb.llm.providers import build_adapters

pytestmark = pytest.mark.anyio

KEY = "sk-proj-PLANTED0123456789abcdefSECRET"
ANT_KEY = "sk-ant-api03-PLANTEDxyz0123456789SECRET"
PROXY_TOKEN = "proxy-tok-PLANTED-42"


def leaks(chunks: list[StreamChunk], *secrets: str) -> list[str]:
    """Every secret (or its distinctive middle) found in what was yielded."""
    dumped = json.dumps([c.model_dump(mode="json") for c in chunks]) + repr(chunks) + str(chunks)
    finish = chunks[-1]
    if finish.type == "finish" and finish.reason.kind == "error":
        dumped += str(LlmError.from_finish(finish.reason))
    return [s for s in secrets if s in dumped or "PLANTED" in dumped]


def echo_headers(status: int) -> Any:
    def handler(request: Captured) -> Reply:
        # A misbehaving proxy that puts the request headers in its error message.
        message = f"bad credentials; you sent {json.dumps(request.headers)}"
        return json_reply(status, {"error": {"message": message, "type": "authentication_error"}})

    return handler


def test_redact_replaces_every_occurrence_and_ignores_empty_secrets() -> None:
    text = f"key={KEY}; again {KEY}."
    assert redact(text, [None, "", KEY]) == "key=…redacted; again …redacted."
    assert redact("abc", ["ab"]) == "abc"  # too short to be a key; never mangle text


def test_key_hint_shows_only_a_public_prefix() -> None:
    assert key_hint(KEY) == "sk-proj-…redacted"
    assert key_hint(ANT_KEY) == "sk-ant-…redacted"
    assert key_hint("hunter2hunter2") == "<set>"
    assert key_hint(None) is None


def test_reprs_never_show_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANT_KEY)
    adapters = build_adapters(
        {
            "deepseek": {"api_key": "sk-PLANTEDdeepseek0123456789"},
            "proxy": {
                "type": "openai",
                "base_url": f"https://user:{PROXY_TOKEN}@proxy.example/v1",
                "headers": {"Authorization": f"Bearer {PROXY_TOKEN}"},
                "require_key": False,
            },
        }
    )
    shown = repr(adapters) + "".join(f"{a!r}{a!s}" for a in adapters.values())
    assert "PLANTED" not in shown
    assert "api_key='sk-proj-…redacted'" in repr(adapters["openai"])
    assert "proxy.example" in repr(adapters["proxy"])


@pytest.mark.parametrize("status", [401, 403, 500])
async def test_openai_error_body_echoing_headers_is_redacted(status: int) -> None:
    with LoopbackServer(echo_headers(status)) as server:
        adapter = OpenAIAdapter(server.url + "/v1", KEY)
        try:
            chunks = await collect(
                adapter, GenerateOptions(provider="openai", model="m", messages=[user("hi")])
            )
        finally:
            await adapter.aclose()
    assert KEY in server.requests[0].headers["authorization"]  # the server did see it ...
    finish = chunks[-1]
    assert finish.type == "finish" and finish.reason.kind == "error"
    assert "…redacted" in finish.reason.message  # ... and echoed it back
    assert leaks(chunks, KEY) == []


async def test_anthropic_error_body_echoing_headers_is_redacted() -> None:
    with LoopbackServer(echo_headers(401)) as server:
        adapter = AnthropicAdapter(server.url, ANT_KEY)
        try:
            chunks = await collect(
                adapter, GenerateOptions(provider="anthropic", model="m", messages=[user("hi")])
            )
        finally:
            await adapter.aclose()
    assert server.requests[0].headers["x-api-key"] == ANT_KEY
    assert chunks[-1].type == "finish" and chunks[-1].reason.kind == "error"
    assert leaks(chunks, ANT_KEY) == []


async def test_in_stream_errors_and_malformed_data_quoting_the_key_are_redacted() -> None:
    anthropic_error = sse_events(
        [
            (
                "error",
                {"type": "error", "error": {"type": "api_error", "message": f"key {ANT_KEY} bad"}},
            )
        ]
    )
    openai_malformed = f"data: {{not json {KEY}\n\n".encode()
    for provider, body in (("anthropic", anthropic_error), ("openai", openai_malformed)):
        with LoopbackServer(sse_reply(body)) as server:
            adapter: OpenAIAdapter | AnthropicAdapter = (
                AnthropicAdapter(server.url, ANT_KEY)
                if provider == "anthropic"
                else OpenAIAdapter(server.url, KEY)
            )
            try:
                chunks = await collect(
                    adapter, GenerateOptions(provider=provider, model="m", messages=[user("hi")])
                )
            finally:
                await adapter.aclose()
        assert chunks[-1].type == "finish" and chunks[-1].reason.kind == "error"
        assert leaks(chunks, KEY, ANT_KEY) == [], provider


async def test_custom_credential_headers_and_url_userinfo_are_redacted() -> None:
    with LoopbackServer(echo_headers(401)) as server:
        adapter = OpenAIAdapter(
            server.url, headers={"Authorization": f"Bearer {PROXY_TOKEN}"}, require_key=False
        )
        try:
            chunks = await collect(
                adapter, GenerateOptions(provider="openai", model="m", messages=[user("hi")])
            )
        finally:
            await adapter.aclose()
        port = server.url.rsplit(":", 1)[1]
    assert leaks(chunks, PROXY_TOKEN) == []
    # A refused connection to a URL carrying credentials: the message names the host, not them.
    adapter = OpenAIAdapter(f"http://user:{PROXY_TOKEN}@127.0.0.1:{port}/v1", KEY)
    chunks = await collect(
        adapter, GenerateOptions(provider="openai", model="m", messages=[user("hi")])
    )
    await adapter.aclose()
    assert chunks[-1].type == "finish" and chunks[-1].reason.kind == "error"
    assert "127.0.0.1" in chunks[-1].reason.message
    assert leaks(chunks, PROXY_TOKEN, KEY) == []
