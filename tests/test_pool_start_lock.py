"""The pool's start lock: first come, first served, handed to the first waiter on release; a
waiter cancelled in line leaves it, one cancelled after the hand-off passes the lock on."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from agentloop_nb.loop._pool import StartLock

pytestmark = pytest.mark.anyio


async def _settle() -> None:
    await anyio.wait_all_tasks_blocked()  # every woken waiter has run


async def test_waiters_are_served_in_arrival_order_and_a_release_hands_the_lock_on() -> None:
    lock = StartLock()
    order: list[str] = []

    async def worker(name: str) -> None:
        if not lock.try_take():
            await lock.take()
        order.append(name)
        await _settle()
        lock.release()

    assert lock.try_take()
    tasks = [asyncio.ensure_future(worker(n)) for n in ("a", "b", "c")]
    await _settle()
    assert order == [] and len(lock.waiters) == 3
    lock.release()
    assert lock.held  # handed to "a", which has not run yet
    assert not lock.try_take()  # nobody barges past the line
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"] and not lock.held


async def test_a_waiter_cancelled_in_line_leaves_it() -> None:
    lock = StartLock()
    assert lock.try_take()
    first = asyncio.ensure_future(lock.take())
    second = asyncio.ensure_future(lock.take())
    await _settle()
    first.cancel()
    await _settle()
    assert first.cancelled() and len(lock.waiters) == 1
    lock.release()
    await second
    assert lock.held  # the second waiter holds it
    lock.release()
    assert not lock.held


async def test_a_waiter_cancelled_after_the_hand_off_passes_the_lock_on() -> None:
    lock = StartLock()
    assert lock.try_take()
    first = asyncio.ensure_future(lock.take())
    second = asyncio.ensure_future(lock.take())
    await _settle()
    lock.release()  # handed to the first waiter...
    first.cancel()  # ...which is cancelled before it runs
    await _settle()
    assert first.cancelled()
    await second  # the lock went on to the second
    assert lock.held and not lock.waiters
    lock.release()
    assert not lock.held
