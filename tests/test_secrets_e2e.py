"""A planted API key never leaves the adapters: a whole persisted session through the App —
tool round trips, a retried server error whose body echoes the request headers, 401s — then
every persisted byte, every repr, every exception and every log record is searched for it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from peers.loopback import Captured, LoopbackServer, Reply, json_reply

from agentloop_nb import Agent, AgentOptions, App, tool

pytestmark = pytest.mark.anyio

KEY = "sk-test-PLANTED-0123456789"
MARK = "PLANTED"  # the key's distinctive middle: a partial leak is a leak too
WAIT = 10.0  # seconds: a guard against a hang, never a synchronisation point


def leaks(text: str) -> bool:
    return KEY in text or MARK in text


def echo_headers(request: Captured) -> Reply:
    """A misbehaving proxy quoting the request headers in its error body: a 500 (retryable)
    on the OpenAI route, a 401 on the Anthropic one."""
    status = 401 if request.path.endswith("/v1/messages") else 500
    kind = "authentication_error" if status == 401 else "server_error"
    message = f"rejected; you sent {json.dumps(request.headers)}"
    body: dict[str, Any] = {"error": {"message": message, "type": kind}}
    if status == 401:
        body = {"type": "error", **body}
    return json_reply(status, body)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


async def converse(agent: Agent, *prompts: str) -> None:
    for prompt in prompts:
        agent.followup(prompt)
        with anyio.fail_after(WAIT):
            await agent.when_idle()


def reasons(agent: Agent) -> list[tuple[str, str | None]]:
    return [
        (e.data["reason"]["kind"], e.data["reason"].get("code"))
        for e in agent.session.events
        if e.type == "turn/end"
    ]


@pytest.mark.peer
async def test_planted_key_appears_nowhere_after_a_persisted_session(
    llmock: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    root = tmp_path / "sessions"
    # llmock: a tool round trip for each provider (a 401 is queued before each one's next turn:
    # a queued failure would win over the scripted replies).
    for provider in ("openai", "anthropic"):
        llmock.call_tool("get_weather", {"city": "Paris"}, provider=provider)
        llmock.reply("It is sunny in Paris.", provider=provider)
    errors: list[BaseException] = []
    with LoopbackServer(echo_headers) as proxy:
        # The mocks answer every request from their scripts, a window probe too: the
        # OpenAI-style entries name their window, so nothing is probed.
        window = {"context_window": 128_000}
        providers = {
            "openai": {"base_url": llmock.base_url("openai"), "api_key": KEY, **window},
            "anthropic": {"base_url": llmock.base_url("anthropic"), "api_key": KEY},
            "proxy_openai": {
                "type": "openai",
                "base_url": proxy.url + "/v1",
                "api_key": KEY,
                **window,
            },
            "proxy_anthropic": {"type": "anthropic", "base_url": proxy.url, "api_key": KEY},
        }
        app = App(
            invariants=True,
            persistence_root=root,
            providers=providers,
            retry={"max_retries": 1, "base_delay": 0},
        )
        adapters = {name: app.ctx.llm.adapter_for(name) for name in app.ctx.llm.providers()}
        app.ctx.on("agent/error", lambda p: errors.append(p.error))
        app.ctx.on("internal/error", lambda p: errors.append(p.error))
        app.ctx.tools.register(get_weather)
        loop = app.ctx.agent_loop
        agents = {
            name: loop.create(name, AgentOptions(provider=name, model="m"))
            for name in ("openai", "anthropic", "proxy_openai", "proxy_anthropic")
        }
        try:
            for name in ("openai", "anthropic"):
                await converse(agents[name], "weather in Paris?")
                llmock.fail(401, message="invalid api key", provider=name)
                await converse(agents[name], "and tomorrow?")
            await converse(agents["proxy_openai"], "hi")
            await converse(agents["proxy_anthropic"], "hi")
            shown = [repr(app), str(app), repr(app.ctx), repr(app.ctx.llm), repr(adapters)]
            shown += [f"{a!r}{a!s}" for a in adapters.values()]
            for agent in agents.values():
                events = agent.session.events
                shown += [repr(agent), str(agent), repr(agent.session), str(agent.session)]
                shown += [repr(events), str(events), repr(agent.session.derive_messages())]
                shown += [repr(e) for e in events]
                shown += [json.dumps(e.data) for e in events]
        finally:
            await app.aclose()
            for adapter in adapters.values():
                await adapter.aclose()  # App.aclose() leaves the adapters' HTTP clients open

    # The run did what it should, so the search below looks at real failures.
    assert reasons(agents["openai"]) == [("completed", None), ("error", "AUTH")]
    assert reasons(agents["anthropic"]) == [("completed", None), ("error", "AUTH")]
    assert reasons(agents["proxy_openai"]) == [("error", "SERVER")]
    assert reasons(agents["proxy_anthropic"]) == [("error", "AUTH")]
    assert [r.status for r in llmock.requests] == [200, 200, 401, 200, 200, 401]
    assert len(proxy.requests) == 3  # the 500 was retried once
    assert proxy.requests[0].headers["authorization"] == f"Bearer {KEY}"  # the key was sent ...
    assert proxy.requests[2].headers["x-api-key"] == KEY
    echoed = [
        e.data["reason"]["message"]
        for name in ("proxy_openai", "proxy_anthropic")
        for e in agents[name].session.events
        if e.type == "turn/end"
    ]
    assert all("you sent" in m and "…redacted" in m for m in echoed), echoed  # ... and echoed

    # 1. Every persisted byte.
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == 4
    for path in files:
        raw = path.read_bytes()
        assert KEY.encode() not in raw and MARK.encode() not in raw, path
        assert b"rejected; you sent" in raw or b"invalid api key" in raw, path
    # 2. Reprs of the App, agents, sessions, adapters and events.
    assert [s for s in shown if leaks(s)] == []
    # 3. Exception messages (provider failures end turns; nothing else may have raised).
    raised = [f"{e!s} {e!r} {e.__cause__!r} {e.__context__!r}" for e in errors]
    assert [s for s in raised if leaks(s)] == []
    # 4. Log records.
    assert not leaks(caplog.text)
    assert not any(leaks(str(r.args)) for r in caplog.records)


def test_app_config_repr_and_validation_errors_hide_the_key() -> None:
    app = App(providers={"openai": {"api_key": KEY}})
    assert not leaks(repr(app.config)) and not leaks(str(app.config))
    with pytest.raises(ValueError) as bad:
        App({"providers": {"openai": KEY}})  # the key given where its options belong
    assert not leaks(str(bad.value))
