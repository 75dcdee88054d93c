"""Secrets never reach ``turn/end``, ``agent/error`` or the saved log: a key straddling the
quote limit, an upper-cased echo, credentials in the ``base_url`` user-info and ``Basic``
credentials in configured headers are all redacted before anything is cut or shown."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from peers.loopback import Captured, LoopbackServer, Reply, json_reply

from agentloop_nb import AgentOptions, App

pytestmark = pytest.mark.anyio

KEY = "sk-PLANTED-0123456789abcdef"
PASSWORD = "pw-PLANTED-hunter2hunter2"
WAIT = 10.0  # seconds: a guard against a hang, never a synchronisation point


def rejecting(message: Callable[[Captured], str]) -> Callable[[Captured], Reply]:
    def handler(request: Captured) -> Reply:
        body = {"error": {"message": message(request), "type": "authentication_error"}}
        return json_reply(401, body)

    return handler


async def failed_turn_texts(root: Path, provider: dict[str, Any]) -> list[str]:
    """Run one turn against ``provider`` (which fails) and return everything a person or the
    log sees: the turn/end message, the agent/error text and every persisted byte."""
    app = App(persistence_root=root, providers={"proxy": {"type": "openai", **provider}})
    errors: list[BaseException] = []
    app.ctx.on("agent/error", lambda p: errors.append(p.error))
    adapter = app.ctx.llm.adapter_for("proxy")
    agent = app.ctx.agent_loop.create("s", AgentOptions(provider="proxy", model="m"))
    try:
        agent.followup("hi")
        with anyio.fail_after(WAIT):
            await agent.when_idle()
        ends = [e.data["reason"] for e in agent.session.events if e.type == "turn/end"]
    finally:
        await app.aclose()
        await adapter.aclose()  # App.aclose() leaves the adapters' HTTP clients open
    assert [r["kind"] for r in ends] == ["error"] and ends[0]["code"] == "AUTH"
    assert errors, "agent/error fired"
    shown = [ends[0]["message"], *(f"{e!s} {e!r}" for e in errors)]
    return [*shown, (root / f"{agent.session.id}.jsonl").read_text(encoding="utf-8")]


def assert_no_leak(texts: list[str], *secrets: str) -> None:
    for text in texts:
        assert "planted" not in text.lower(), text
        for secret in secrets:
            assert secret.lower() not in text.lower(), text


async def test_a_key_straddling_the_quote_limit_is_redacted_whole(tmp_path: Path) -> None:
    # The provider quote is cut at 300 characters, right through the key.
    message = "x" * 290 + KEY + " was rejected"
    with LoopbackServer(rejecting(lambda _: message)) as server:
        texts = await failed_turn_texts(tmp_path, {"base_url": server.url + "/v1", "api_key": KEY})
    assert "…redacted" in texts[0] and "more chars]" in texts[0]
    assert_no_leak(texts, KEY[:8])


async def test_an_upper_cased_echo_of_the_key_is_redacted(tmp_path: Path) -> None:
    with LoopbackServer(rejecting(lambda _: f"unknown key {KEY.upper()}")) as server:
        texts = await failed_turn_texts(tmp_path, {"base_url": server.url + "/v1", "api_key": KEY})
    assert "unknown key …redacted" in texts[0]
    assert_no_leak(texts)


def echo_basic(request: Captured) -> str:
    token = request.headers["authorization"].split()[1]
    return f"you sent {json.dumps(request.headers)} = {base64.b64decode(token).decode()}"


async def test_credentials_in_the_base_url_user_info_are_redacted(tmp_path: Path) -> None:
    with LoopbackServer(rejecting(echo_basic)) as server:
        host = server.url.split("://", 1)[1]
        url = f"http://alice:{PASSWORD}@{host}/v1"
        texts = await failed_turn_texts(tmp_path, {"base_url": url, "api_key": KEY, "headers": {}})
        sent = server.requests[0].headers["authorization"]
    assert "you sent" in texts[0]
    assert_no_leak(texts, sent.split()[-1])


async def test_basic_credentials_in_configured_headers_are_redacted(tmp_path: Path) -> None:
    token = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    with LoopbackServer(rejecting(echo_basic)) as server:
        texts = await failed_turn_texts(
            tmp_path,
            {
                "base_url": server.url + "/v1",
                "headers": {"Authorization": f"Basic {token}"},
                "require_key": False,
            },
        )
    assert "you sent" in texts[0]
    assert_no_leak(texts, token)
