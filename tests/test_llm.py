from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _llm_helpers import collect, make_ctx, opts

import agentloop_nb.llm as llm
from agentloop_nb.context import Context
from agentloop_nb.llm import (
    Aborted,
    BlockAssembler,
    BlockEnd,
    BlockStart,
    ErrorFinish,
    Finish,
    GenerateOptions,
    LlmError,
    LlmRuntime,
    LlmStreamPayload,
    MaxTokens,
    ReasoningDelta,
    Stop,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
    Usage,
    UsageChunk,
    assemble,
)
from agentloop_nb.messages import AssistantMessage, ReasoningBlock, TextBlock, ToolCallBlock
from agentloop_nb.signals import AbortController
from agentloop_nb.testing import HANG, ScriptedModel, text, tool_call


def finish_of(chunks: list[StreamChunk]) -> Any:
    assert isinstance(chunks[-1], Finish)
    assert sum(isinstance(c, Finish) for c in chunks) == 1
    return chunks[-1].reason


class Adapter:
    """An adapter yielding ``chunks`` then doing ``then`` (raise / stop / wait)."""

    def __init__(self, chunks: list[StreamChunk], then: Any = None) -> None:
        self.chunks = chunks
        self.then = then
        self.closed = False
        self.started = asyncio.Event()

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        try:
            for chunk in self.chunks:
                yield chunk
            self.started.set()
            if isinstance(self.then, BaseException):
                raise self.then
            if isinstance(self.then, asyncio.Event):
                await self.then.wait()  # ignores the signal on purpose
        finally:
            self.closed = True


# -- package surface --------------------------------------------------------------------------


def isort_key(name: str) -> tuple[int, str]:
    # The order ruff's RUF022 enforces: CONSTANTS, then Classes, then functions.
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


def test_llm_package_all_is_sorted_and_importable() -> None:
    assert llm.__all__ == sorted(llm.__all__, key=isort_key)
    for name in llm.__all__:
        assert hasattr(llm, name), name


# -- adapter registry -------------------------------------------------------------------------


def test_register_adapter_lists_providers_and_dispose_removes_them() -> None:
    ctx = make_ctx()
    model = ScriptedModel()
    dispose = ctx.llm.register_adapter(["zeta", "alpha"], model)
    assert ctx.llm.providers() == ["alpha", "zeta"]
    assert ctx.llm.adapter_for("zeta") is model
    assert ctx.llm.adapter_for("missing") is None
    dispose()
    assert ctx.llm.providers() == []


def test_duplicate_adapter_is_refused_naming_the_provider_and_registers_nothing() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], ScriptedModel())
    with pytest.raises(LlmError) as info:
        ctx.llm.register_adapter(["other", "scripted"], ScriptedModel())
    assert info.value.code == "DUPLICATE_ADAPTER"
    assert "'scripted'" in info.value.message
    assert ctx.llm.providers() == ["scripted"]  # 'other' was not half-registered


def test_adapter_registered_in_a_plugin_is_removed_when_the_plugin_unloads() -> None:
    ctx = make_ctx()

    def plugin(pctx: Context, config: Any) -> None:
        pctx.llm.register_adapter(["scripted"], ScriptedModel())

    fiber = ctx.plugin(plugin)
    assert ctx.llm.providers() == ["scripted"]
    fiber.dispose()
    assert ctx.llm.providers() == []


def test_stale_adapter_disposer_leaves_a_replacement_alone() -> None:
    ctx = make_ctx()
    runtime = LlmRuntime(ctx)
    first = runtime.register_adapter(["p"], ScriptedModel())
    first()
    replacement = ScriptedModel()
    runtime.register_adapter(["p"], replacement)
    first()
    assert runtime.adapter_for("p") is replacement


# -- streaming ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_stream_passes_adapter_chunks_through_unchanged() -> None:
    ctx = make_ctx()
    model = ScriptedModel([text("hi")])
    ctx.llm.register_adapter(["scripted"], model)
    options = opts()
    chunks = await collect(ctx.llm.stream(options))
    assert chunks == text("hi")
    assert model.requests == [options]


@pytest.mark.anyio
async def test_no_adapter_is_an_error_finish_naming_provider_and_registered_ones() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], ScriptedModel())
    chunks = await collect(ctx.llm.stream(opts("nope")))
    reason = finish_of(chunks)
    assert len(chunks) == 1
    assert isinstance(reason, ErrorFinish)
    assert reason.code == "NO_ADAPTER"
    assert "'nope'" in reason.message and "'scripted'" in reason.message


