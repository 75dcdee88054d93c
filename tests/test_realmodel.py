"""Agents against a real model: llama.cpp's llama-server serving Gemma 3 270M on loopback
(started by scripts/test.sh; see tests/_realmodel.py). Streaming, a tool round trip, cancelling
mid-stream and resuming with the generation options kept, through the public API only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _realmodel import MODEL, PROVIDER, few_shot_seed, providers

from agentloop_nb import AgentOptions, App, tool
from agentloop_nb.loop import Agent
from agentloop_nb.session import SessionEvent

pytestmark = [pytest.mark.anyio, pytest.mark.realmodel, pytest.mark.timeout(180)]

#: Guards against a hang only (a busy 2-core machine generates at ~80 tokens/s).
WAIT = 120.0


@tool
def add(a: int, b: int) -> int:
    """Add two integers and return their sum."""
    return a + b


ADD_EXAMPLES = [
    ("What is 3 plus 4?", "call_fs1", {"a": 3, "b": 4}, "7", "3 plus 4 is 7."),
    ("What is 10 plus 5?", "call_fs2", {"a": 10, "b": 5}, "15", "10 plus 5 is 15."),
    ("What is 21 plus 30?", "call_fs3", {"a": 21, "b": 30}, "51", "21 plus 30 is 51."),
]


def options(**kw: Any) -> AgentOptions:
    kw.setdefault("temperature", 0.0)
    return AgentOptions(provider=PROVIDER, model=MODEL, **kw)


async def idle(agent: Agent, wait: float = WAIT) -> None:
    with anyio.fail_after(wait):
        await agent.when_idle()


def of_type(agent: Agent, type: str, since: int = 0) -> list[SessionEvent]:
    return [e for e in agent.session.events[since:] if e.type == type]


def text_of(event: SessionEvent) -> str:
    blocks = event.data["message"]["content"]
    return "".join(b["text"] for b in blocks if b["type"] == "text")


def text_deltas(agent: Agent, since: int = 0) -> list[str]:
    chunks = (e.data["chunk"] for e in of_type(agent, "assistant/chunk", since))
    return [c["text"] for c in chunks if c["type"] == "text-delta"]


async def first_event(app: App, agent: Agent, predicate: Callable[[SessionEvent], bool]) -> None:
    """Return once ``agent`` logs an event matching ``predicate`` (event-driven, no polling)."""
    seen = anyio.Event()

    def on_event(payload: Any) -> None:
        if payload.session is agent.session and predicate(payload.event):
            seen.set()

    off = app.ctx.on("session/event", on_event)
    try:
        with anyio.fail_after(WAIT):
            await seen.wait()
    finally:
        off()


async def test_agent_streams_a_reply_from_the_real_model(realmodel_url: str) -> None:
    app = App(providers=providers(realmodel_url), invariants=True)
    try:
        agent = app.ctx.agent_loop.create("writer", options(max_tokens=48))
        agent.followup("Write one sentence about the sea.")
        await idle(agent)
    finally:
        await app.aclose()
    [message] = of_type(agent, "assistant/message")
    deltas = text_deltas(agent)
    assert len(deltas) >= 2, deltas  # streamed, not delivered whole
    assert "".join(deltas) == text_of(message) and text_of(message).strip()
    usage = message.data["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0, usage
    [end] = of_type(agent, "turn/end")
    assert end.data["reason"]["kind"] in ("completed", "max-tokens"), end.data


async def test_tool_round_trip_with_few_shot_history(realmodel_url: str) -> None:
    app = App(providers=providers(realmodel_url), invariants=True)
    app.ctx.tools.register(add)
    try:
        handle = await app.ctx.agents.create(
            session_id="calc",
            agent_options=options(max_tokens=64),
            seed=few_shot_seed("add", ADD_EXAMPLES),
        )
        agent = handle.agent
        start = len(agent.session.events)
        agent.followup("What is 17 plus 25?")
        await idle(agent)
    finally:
        await app.aclose()
    calls = of_type(agent, "tool/call", start)
    assert calls, [e.type for e in agent.session.events[start:]]
    assert calls[0].data["name"] == "add"
    assert json.loads(calls[0].data["arguments"]) == {"a": 17, "b": 25}
    result = of_type(agent, "tool/result", start)[0]
    assert result.data["content"] == "42" and result.data["is_error"] is False
    answer = of_type(agent, "assistant/message", start)[-1]
    assert "42" in text_of(answer), text_of(answer)
    # The base model may ramble on after its answer until the token limit.
    end = of_type(agent, "turn/end", start)[-1]
    assert end.data["reason"]["kind"] in ("completed", "max-tokens"), end.data


async def test_cancel_mid_stream_ends_the_turn_aborted_and_the_server_serves_on(
    realmodel_url: str,
) -> None:
    app = App(providers=providers(realmodel_url), invariants=True)
    try:
        # 160 tokens: a stream long enough to cut, and a follow-up that ends within WAIT even
        # on a loaded machine (the base model rambles on to the cap).
        agent = app.ctx.agent_loop.create("talker", options(max_tokens=160))
        agent.followup("Tell a long story about a lighthouse keeper and the sea.")
        await first_event(
            app,
            agent,
            lambda e: e.type == "assistant/chunk" and e.data["chunk"]["type"] == "text-delta",
        )
        assert agent.cancel() is True
        await idle(agent)
        [end] = of_type(agent, "turn/end")
        assert end.data["reason"]["kind"] == "aborted", end.data
        streamed = "".join(text_deltas(agent))
        # The server stopped generating: the next turn streams a fresh reply at once.
        mark = len(agent.session.events)
        agent.followup("Say hello.")
        await idle(agent)
    finally:
        await app.aclose()
    assert streamed  # the cancel landed mid-stream, after text had arrived
    assert of_type(agent, "turn/end", mark)[-1].data["reason"]["kind"] in (
        "completed",
        "max-tokens",
    )
    assert text_deltas(agent, mark)


async def test_resume_keeps_generation_options_on_the_wire(
    realmodel_url: str, tmp_path: Path
) -> None:
    sent: list[dict[str, Any]] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST":  # not the adapter's GET /props
            sent.append(json.loads(request.content))

    async def run_app(make_agent: Callable[[App], Any], prompt: str) -> Agent:
        async with httpx.AsyncClient(event_hooks={"request": [record]}) as client:
            app = App(
                providers=providers(realmodel_url, client=client),
                persistence_root=tmp_path,
                invariants=True,
            )
            try:
                agent: Agent = await make_agent(app)
                agent.followup(prompt)
                await idle(agent)
            finally:
                await app.aclose()
        return agent

    async def create(app: App) -> Agent:
        handle = await app.ctx.agents.create(
            session_id="kept", agent_options=options(temperature=0.0, max_tokens=6)
        )
        return handle.agent

    async def resume(app: App) -> Agent:
        return (await app.ctx.agents.resume(resume_session_id="kept")).agent

    await run_app(create, "Name three colours.")
    resumed = await run_app(resume, "Name three animals.")
    before, after = sent[0], sent[-1]
    assert (after["temperature"], after["max_tokens"]) == (0.0, 6), after
    assert (after["model"], before["temperature"]) == (MODEL, 0.0)
    # The server honoured the kept limit: the resumed turn's reply is at most 6 tokens.
    last = of_type(resumed, "assistant/message")[-1]
    assert 0 < last.data["usage"]["output_tokens"] <= 6, last.data


_WORDS = [
    "river",
    "mountain",
    "lantern",
    "harbour",
    "violin",
    "meadow",
    "copper",
    "thunder",
    "orchard",
    "compass",
    "glacier",
    "pepper",
    "saddle",
    "marble",
    "quartz",
    "velvet",
    "falcon",
    "prairie",
    "ember",
    "walnut",
]


def _long_history(turns: int, words_per_turn: int) -> list[dict[str, Any]]:
    """Completed turns of filler text: together well over the server's 4096-token context."""
    events: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        filler = " ".join(_WORDS[(turn * 7 + i * 3) % len(_WORDS)] for i in range(words_per_turn))
        user = {
            "role": "user",
            "id": f"long-{turn}",
            "content": [{"type": "text", "text": f"Note {turn}: {filler}"}],
            "source": {"kind": "user"},
        }
        answer = {"role": "assistant", "content": [{"type": "text", "text": f"Noted {turn}."}]}
        events += [
            {"type": "turn/start", "data": {"turn": turn}},
            {"type": "user/message", "data": {"message": user}},
            {"type": "assistant/message", "data": {"turn": turn, "step": 1, "message": answer}},
            {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}},
        ]
    return events


