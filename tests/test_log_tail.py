"""Log version 3: a response's tail (its last ``usage`` chunk and its ``finish``) is left out
of the log when the ``assistant/message`` that follows implies it (the message holds that
usage; the finish is ``tool-calls`` with a tool call, else ``stop``). Every other tail is
logged, and what is rebuilt from the log (the messages, the usage, a replay's chunks) is what
was streamed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _loop_helpers import OPTIONS, events, logged_chunks, make_app, register, run, scripted

from agentloop_nb.llm import (
    BlockEnd,
    BlockStart,
    Finish,
    GenerateOptions,
    MaxTokens,
    Stop,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
    Usage,
    UsageChunk,
    assemble,
)
from agentloop_nb.messages import ToolCallBlock
from agentloop_nb.session import HEADER_VERSION, JsonlPersistence, freeze_json
from agentloop_nb.testing import ReplayModel, error, text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


@tool
def noop(q: int = 0) -> str:
    """Do nothing."""
    return "ok"


async def _no_wait(_seconds: float) -> None:
    return None


def _tail(agent: Any) -> list[tuple[int, int, str]]:
    """(turn, step, type) of every logged usage or finish chunk."""
    return [
        (e.data["turn"], e.data["step"], e.data["chunk"]["type"])
        for e in events(agent, "assistant/chunk")
        if e.data["chunk"]["type"] in ("usage", "finish")
    ]


def _called(index: int, call_id: str, finish: Any = None) -> list[StreamChunk]:
    """A tool call carried by its ``block-end``, the usage, and ``finish``."""
    block = ToolCallBlock(id=call_id, name="noop", arguments="{}")
    return [
        BlockEnd(index=index, block=block),
        UsageChunk(usage=Usage(input_tokens=3, output_tokens=1)),
        Finish(reason=finish or ToolCalls()),
    ]


# What each response streamed, as the script gives it: the replay must stream the same.
SCRIPT: list[list[StreamChunk]] = [
    tool_call("c1", "noop", {"q": 1}, text="looking"),  # tool-calls: tail implied
    # stop with a tool call (some servers say so): not what the message implies, kept
    _called(0, "c2", Stop()),
    # two usage chunks: the first (partial) is logged, the last is the message's
    [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="done"),
        UsageChunk(usage=Usage(input_tokens=5)),
        BlockEnd(index=0),
        UsageChunk(usage=Usage(input_tokens=5, output_tokens=2)),
        Finish(reason=Stop()),
    ],
]


async def _record(root: Path) -> Any:
    """The agent of session ``tail`` under ``root``, after one turn of ``SCRIPT``."""
    app = make_app(persistence=JsonlPersistence(root))
    register(app, noop)
    scripted(app, *SCRIPT)
    agent = (await app.ctx.agents.create(session_id="tail", agent_options=OPTIONS)).agent
    await run(agent, "go")
    await app.aclose()
    return agent


async def test_an_implied_tail_is_left_out_and_the_replay_streams_it_again(
    tmp_path: Path,
) -> None:
    agent = await _record(tmp_path)
    assert _tail(agent) == [(1, 2, "usage"), (1, 2, "finish"), (1, 3, "usage")]
    assert [c["type"] for c in logged_chunks(agent, 1)][-1] == "block-end"
    # The messages still hold each response's usage, the last one streamed.
    usages = [e.data.get("usage") for e in events(agent, "assistant/message")]
    assert usages[2] == {"input_tokens": 5, "output_tokens": 2}
    assert all(u is not None for u in usages)
    # Replayed from the file, each call streams what folds into what was streamed.
    header, _ = JsonlPersistence(tmp_path).load("tail")
    assert header.version == HEADER_VERSION == 3
    model = ReplayModel.from_session(tmp_path / "tail.jsonl")
    assert len(model.calls) == 3
    for call, streamed in zip(model.calls, SCRIPT, strict=True):
        assert assemble(call.chunks) == assemble(streamed)
        assert call.chunks[-1] == streamed[-1]  # the finish, logged or implied
    assert model.calls[0].chunks[-2:] == tuple(SCRIPT[0][-2:])  # the usage, tool-calls
    assert SCRIPT[0][-1] == Finish(reason=ToolCalls())
    assert model.calls[1].chunks == tuple(SCRIPT[1])  # kept as logged: nothing added
    # The partial usage is logged, the final one comes back from the message.
    assert [c for c in model.calls[2].chunks if isinstance(c, UsageChunk)] == [
        SCRIPT[2][2],
        SCRIPT[2][4],
    ]


async def test_a_replayed_version_3_log_gives_the_same_log_again(tmp_path: Path) -> None:
    recorded = await _record(tmp_path)
    again_app = make_app()
    register(again_app, noop)
    again_app.ctx.llm.register_adapter(["scripted"], ReplayModel.from_session(recorded.session))
    again = (await again_app.ctx.agents.create(session_id="again", agent_options=OPTIONS)).agent
    await run(again, "go")
    await again_app.aclose()

    def model_side(agent: Any) -> list[Any]:
        return [
            (e.type, {k: v for k, v in e.data.items() if k != "message"} | {"content": c})
            for e in agent.session.events
            if e.type in ("assistant/message", "assistant/chunk", "tool/result")
            for c in [e.data.get("message", {}).get("content")]
        ]

    assert model_side(again) == model_side(recorded)


async def test_tails_the_message_does_not_imply_are_logged() -> None:
    app = make_app()
    app.ctx.retry.sleep = _no_wait
    register(app, noop)
    scripted(
        app,
        error("SERVER", "flaky"),  # a failed attempt: its finish is the failure
        [Finish(reason=Stop())],  # content-less: nothing else would be logged
        text("next"),
        [
            BlockStart(index=0, block_type="text"),
            TextDelta(index=0, text="cut"),
            UsageChunk(usage=Usage(input_tokens=1, output_tokens=1)),
            Finish(reason=MaxTokens()),
        ],
    )
    agent = (await app.ctx.agents.create(session_id="s", agent_options=OPTIONS)).agent
    await run(agent, "one")
    await run(agent, "two")
    await run(agent, "three")
    assert _tail(agent) == [
        (1, 1, "finish"),  # the error, then the retried content-less answer's
        (1, 1, "finish"),
        (3, 1, "usage"),
        (3, 1, "finish"),
    ]
    (empty, _, _) = events(agent, "assistant/message")
    assert len(empty.source_event_seqs) == 1  # a model call's message always has a chunk
    model = ReplayModel.from_session(agent.session)
    assert [c.chunks[-1] for c in model.calls] == [
        Finish(reason=error("SERVER", "flaky")[0].reason),  # type: ignore[union-attr]
        Finish(reason=Stop()),
        Finish(reason=Stop()),
        Finish(reason=MaxTokens()),
    ]


class _Paused:
    """An adapter that streams a tool call and its usage, then waits for ``go`` before the
    finish: the session's durability barrier can run in between."""

    def __init__(self) -> None:
        self.paused = anyio.Event()
        self.go = anyio.Event()
        self.streamed: list[StreamChunk] = _called(0, "c1")

    async def stream(self, options: GenerateOptions) -> Any:
        if self.paused.is_set():  # the next step's answer
            yield Finish(reason=Stop())
            return
        yield self.streamed[0]
        yield self.streamed[1]
        self.paused.set()
        await self.go.wait()
        yield self.streamed[2]