@pytest.mark.anyio
async def test_adapter_exception_becomes_unknown_error_finish_with_its_text() -> None:
    ctx = make_ctx()
    adapter = Adapter([BlockStart(index=0, block_type="text")], then=RuntimeError("socket gone"))
    ctx.llm.register_adapter(["scripted"], adapter)
    chunks = await collect(ctx.llm.stream(opts()))
    reason = finish_of(chunks)
    assert chunks[0] == BlockStart(index=0, block_type="text")
    assert isinstance(reason, ErrorFinish)
    assert reason.code == "UNKNOWN"
    assert "socket gone" in reason.message
    assert adapter.closed


@pytest.mark.anyio
async def test_adapter_llm_error_keeps_its_code_status_and_retry_after() -> None:
    ctx = make_ctx()
    boom = LlmError("RATE_LIMIT", "slow down", status=429, retry_after=2.0)
    ctx.llm.register_adapter(["scripted"], Adapter([], then=boom))
    reason = finish_of(await collect(ctx.llm.stream(opts())))
    assert reason == ErrorFinish(
        code="RATE_LIMIT", message="slow down", status=429, retry_after=2.0
    )


@pytest.mark.anyio
async def test_adapter_whose_stream_call_raises_synchronously_is_an_error_finish() -> None:
    class Broken:
        def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
            raise ValueError("bad config")

    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], Broken())
    reason = finish_of(await collect(ctx.llm.stream(opts())))
    assert isinstance(reason, ErrorFinish)
    assert reason.code == "UNKNOWN" and "bad config" in reason.message


@pytest.mark.anyio
async def test_stream_that_ends_without_finish_is_a_transport_error() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], Adapter([TextDelta(index=0, text="a")]))
    chunks = await collect(ctx.llm.stream(opts()))
    reason = finish_of(chunks)
    assert chunks[0] == TextDelta(index=0, text="a")
    assert isinstance(reason, ErrorFinish)
    assert reason.code == "TRANSPORT"
    assert reason.message == "stream ended without a finish"


@pytest.mark.anyio
async def test_chunks_after_the_finish_are_dropped_and_the_adapter_is_closed() -> None:
    ctx = make_ctx()
    extra = TextDelta(index=0, text="late")
    adapter = Adapter([Finish(reason=Stop()), extra, Finish(reason=MaxTokens())])
    ctx.llm.register_adapter(["scripted"], adapter)
    chunks = await collect(ctx.llm.stream(opts()))
    assert chunks == [Finish(reason=Stop())]
    assert adapter.closed


@pytest.mark.anyio
async def test_signal_aborted_before_the_call_finishes_aborted_without_calling_adapter() -> None:
    ctx = make_ctx()
    model = ScriptedModel([text("never")])
    ctx.llm.register_adapter(["scripted"], model)
    controller = AbortController()
    controller.abort("user")
    chunks = await collect(ctx.llm.stream(opts(signal=controller.signal)))
    assert chunks == [Finish(reason=Aborted())]
    assert model.requests == []


@pytest.mark.anyio
async def test_hang_entry_aborted_from_another_task_finishes_aborted() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], ScriptedModel([HANG]))
    controller = AbortController()
    received: list[StreamChunk] = []
    partial_seen = asyncio.Event()

    async def consume() -> None:
        async for chunk in ctx.llm.stream(opts(signal=controller.signal)):
            received.append(chunk)
            if isinstance(chunk, TextDelta):
                partial_seen.set()

    task = asyncio.create_task(consume())
    await partial_seen.wait()
    controller.abort("user")
    await task
    assert received[-1] == Finish(reason=Aborted())
    assert "".join(c.text for c in received if isinstance(c, TextDelta)) == "partial"


@pytest.mark.anyio
async def test_abort_interrupts_an_adapter_that_ignores_the_signal_and_closes_it() -> None:
    ctx = make_ctx()
    never = asyncio.Event()
    adapter = Adapter([TextDelta(index=0, text="x")], then=never)
    ctx.llm.register_adapter(["scripted"], adapter)
    controller = AbortController()
    result: list[StreamChunk] = []

    async def consume() -> int:
        async for chunk in ctx.llm.stream(opts(signal=controller.signal)):
            result.append(chunk)
        # The abort must not leave a pending cancellation on the consumer.
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(0)
        return task.cancelling()

    task = asyncio.create_task(consume())
    await adapter.started.wait()
    controller.abort("user")
    assert await task == 0
    assert result == [TextDelta(index=0, text="x"), Finish(reason=Aborted())]
    assert adapter.closed