async def test_a_context_overflow_is_repaired_by_compaction_and_the_turn_completes(
    realmodel_url: str,
) -> None:
    from agentloop_nb.plugins.compaction import CompactionPlugin

    app = App(providers=providers(realmodel_url), invariants=True)
    # No pressure trigger (ratio 10): only the server's own overflow error starts the compaction.
    app.ctx.plugin(
        CompactionPlugin,
        config={
            "context_window": 4096,
            "trigger_ratio": 10,
            "keep_recent_turns": 1,
            "summary_max_tokens": 48,
        },
    )
    try:
        handle = await app.ctx.agents.create(
            session_id="overflow",
            agent_options=options(max_tokens=16),
            seed=_long_history(turns=6, words_per_turn=700),
        )
        agent = handle.agent
        start = len(agent.session.events)
        agent.followup("Say hello.")
        await idle(agent)
        attempts = of_type(agent, "assistant/attempt", start)
        assert [a.data["failure"]["code"] for a in attempts] == ["CONTEXT_WINDOW_EXCEEDED"]
        (summary,) = of_type(agent, "compaction/summary", start)
        assert summary.seq > attempts[0].seq
        (end,) = of_type(agent, "turn/end", start)
        # The turn ends normally: the base model may stop by itself or use all 16 tokens.
        assert end.data["reason"]["kind"] in ("completed", "max-tokens")
        (reply,) = of_type(agent, "assistant/message", start)
        assert reply.seq > summary.seq and reply.data["usage"]["input_tokens"] < 4096
    finally:
        await app.aclose()


