from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agentloop_nb.signals import AbortController, AbortError, AbortSignal


def test_new_signal_is_not_aborted() -> None:
    signal = AbortController().signal
    assert not signal.aborted
    assert signal.reason is None
    signal.throw_if_aborted()  # no-op


def test_abort_happens_once_and_first_reason_wins() -> None:
    controller = AbortController()
    assert controller.abort("user") is True
    assert controller.abort("disposed") is False
    assert controller.signal.aborted
    assert controller.signal.reason == "user"


def test_throw_if_aborted_raises_abort_error_carrying_reason() -> None:
    controller = AbortController()
    reason = {"kind": "user"}
    controller.abort(reason)
    with pytest.raises(AbortError) as info:
        controller.signal.throw_if_aborted()
    assert info.value.reason is reason


def test_callbacks_run_once_with_reason_in_registration_order() -> None:
    controller = AbortController()
    seen: list[tuple[str, Any]] = []
    controller.signal.add_callback(lambda r: seen.append(("a", r)))
    controller.signal.add_callback(lambda r: seen.append(("b", r)))
    controller.abort("stop")
    controller.abort("again")
    assert seen == [("a", "stop"), ("b", "stop")]


def test_callback_added_after_abort_runs_immediately() -> None:
    controller = AbortController()
    controller.abort("late")
    seen: list[Any] = []
    disposer = controller.signal.add_callback(seen.append)
    assert seen == ["late"]
    disposer()  # harmless


def test_disposed_callback_does_not_run() -> None:
    controller = AbortController()
    seen: list[Any] = []
    disposer = controller.signal.add_callback(seen.append)
    disposer()
    controller.abort("x")
    assert seen == []


def test_raising_callback_is_contained_and_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller = AbortController()
    seen: list[Any] = []

    def bad(reason: Any) -> None:
        raise RuntimeError("callback broke")

    controller.signal.add_callback(bad)
    controller.signal.add_callback(seen.append)
    with caplog.at_level(logging.ERROR, logger="agentloop_nb"):
        assert controller.abort("r") is True
    assert seen == ["r"]
    assert any("callback broke" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_raising_callback_added_after_abort_is_contained() -> None:
    controller = AbortController()
    controller.abort("r")

    def bad(reason: Any) -> None:
        raise RuntimeError("late callback broke")

    controller.signal.add_callback(bad)  # must not raise


@pytest.mark.anyio
async def test_awaiting_signal_returns_reason_once_aborted() -> None:
    controller = AbortController()
    waiter = asyncio.ensure_future(controller.signal.wait())
    awaited = asyncio.ensure_future(_await(controller.signal))
    await asyncio.sleep(0)
    assert not waiter.done()
    controller.abort("done")
    assert await waiter == "done"
    assert await awaited == "done"
    assert await controller.signal == "done"  # already aborted: returns at once


async def _await(signal: AbortSignal) -> Any:
    return await signal


@pytest.mark.anyio
async def test_cancelled_waiter_does_not_break_later_abort() -> None:
    controller = AbortController()
    waiter = asyncio.ensure_future(controller.signal.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    survivor = asyncio.ensure_future(controller.signal.wait())
    await asyncio.sleep(0)
    controller.abort("ok")
    assert await survivor == "ok"


def test_any_aborts_with_the_first_source_reason() -> None:
    a, b = AbortController(), AbortController()
    combined = AbortSignal.any(a.signal, b.signal)
    assert not combined.aborted
    b.abort("b first")
    a.abort("a second")
    assert combined.aborted
    assert combined.reason == "b first"


def test_any_of_an_already_aborted_signal_is_aborted_immediately() -> None:
    a, b = AbortController(), AbortController()
    a.abort("early")
    combined = AbortSignal.any(b.signal, a.signal)
    assert combined.aborted
    assert combined.reason == "early"


def test_any_delivers_once_when_several_sources_abort() -> None:
    long_lived = AbortController()
    seen: list[Any] = []
    for i in range(3):
        short = AbortController()
        combined = AbortSignal.any(long_lived.signal, short.signal)
        combined.add_callback(seen.append)
        short.abort(i)
    long_lived.abort("late")  # combined signals already settled: no second delivery
    assert seen == [0, 1, 2]


def test_any_still_follows_a_later_source_abort() -> None:
    a, b = AbortController(), AbortController()
    combined = AbortSignal.any(a.signal, b.signal)
    seen: list[Any] = []
    combined.add_callback(seen.append)
    a.abort("a")
    assert seen == ["a"]


def test_reprs_show_state() -> None:
    controller = AbortController()
    assert "aborted" not in repr(controller.signal)
    controller.abort("why")
    assert "why" in repr(controller)