@pytest.mark.anyio
async def test_abort_while_consumer_is_busy_between_chunks_does_not_cancel_the_consumer() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], ScriptedModel([text("abc")]))
    controller = AbortController()
    received: list[StreamChunk] = []
    busy, resume = asyncio.Event(), asyncio.Event()

    async def consume() -> None:
        async for chunk in ctx.llm.stream(opts(signal=controller.signal)):
            received.append(chunk)
            if isinstance(chunk, TextDelta):
                busy.set()
                await resume.wait()  # the consumer's own await must not be cancelled

    task = asyncio.create_task(consume())
    await busy.wait()
    controller.abort("user")  # from another task, while the consumer is parked outside
    resume.set()
    await task
    assert received == [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="a"),
        Finish(reason=Aborted()),
    ]


@pytest.mark.anyio
async def test_abort_from_inside_the_consuming_task_finishes_aborted_at_the_next_chunk() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], ScriptedModel([text("abc")]))
    controller = AbortController()
    received: list[StreamChunk] = []
    async for chunk in ctx.llm.stream(opts(signal=controller.signal)):
        received.append(chunk)
        if isinstance(chunk, TextDelta):
            controller.abort("user")
    assert received[-1] == Finish(reason=Aborted())
    assert len(received) == 3


@pytest.mark.anyio
async def test_external_cancellation_of_the_consumer_still_propagates() -> None:
    ctx = make_ctx()
    never = asyncio.Event()
    adapter = Adapter([], then=never)
    ctx.llm.register_adapter(["scripted"], adapter)
    controller = AbortController()

    async def consume() -> None:
        await collect(ctx.llm.stream(opts(signal=controller.signal)))

    task = asyncio.create_task(consume())
    await adapter.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert adapter.closed


@pytest.mark.anyio
async def test_closing_the_stream_early_closes_the_adapter() -> None:
    ctx = make_ctx()
    adapter = Adapter([TextDelta(index=0, text="a"), TextDelta(index=0, text="b")])
    ctx.llm.register_adapter(["scripted"], adapter)
    stream = ctx.llm.stream(opts())
    assert await stream.__anext__() == TextDelta(index=0, text="a")
    await stream.aclose()
    assert adapter.closed
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


# -- llm/stream waterfall ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_unobserved_stream_calls_its_adapter_only_when_the_first_chunk_is_asked() -> None:
    ctx = make_ctx()
    calls: list[GenerateOptions] = []

    class Counting:
        def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
            calls.append(options)
            return ScriptedModel([text("ok")]).stream(options)

    ctx.llm.register_adapter(["scripted"], Counting())
    options = opts()
    stream = ctx.llm.stream(options)
    assert calls == []
    assert await collect(stream) == text("ok")
    assert calls == [options]


@pytest.mark.anyio
async def test_a_stream_listener_added_before_the_first_chunk_is_dispatched() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], ScriptedModel([text("ok")]))
    stream = ctx.llm.stream(opts())  # made while nothing listens
    seen: list[LlmStreamPayload] = []

    async def spy(payload: LlmStreamPayload, next: Any) -> Any:
        seen.append(payload)
        return await next()

    ctx.on("llm/stream", spy)
    assert await collect(stream) == text("ok")
    assert len(seen) == 1


@pytest.mark.anyio
async def test_waterfall_listener_can_wrap_the_stream_to_record_chunks() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], ScriptedModel([text("ok")]))
    recorded: list[StreamChunk] = []
    payloads: list[LlmStreamPayload] = []

    async def recorder(payload: LlmStreamPayload, next: Any) -> AsyncIterator[StreamChunk]:
        payloads.append(payload)
        inner = await next()

        async def wrapped() -> AsyncIterator[StreamChunk]:
            async for chunk in inner:
                recorded.append(chunk)
                yield chunk

        return wrapped()

    ctx.on("llm/stream", recorder)
    options = opts()
    chunks = await collect(ctx.llm.stream(options))
    assert chunks == text("ok") == recorded
    assert payloads == [LlmStreamPayload(options)]


@pytest.mark.anyio
async def test_waterfall_listener_that_short_circuits_replays_without_an_adapter() -> None:
    ctx = make_ctx()  # no adapter registered at all
    replay = text("cached")

    async def replayer(payload: LlmStreamPayload, next: Any) -> AsyncIterator[StreamChunk]:
        async def gen() -> AsyncIterator[StreamChunk]:
            for chunk in replay:
                yield chunk

        return gen()

    ctx.on("llm/stream", replayer)
    assert await collect(ctx.llm.stream(opts("recorded"))) == replay


