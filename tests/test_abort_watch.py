"""``AbortWatch``, the stream guard's cancellation bookkeeping: an abort cancels only the task
parked in the adapter's await, and the cancellation never outlives that await."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

from agentloop_nb.llm._abort_watch import AbortWatch

pytestmark = pytest.mark.anyio


async def _guarded(watch: AbortWatch, adapter: Awaitable[Any], parked: asyncio.Event) -> Any:
    """One chunk's await, with the guard's protocol (see the module docstring)."""
    task = watch.task = asyncio.current_task()
    parked.set()  # no await between this and the adapter's: the task is parked there next
    try:
        outcome = await adapter
    except asyncio.CancelledError:
        if not watch.claim(task):
            raise
        outcome = "aborted"
    finally:
        watch.task = None
        if watch.sent:
            watch.withdraw(task)
    assert task is not None
    return outcome, task.cancelling()


async def _start(watch: AbortWatch, adapter: Awaitable[Any]) -> asyncio.Task[Any]:
    parked = asyncio.Event()
    task = asyncio.ensure_future(_guarded(watch, adapter, parked))
    await parked.wait()
    return task


async def test_an_abort_cancels_the_parked_await_and_leaves_no_cancellation_behind() -> None:
    watch = AbortWatch()
    task = await _start(watch, asyncio.get_running_loop().create_future())
    watch("user")
    assert watch.aborted and watch.sent
    assert await task == ("aborted", 0)
    assert not watch.sent and watch.task is None


async def test_a_second_abort_sends_no_second_cancellation() -> None:
    watch = AbortWatch()
    task = await _start(watch, asyncio.get_running_loop().create_future())
    watch("user")
    watch("again")
    assert task.cancelling() == 1
    assert await task == ("aborted", 0)


async def test_an_abort_while_nothing_is_parked_only_marks_the_watch() -> None:
    watch = AbortWatch()
    done = asyncio.get_running_loop().create_future()
    done.set_result("chunk")
    task = await _start(watch, done)
    assert await task == ("chunk", 0)
    watch("user")  # between chunks: the guard reads ``aborted`` before its next await
    assert watch.aborted and not watch.sent and not task.cancelled()


async def test_a_self_abort_from_inside_the_parked_task_does_not_cancel_it() -> None:
    watch = AbortWatch()

    async def adapter_that_aborts() -> str:
        watch("the adapter itself")
        return "chunk"

    task = await _start(watch, adapter_that_aborts())
    assert await task == ("chunk", 0)
    assert watch.aborted and not watch.sent


async def test_a_cancellation_the_watch_did_not_send_propagates() -> None:
    watch = AbortWatch()
    task = await _start(watch, asyncio.get_running_loop().create_future())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not watch.aborted and not watch.sent


async def test_an_abort_and_another_cancellation_together_propagate_the_other() -> None:
    watch = AbortWatch()
    task = await _start(watch, asyncio.get_running_loop().create_future())
    watch("user")
    task.cancel()  # e.g. the turn's task group, at the same moment
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelling() == 1  # only the other canceller's request is left
    assert not watch.sent


async def test_a_cancellation_the_adapter_swallows_is_balanced() -> None:
    watch = AbortWatch()
    gate = asyncio.get_running_loop().create_future()

    async def swallowing_adapter() -> str:
        try:
            await gate
        except asyncio.CancelledError:
            return "late chunk"
        return "chunk"

    task = await _start(watch, swallowing_adapter())
    watch("user")
    assert await task == ("late chunk", 0)  # the guard then sees ``aborted`` and ends the stream
    assert not watch.sent


async def test_claim_and_withdraw_without_a_sent_cancellation_change_nothing() -> None:
    watch = AbortWatch()
    assert watch.claim(None) is False
    watch.withdraw(None)
    assert (watch.sent, watch.aborted, watch.baseline) == (False, False, 0)
