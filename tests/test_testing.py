from __future__ import annotations

import asyncio
import json

import pytest
from _llm_helpers import collect, opts

from agentloop_nb.llm import (
    Aborted,
    BlockEnd,
    BlockStart,
    ErrorFinish,
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
from agentloop_nb.messages import TextBlock, ToolCallBlock
from agentloop_nb.signals import AbortController
from agentloop_nb.testing import (
    HANG,
    ScriptedModel,
    combine,
    error,
    hang_after,
    max_tokens,
    text,
    tool_call,
)


def test_text_streams_one_delta_per_character_then_usage_and_stop() -> None:
    assert text("hey") == [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="h"),
        TextDelta(index=0, text="e"),
        TextDelta(index=0, text="y"),
        BlockEnd(index=0),
        UsageChunk(usage=Usage(input_tokens=10, output_tokens=3)),
        Finish(reason=Stop()),
    ]


def test_max_tokens_is_text_ending_in_a_max_tokens_finish() -> None:
    chunks = max_tokens("cut")
    assert chunks[:-1] == text("cut")[:-1]
    assert chunks[-1] == Finish(reason=MaxTokens())


def test_tool_call_streams_arguments_in_two_deltas_after_optional_text() -> None:
    chunks = tool_call("c1", "echo", {"text": "ping"}, text="ok")
    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert len(deltas) == 2
    assert {d.index for d in deltas} == {1}
    assert "".join(d.arguments_delta for d in deltas) == json.dumps({"text": "ping"})
    assert chunks[-1] == Finish(reason=ToolCalls())
    assert isinstance(chunks[-2], UsageChunk)
    message, _, _ = assemble(chunks)
    assert message.content == (
        TextBlock(text="ok"),
        ToolCallBlock(id="c1", name="echo", arguments='{"text": "ping"}'),
    )


def test_tool_call_with_string_arguments_keeps_them_raw() -> None:
    message, _, _ = assemble(tool_call("c1", "echo", "{not json"))
    assert message.tool_calls == (ToolCallBlock(id="c1", name="echo", arguments="{not json"),)


def test_combine_reindexes_blocks_into_one_response_with_one_usage_and_finish() -> None:
    chunks = combine(tool_call("c1", "a", {"x": 1}, text="first"), tool_call("c2", "b", {"y": 2}))
    assert sum(isinstance(c, UsageChunk) for c in chunks) == 1
    assert sum(isinstance(c, Finish) for c in chunks) == 1
    assert chunks[-1] == Finish(reason=ToolCalls())
    starts = [c.index for c in chunks if isinstance(c, BlockStart)]
    assert starts == [0, 1, 2]
    message, _, finish = assemble(chunks)
    assert finish == ToolCalls()
    assert [b.id for b in message.tool_calls] == ["c1", "c2"]
    assert message.text == "first"


def test_error_is_a_single_terminal_error_finish() -> None:
    assert error("RATE_LIMIT", "slow") == [
        Finish(reason=ErrorFinish(code="RATE_LIMIT", message="slow"))
    ]


@pytest.mark.anyio
async def test_scripted_model_replays_entries_in_order_and_records_requests() -> None:
    model = ScriptedModel([text("a"), error("SERVER", "down")])
    first, second = opts(), opts(system="s")
    assert await collect(model.stream(first)) == text("a")
    assert await collect(model.stream(second)) == error("SERVER", "down")
    assert model.requests == [first, second]


@pytest.mark.anyio
async def test_exhausted_script_is_an_error_finish() -> None:
    model = ScriptedModel([])
    chunks = await collect(model.stream(opts()))
    assert len(chunks) == 1 and isinstance(chunks[0], Finish)
    reason = chunks[0].reason
    assert isinstance(reason, ErrorFinish)
    assert reason.message == "ScriptedModel: script exhausted"


@pytest.mark.anyio
async def test_push_extends_the_script() -> None:
    model = ScriptedModel([text("a")])
    model.push(text("b"), text("c"))
    assert model.remaining == 3
    outputs = [assemble(await collect(model.stream(opts())))[0].text for _ in range(3)]
    assert outputs == ["a", "b", "c"]


@pytest.mark.anyio
async def test_callable_entries_receive_the_options_sync_or_async() -> None:
    def sync_entry(options: GenerateOptions) -> list[StreamChunk]:
        return text(f"model={options.model}")

    async def async_entry(options: GenerateOptions) -> list[StreamChunk]:
        return text(f"system={options.system}")

    model = ScriptedModel([sync_entry, async_entry])
    assert assemble(await collect(model.stream(opts())))[0].text == "model=m"
    assert assemble(await collect(model.stream(opts(system="S"))))[0].text == "system=S"


@pytest.mark.anyio
async def test_hang_streams_partial_then_finishes_aborted_when_the_signal_aborts() -> None:
    model = ScriptedModel([HANG])
    controller = AbortController()
    got: list[StreamChunk] = []
    partial = asyncio.Event()

    async def consume() -> None:
        async for chunk in model.stream(opts(signal=controller.signal)):
            got.append(chunk)
            if isinstance(chunk, TextDelta):
                partial.set()

    task = asyncio.create_task(consume())
    await partial.wait()
    assert not task.done()
    controller.abort("user")
    await task
    assert got == [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="partial"),
        Finish(reason=Aborted()),
    ]


@pytest.mark.anyio
async def test_hang_after_streams_the_chunks_without_their_finish_then_hangs() -> None:
    model = ScriptedModel([hang_after(text("ab"))])
    controller = AbortController()
    got: list[StreamChunk] = []
    usage_seen = asyncio.Event()

    async def consume() -> None:
        async for chunk in model.stream(opts(signal=controller.signal)):
            got.append(chunk)
            if isinstance(chunk, UsageChunk):
                usage_seen.set()

    task = asyncio.create_task(consume())
    await usage_seen.wait()
    assert not task.done()
    controller.abort("user")
    await task
    assert got == [*text("ab")[:-1], Finish(reason=Aborted())]


@pytest.mark.anyio
async def test_hang_without_a_signal_waits_until_the_consumer_cancels() -> None:
    model = ScriptedModel([HANG])
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in model.stream(opts()):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
