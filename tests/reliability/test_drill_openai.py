"""Known-fault drills: a hostile OpenAI-compatible server on 127.0.0.1 (``peers.loopback``)
behind a full agent with JSONL persistence. Each drill asserts a clear error (the turn-end
code and message, or the tool result), bounded time and memory, no process left, a cancel
within 2 s where the server hangs, and every event on disk afterwards."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _drills import bounded, cancel_promptly, stored_prefix_matches, turn_ends
from _loop_helpers import is_type, wait_for
from peers.loopback import DROP, STALL, Captured, LoopbackServer, Reply, json_reply, sse_reply
from peers.wire import chunk, openai_body

from agentloop_nb import AgentOptions, App
from agentloop_nb.loop import Agent
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio

KEY = "sk-test-drills-0123456789"
MB = 1 << 20


def answer(text: str = "fine") -> Reply:
    return sse_reply(openai_body(chunk({"role": "assistant", "content": text}), chunk({}, "stop")))


@tool
def echo(text: str) -> str:
    """Echo TEXT back."""
    return text


@dataclass
class Case:
    """A hostile first answer (later requests get ``then``), and what the turn must end as."""

    first: Reply | Callable[[int], Reply]
    end: dict[str, Any]  # expected turn/end reason fields
    message: str = ""  # a fragment the turn-end message (or the tool result) must contain
    megabytes: float = 64.0
    then: Reply | None = None


def server_for(case: Case) -> LoopbackServer:
    count = [0]

    def handle(_request: Captured) -> Reply:
        count[0] += 1
        if callable(case.first):
            return case.first(count[0])
        if count[0] == 1 or case.then is None:
            return case.first
        return case.then

    return LoopbackServer(handle)


def agent_on(server: LoopbackServer, root: Path, **retry: Any) -> tuple[App, Agent]:
    app = App(
        invariants=True,
        persistence=JsonlPersistence(root),
        # The window is named: a scripted server would answer the window probe (GET /props)
        # with the reply meant for the first chat request.
        providers={
            "openai": {"base_url": server.url + "/v1", "api_key": KEY, "context_window": 128_000}
        },
        retry={"base_delay": 0.01, "max_delay": 0.05, "max_retries": 2, **retry},
    )
    app.ctx.tools.register(echo)
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="openai", model="gpt-4o-mini"))
    return app, agent


async def finish(app: App, agent: Agent, root: Path) -> None:
    """Close everything (the adapter's HTTP client too) and check the log on disk."""
    adapter = app.ctx.llm.adapter_for("openai")
    await app.aclose()
    await adapter.aclose()
    _, stored = JsonlPersistence(root).load(agent.session.id)
    stored_prefix_matches(agent, stored)
    assert len(stored) == len(agent.session.events)  # everything was flushed at the close


BAD_TOOL_ARGS = openai_body(
    chunk(
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "index": 0,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": '{"text": "unterminated'},
                }
            ],
        }
    ),
    chunk({}, "tool_calls"),
)

CASES = {
    "malformed-sse": Case(
        sse_reply(b'data: {"id": "x", "choices": [{"delta": {"content": "hi"\n\n'),
        {"kind": "error", "code": "BAD_RESPONSE"},
    ),
    "ten-megabyte-chunk": Case(
        answer("x" * (10 * MB)),
        {"kind": "completed"},
        megabytes=200.0,
    ),
    "429-with-retry-after": Case(
        json_reply(429, {"error": {"message": "slow down"}}, {"retry-after": "0.2"}),
        {"kind": "error", "code": "RATE_LIMIT"},
        "slow down",
    ),
    "endless-500": Case(
        json_reply(500, {"error": {"message": "boom"}}),
        {"kind": "error", "code": "SERVER"},
    ),
    "cut-mid-stream": Case(
        Reply(parts=[b'data: {"choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n', DROP]),
        {"kind": "error", "code": "TRANSPORT"},
    ),
    "invalid-tool-call-json": Case(
        sse_reply(BAD_TOOL_ARGS), {"kind": "completed"}, "INVALID_ARGS", then=answer("sorry")
    ),
}


@pytest.mark.parametrize("name", list(CASES))
async def test_a_hostile_openai_server_gives_a_clear_bounded_end_and_loses_nothing(
    name: str, tmp_path: Path
) -> None:
    case = CASES[name]
    with server_for(case) as server:
        async with bounded(seconds=20, megabytes=case.megabytes):
            app, agent = agent_on(server, tmp_path)
            agent.followup("hi")
            await agent.when_idle()
            [end] = turn_ends(agent)
            assert {k: end.get(k) for k in case.end} == case.end, end
            if case.end["kind"] == "error":
                assert end["message"], "an error end names what went wrong"
            if case.message:
                results = [e.data for e in agent.session.events if e.type == "tool/result"]
                said = json.dumps([end, *map(dict, results)], default=str)
                assert case.message in said
            if name == "429-with-retry-after":
                delays = [e.data["delay"] for e in agent.session.events if e.type == "llm/retry"]
                assert delays == [0.2, 0.2]  # the server's Retry-After, honoured each time
            await finish(app, agent, tmp_path)


async def test_a_server_that_stalls_after_the_first_chunk_is_cancelled_within_two_seconds(
    tmp_path: Path,
) -> None:
    first = b'data: {"choices": [{"index": 0, "delta": {"content": "partial"}}]}\n\n'
    with LoopbackServer(Reply(parts=[first, STALL])) as server:
        async with bounded(seconds=20):
            app, agent = agent_on(server, tmp_path)
            agent.followup("hi")
            assert await anyio.to_thread.run_sync(server.stalled.wait, 10)
            await cancel_promptly(agent)
            assert [e["kind"] for e in turn_ends(agent)] == ["aborted"]
            [message] = [e.data for e in agent.session.events if e.type == "assistant/message"]
            assert message.get("interrupted") is True  # the text received so far is kept
            await finish(app, agent, tmp_path)


async def test_endless_500s_with_unbounded_retries_are_cancelled_within_two_seconds(
    tmp_path: Path,
) -> None:
    with server_for(Case(json_reply(500, {"error": {"message": "boom"}}), {})) as server:
        async with bounded(seconds=20):
            app, agent = agent_on(server, tmp_path, unbounded=True, base_delay=0.05)
            agent.followup("hi")
            await wait_for(agent, is_type("llm/retry"))  # retrying, forever unless cancelled
            await cancel_promptly(agent)
            assert [e["kind"] for e in turn_ends(agent)] == ["aborted"]
            await finish(app, agent, tmp_path)