@pytest.mark.anyio
async def test_replacement_stream_from_a_listener_is_normalised_too() -> None:
    ctx = make_ctx()

    async def truncated(payload: LlmStreamPayload, next: Any) -> AsyncIterator[StreamChunk]:
        async def gen() -> AsyncIterator[StreamChunk]:
            yield TextDelta(index=0, text="a")

        return gen()

    ctx.on("llm/stream", truncated)
    reason = finish_of(await collect(ctx.llm.stream(opts())))
    assert isinstance(reason, ErrorFinish) and reason.code == "TRANSPORT"


@pytest.mark.anyio
async def test_listener_raising_llm_error_is_an_error_finish_other_errors_propagate() -> None:
    ctx = make_ctx()

    def refuse(payload: LlmStreamPayload, next: Any) -> Any:
        if payload.options.provider == "quota":
            raise LlmError("RATE_LIMIT", "quota used up")
        raise KeyError("plugin bug")

    ctx.on("llm/stream", refuse)
    reason = finish_of(await collect(ctx.llm.stream(opts("quota"))))
    assert reason == ErrorFinish(code="RATE_LIMIT", message="quota used up")
    with pytest.raises(KeyError, match="plugin bug"):
        await collect(ctx.llm.stream(opts("other")))


@pytest.mark.anyio
async def test_agent_scoped_stream_listener_applies_only_through_that_agents_context() -> None:
    ctx = make_ctx()
    ctx.llm.register_adapter(["scripted"], ScriptedModel([text("a"), text("b")]))
    agent_a, agent_b = object(), object()
    ctx_a = ctx.child(name="a", agent=agent_a)
    ctx_b = ctx.child(name="b", agent=agent_b)
    seen: list[str] = []

    async def spy(payload: LlmStreamPayload, next: Any) -> Any:
        seen.append(payload.options.model)
        return await next()

    ctx_a.on("llm/stream", spy)
    await collect(ctx_b.llm.stream(GenerateOptions(provider="scripted", model="via-b")))
    await collect(ctx_a.llm.stream(GenerateOptions(provider="scripted", model="via-a")))
    assert seen == ["via-a"]


# -- assembler ---------------------------------------------------------------------------------


def test_assembler_accumulates_text_and_reasoning_per_index_in_index_order() -> None:
    asm = BlockAssembler()
    feed: list[StreamChunk] = [
        BlockStart(index=1, block_type="text"),
        BlockStart(index=0, block_type="reasoning"),
        TextDelta(index=1, text="Hel"),
        ReasoningDelta(index=0, text="think"),
        TextDelta(index=1, text="lo"),
        ReasoningDelta(index=0, text="ing"),
        BlockEnd(index=0),
        BlockEnd(index=1),
        UsageChunk(usage=Usage(input_tokens=3, output_tokens=4)),
        Finish(reason=Stop()),
    ]
    for chunk in feed:
        asm.feed(chunk)
    message = asm.message()
    assert message.content == (ReasoningBlock(text="thinking"), TextBlock(text="Hello"))
    # built without a second validation pass, yet the same as a validated message
    assert message == AssistantMessage.model_validate(message.model_dump())
    assert message.model_dump_json() == AssistantMessage(content=message.content).model_dump_json()
    assert asm.usage == Usage(input_tokens=3, output_tokens=4)
    assert asm.finish == Stop()
    assert asm.chunks_seen == 10


def test_assembler_tool_call_keeps_first_id_and_name_and_concatenates_arguments() -> None:
    asm = BlockAssembler()
    feed: list[StreamChunk] = [
        ToolCallDelta(index=0, id="c1", name="echo", arguments_delta='{"te'),
        ToolCallDelta(index=0, id="c1", name="echo", arguments_delta='xt": '),
        ToolCallDelta(index=0, id="", name=None, arguments_delta='"hi"}'),
        BlockEnd(index=0),
        Finish(reason=ToolCalls()),
    ]
    for chunk in feed:
        asm.feed(chunk)
    assert asm.message().tool_calls == (
        ToolCallBlock(id="c1", name="echo", arguments='{"text": "hi"}'),
    )


def test_assembler_prefers_the_complete_block_carried_by_block_end() -> None:
    signed = ReasoningBlock(text="deep thought", signature="sig-123")
    message, _, _ = assemble(
        [
            BlockStart(index=0, block_type="reasoning"),
            ReasoningDelta(index=0, text="deep thought"),
            BlockEnd(index=0, block=signed),
            Finish(reason=Stop()),
        ]
    )
    assert message.content == (signed,)


def test_assembler_drops_tool_calls_on_a_max_tokens_finish() -> None:
    message, usage, finish = assemble(
        [*tool_call("c1", "echo", {"text": "x"}, text="let me")[:-1], Finish(reason=MaxTokens())]
    )
    assert finish == MaxTokens()
    assert message.content == (TextBlock(text="let me"),)
    assert usage is not None


