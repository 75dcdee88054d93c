"""The stream guard's bookkeeping (``llm/_guard.py``): its abort callback never outlives the
stream, and the task it may cancel is the one consuming it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _llm_helpers import collect, make_ctx, opts

from agentloop_nb.llm import Aborted, Finish, StreamChunk, TextDelta
from agentloop_nb.llm._guard import _current_task, guard
from agentloop_nb.signals import AbortController
from agentloop_nb.testing import text

pytestmark = pytest.mark.anyio


class Source:
    """An adapter's stream: ``chunks``, then waits on ``then`` if given; records its close."""

    def __init__(self, chunks: list[Any], then: asyncio.Event | None = None) -> None:
        self.chunks = chunks
        self.then = then
        self.closed = False
        self.parked = asyncio.Event()

    async def stream(self) -> AsyncIterator[Any]:
        try:
            for chunk in self.chunks:
                yield chunk
            if self.then is not None:
                self.parked.set()
                await self.then.wait()
        finally:
            self.closed = True


async def test_a_finished_stream_leaves_no_callback_on_its_signal() -> None:
    controller = AbortController()
    source = Source(text("ab"))
    chunks = await collect(guard(source.stream(), controller.signal))
    assert chunks == text("ab")
    assert source.closed
    assert controller.signal._callbacks == []


async def test_a_stream_closed_early_leaves_no_callback_on_its_signal() -> None:
    controller = AbortController()
    source = Source(text("ab"))
    stream = guard(source.stream(), controller.signal)
    await stream.__anext__()
    assert len(controller.signal._callbacks) == 1  # watched while it streams
    await stream.aclose()  # type: ignore[attr-defined]
    assert source.closed
    assert controller.signal._callbacks == []


async def test_an_aborted_stream_leaves_no_callback_and_ends_aborted() -> None:
    controller = AbortController()
    source = Source([TextDelta(index=0, text="x")], then=asyncio.Event())
    task = asyncio.create_task(collect(guard(source.stream(), controller.signal)))
    await source.parked.wait()
    controller.abort("user")
    chunks = await task
    assert chunks == [TextDelta(index=0, text="x"), Finish(reason=Aborted())]
    assert source.closed
    assert controller.signal._callbacks == []


async def test_a_cancelled_consumer_leaves_no_callback_on_its_signal() -> None:
    controller = AbortController()
    source = Source([], then=asyncio.Event())
    task = asyncio.create_task(collect(guard(source.stream(), controller.signal)))
    await source.parked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.closed
    assert controller.signal._callbacks == []


async def test_a_signal_aborted_before_the_first_chunk_ends_aborted_without_a_callback() -> None:
    controller = AbortController()
    controller.abort("user")
    source = Source(text("ab"))
    adapter_stream = source.stream()
    chunks = await collect(guard(adapter_stream, controller.signal))
    assert chunks == [Finish(reason=Aborted())]
    assert adapter_stream.ag_frame is None  # closed without ever running  # type: ignore[attr-defined]
    assert controller.signal._callbacks == []


async def test_the_task_getter_names_the_task_that_calls_it() -> None:
    loop = asyncio.get_running_loop()

    async def who() -> Any:
        return _current_task(loop)

    other = asyncio.create_task(who())
    assert await other is other
    assert _current_task(loop) is asyncio.current_task()


async def test_an_abort_cancels_the_stream_parked_in_a_task_other_than_the_first() -> None:
    # The task is read per chunk, not once per stream: a stream handed to another task is
    # still the one an abort interrupts.
    ctx = make_ctx()
    never = asyncio.Event()
    source = Source([TextDelta(index=0, text="x")], then=never)

    class Adapter:
        def stream(self, options: Any) -> AsyncIterator[StreamChunk]:
            return source.stream()

    ctx.llm.register_adapter(["scripted"], Adapter())
    controller = AbortController()
    stream = ctx.llm.stream(opts(signal=controller.signal))
    assert await stream.__anext__() == TextDelta(index=0, text="x")
    task = asyncio.create_task(collect(stream))
    await source.parked.wait()
    controller.abort("user")
    assert await task == [Finish(reason=Aborted())]
    assert controller.signal._callbacks == []