# Default caps: the summary and the answer may each write 1,024 tokens (a quarter of the
# window) on a CPU shared with the rest of the suite.
@pytest.mark.timeout(420)
async def test_by_default_a_long_conversation_is_compacted_before_the_servers_window_overflows(
    realmodel_url: str,
) -> None:
    app = App(providers=providers(realmodel_url), invariants=True)  # compaction: the default
    try:
        adapter = app.ctx.llm.adapter_for(PROVIDER)
        assert await adapter.context_window(MODEL) == 4096  # llama-server -c 4096
        handle = await app.ctx.agents.create(
            session_id="window",
            agent_options=options(),
            seed=_long_history(turns=6, words_per_turn=700),
        )
        agent = handle.agent
        start = len(agent.session.events)
        agent.followup("Say hello.")
        await idle(agent, wait=3 * WAIT)
        assert of_type(agent, "assistant/attempt", start) == []  # no overflow
        (summary,) = of_type(agent, "compaction/summary", start)
        assert summary.data["reason"] == "pressure"
        (header,) = of_type(agent, "request/header", start)
        assert header.data["header"]["config"]["max_tokens"] == 1024  # a quarter of 4096
        (end,) = of_type(agent, "turn/end", start)
        assert end.data["reason"]["kind"] in ("completed", "max-tokens")
        (reply,) = of_type(agent, "assistant/message", start)
        assert reply.seq > summary.seq and reply.data["usage"]["input_tokens"] < 4096 - 1024
    finally:
        await app.aclose()