def test_interrupted_message_keeps_partial_text_and_drops_unfinished_tool_calls() -> None:
    asm = BlockAssembler()
    feed: list[StreamChunk] = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="I will ca"),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=1, id="done", name="ok", arguments_delta="{}"),
        BlockEnd(index=1),
        BlockStart(index=2, block_type="tool-call"),
        ToolCallDelta(index=2, id="half", name="echo", arguments_delta='{"te'),
    ]
    for chunk in feed:
        asm.feed(chunk)
    assert asm.finish is None
    assert asm.message(interrupted=True).content == (
        TextBlock(text="I will ca"),
        ToolCallBlock(id="done", name="ok", arguments="{}"),
    )
    # Not interrupted: what was received is kept as is.
    assert len(asm.message().tool_calls) == 2


def test_assembler_leaves_out_blocks_that_stayed_empty() -> None:
    message, _, _ = assemble(
        [
            BlockStart(index=0, block_type="text"),
            BlockEnd(index=0),
            BlockStart(index=1, block_type="reasoning"),
            BlockEnd(index=1),
            Finish(reason=Stop()),
        ]
    )
    assert message.content == ()


def test_assembler_streamed_tail_is_the_text_from_start_however_start_moves() -> None:
    asm = BlockAssembler()
    assert asm.streamed_tail(0) is None  # nothing fed
    asm.feed(BlockStart(index=0, block_type="text"))
    assert asm.streamed_tail(0) == (0, "")
    text = ""
    starts = [0, 0, 5, 5, 12, 40, 40, 3, 60, 61, 200, 0, 70]  # forward, past the end, back
    for k, start in enumerate(starts):
        for piece in (f"w{k}a ", f"<{k}> ", "&x "):
            asm.feed(TextDelta(index=0, text=piece))
            text += piece
        assert asm.streamed_tail(start) == (len(text), text[start:])
        assert asm.streamed_tail(start) == (len(text), text[start:])  # asked twice: the same
    assert asm.streamed_text() == text  # the split parts join back to the whole
    assert asm.streamed_tail(20) == (len(text), text[20:])
    assert asm.message().content == (TextBlock(text=text),)
    asm.feed(BlockEnd(index=0, block=TextBlock(text="carried")))
    assert asm.streamed_tail(0) is None  # a carried block: ask message()
    two = BlockAssembler()
    two.feed(TextDelta(index=0, text="a"))
    two.feed(TextDelta(index=1, text="b"))
    assert two.streamed_tail(0) is None


def test_assembler_streamed_text_is_the_one_text_block_so_far_and_none_for_anything_else() -> None:
    asm = BlockAssembler()
    assert asm.streamed_text() is None  # nothing fed
    asm.feed(BlockStart(index=0, block_type="reasoning"))
    assert asm.streamed_text() == ""
    for piece in ("deep ", "thou", "ght"):
        asm.feed(ReasoningDelta(index=0, text=piece))
        assert asm.streamed_text() == asm.message().content[0].text  # type: ignore[union-attr]
    assert asm.streamed_text() == "deep thought"
    asm.feed(BlockEnd(index=0, block=ReasoningBlock(text="deep thought", signature="s")))
    assert asm.streamed_text() is None  # a carried block: what message() holds is that block
    calls = BlockAssembler()
    calls.feed(ToolCallDelta(index=0, id="c1", name="echo", arguments_delta="{}"))
    assert calls.streamed_text() is None
    two = BlockAssembler()
    two.feed(TextDelta(index=0, text="a"))
    two.feed(TextDelta(index=1, text="b"))
    assert two.streamed_text() is None
    assert two.message().content == (TextBlock(text="a"), TextBlock(text="b"))


def test_assembler_on_scripted_tool_call_response_builds_the_call() -> None:
    message, usage, finish = assemble(tool_call("c9", "add", {"a": 1}, text="sure"))
    assert message.text == "sure"
    assert message.tool_calls == (ToolCallBlock(id="c9", name="add", arguments='{"a": 1}'),)
    assert finish == ToolCalls()
    assert usage is not None and usage.input_tokens == 10


@pytest.mark.anyio
async def test_stream_whose_listener_raised_is_exhausted_afterwards() -> None:
    ctx = make_ctx()
    calls: list[int] = []

    def broken(payload: LlmStreamPayload, next: Any) -> Any:
        calls.append(1)
        raise RuntimeError("plugin bug")

    ctx.on("llm/stream", broken)
    stream = ctx.llm.stream(opts())
    with pytest.raises(RuntimeError):
        await stream.__anext__()
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    assert calls == [1]