async def test_a_tail_a_flush_logged_stays_logged_and_the_finish_is_implied() -> None:
    app = make_app()
    register(app, noop)
    model = _Paused()
    app.ctx.llm.register_adapter(["scripted"], model)
    agent = (await app.ctx.agents.create(session_id="s", agent_options=OPTIONS)).agent
    agent.followup("go")
    await model.paused.wait()
    await agent.session.flush()  # logs what the response holds: the block and the usage
    model.go.set()
    await agent.when_idle()
    assert _tail(agent) == [(1, 1, "usage"), (1, 2, "finish")]
    calls = ReplayModel.from_session(agent.session).calls
    assert calls[0].chunks == tuple(model.streamed)  # the usage not repeated


async def test_a_tool_call_block_left_open_keeps_its_tail() -> None:
    # A tool call that never saw its ``block-end`` is still in the message (the stream ended
    # normally), but its parts are logged as streamed when the response closes, after the
    # finish: the tail stays logged, in stream order.
    app = make_app()
    register(app, noop)
    open_call = [
        # a text block first: the response logs other chunks too
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="calling"),
        BlockEnd(index=0),
        ToolCallDelta(index=1, id="c1", name="noop", arguments_delta="{}"),
        UsageChunk(usage=Usage(input_tokens=2, output_tokens=1)),
        Finish(reason=ToolCalls()),
    ]
    scripted(app, open_call, text("ok"))
    agent = (await app.ctx.agents.create(session_id="s", agent_options=OPTIONS)).agent
    await run(agent, "go")
    logged = [c["type"] for c in logged_chunks(agent, 1)]
    assert logged[3:] == ["usage", "finish", "tool-call-delta"]
    assert [e.data["name"] for e in events(agent, "tool/call")] == ["noop"]
    (call, _) = ReplayModel.from_session(agent.session).calls
    assert assemble(call.chunks) == assemble(open_call)


_STOP = {"type": "finish", "reason": {"kind": "stop"}}


@pytest.mark.parametrize(
    ("tail", "kept"),
    [
        # the implied finish and the usage right before it: both left out
        ([{"type": "usage", "usage": {"input_tokens": 1}}, _STOP], False),
        # a finish whose reason has a field of its own: not what the message implies
        ([{"type": "finish", "reason": {"kind": "stop", "note": "x"}}], True),
        # a chunk after the finish (the loop's stream ends at its finish; a caller may not)
        ([_STOP, {"type": "text-delta", "index": 0, "text": "!"}], True),
    ],
)
async def test_a_chunk_log_leaves_out_only_a_last_finish_of_the_implied_reason(
    tail: list[Any], kept: bool
) -> None:
    app = make_app()
    agent = (await app.ctx.agents.create(session_id="s", agent_options=OPTIONS)).agent
    session = agent.session
    log = session.open_chunks(1, 1, lambda index: None)
    chunks = [{"type": "block-start", "index": 0, "block_type": "text"}, *tail]
    for chunk in chunks:
        log.add(freeze_json(chunk, label="chunk"))
    logged = [session.events[s].data["chunk"] for s in log.close("stop")]
    assert logged == (chunks if kept else chunks[:1])
    await app.aclose()
