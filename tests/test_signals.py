from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agentloop_nb.signals import AbortController, AbortError, AbortScope, AbortSignal


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


# -- the abort idiom: AbortScope / AbortSignal.run ---------------------------------------------


async def _forever() -> None:
    await asyncio.Event().wait()


@pytest.mark.anyio
async def test_run_on_an_already_aborted_signal_raises_and_closes_the_coroutine() -> None:
    controller = AbortController()
    controller.abort("early")
    coro = _forever()
    with pytest.raises(AbortError) as info:
        await controller.signal.run(coro)
    assert info.value.reason == "early"
    assert coro.cr_frame is None  # closed, so it cannot warn "never awaited"


@pytest.mark.anyio
async def test_scope_entered_after_the_abort_never_runs_its_block() -> None:
    controller = AbortController()
    controller.abort("early")
    ran: list[bool] = []
    with pytest.raises(AbortError), AbortScope(controller.signal):
        ran.append(True)
    assert ran == []


@pytest.mark.anyio
async def test_abort_mid_await_cancels_it_and_raises_abort_error_with_the_reason() -> None:
    controller = AbortController()
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def body() -> None:
        started.set()
        try:
            await _forever()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    task = asyncio.ensure_future(controller.signal.run(body()))
    await started.wait()
    controller.abort({"kind": "user"})
    with pytest.raises(AbortError) as info:
        await task
    assert info.value.reason == {"kind": "user"}
    assert cancelled == [True]


@pytest.mark.anyio
async def test_a_result_returned_after_the_abort_still_raises_abort_error() -> None:
    controller = AbortController()

    async def ignores_the_abort() -> str:
        controller.abort("late")  # no checkpoint follows: the cancellation never lands
        return "value"

    with pytest.raises(AbortError) as info:
        await controller.signal.run(ignores_the_abort())
    assert info.value.reason == "late"
    await asyncio.sleep(0)  # no stray cancellation is left on this task


@pytest.mark.anyio
async def test_an_error_raised_after_the_abort_becomes_abort_error_chained_from_it() -> None:
    controller = AbortController()

    async def converts_the_cancellation() -> None:
        try:
            await _forever()
        except asyncio.CancelledError:
            raise ValueError("my own error") from None

    task = asyncio.ensure_future(controller.signal.run(converts_the_cancellation()))
    await asyncio.sleep(0)
    controller.abort("stop")
    with pytest.raises(AbortError) as info:
        await task
    assert isinstance(info.value.__cause__, ValueError)


@pytest.mark.anyio
async def test_without_an_abort_results_and_errors_pass_through() -> None:
    controller = AbortController()

    async def ok() -> int:
        await asyncio.sleep(0)
        return 7

    async def bad() -> None:
        raise KeyError("k")

    assert await controller.signal.run(ok()) == 7
    with pytest.raises(KeyError):
        await controller.signal.run(bad())
    assert controller.signal._callbacks == []


@pytest.mark.anyio
async def test_scope_removes_its_callback_on_exit_so_nothing_leaks_on_the_signal() -> None:
    controller = AbortController()
    signal = controller.signal
    for _ in range(3):
        with AbortScope(signal):
            assert len(signal._callbacks) == 1
            await asyncio.sleep(0)
    with pytest.raises(KeyError), AbortScope(signal):
        raise KeyError("boom")
    assert signal._callbacks == []


@pytest.mark.anyio
async def test_nested_scopes_each_follow_their_own_signal() -> None:
    outer, inner = AbortController(), AbortController()
    reached_outer_tail: list[bool] = []
    started = asyncio.Event()

    async def body() -> None:
        with AbortScope(outer.signal):
            with pytest.raises(AbortError) as info, AbortScope(inner.signal):
                started.set()
                await _forever()
            assert info.value.reason == "inner"
            reached_outer_tail.append(True)
            await _forever()

    task = asyncio.ensure_future(body())
    await started.wait()
    inner.abort("inner")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert reached_outer_tail == [True]
    outer.abort("outer")
    with pytest.raises(AbortError) as info:
        await task
    assert info.value.reason == "outer"
    assert outer.signal._callbacks == [] and inner.signal._callbacks == []


@pytest.mark.anyio
async def test_cancellation_from_outside_the_scope_propagates_unchanged() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def body() -> None:
        with AbortScope(controller.signal):
            started.set()
            await _forever()

    task = asyncio.ensure_future(body())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert controller.signal._callbacks == []


@pytest.mark.anyio
async def test_a_scope_without_a_signal_is_a_no_op() -> None:
    with AbortScope(None) as scope:
        await asyncio.sleep(0)
    assert not scope.aborted


@pytest.mark.anyio
async def test_a_non_strict_scope_keeps_a_result_returned_cooperatively_after_the_abort() -> None:
    controller = AbortController()
    started = asyncio.Event()

    async def honours_the_signal() -> str:
        started.set()
        await controller.signal.wait()  # cancelled by the scope... and finishing anyway
        return f"stopped: {controller.signal.reason}"

    async def stops_early() -> str:
        try:
            return await honours_the_signal()
        except asyncio.CancelledError:
            return f"stopped: {controller.signal.reason}"

    task = asyncio.ensure_future(controller.signal.run(stops_early(), strict=False))
    await started.wait()
    controller.abort("user")
    assert await task == "stopped: user"


def test_a_following_controller_aborts_with_its_parent_until_it_unfollows() -> None:
    parent = AbortController()
    child, gone = AbortController(), AbortController()
    child.follow(parent.signal)
    gone.follow(parent.signal)
    gone.unfollow(parent.signal)
    gone.unfollow(parent.signal)  # twice is harmless
    parent.abort("stop")
    assert child.signal.aborted and child.signal.reason == "stop"
    assert not gone.signal.aborted
    late = AbortController()
    late.follow(parent.signal)  # an aborted parent aborts the follower at once
    assert late.signal.reason == "stop"
    late.unfollow(parent.signal)


def test_a_controller_built_following_is_a_followed_controller() -> None:
    from agentloop_nb.signals import controller_following

    parent = AbortController()
    built, followed = controller_following(parent.signal), AbortController()
    followed.follow(parent.signal)
    assert type(built) is AbortController and type(built.signal) is AbortSignal
    for name in AbortSignal.__slots__:  # every field the constructors set, the same
        assert getattr(built.signal, name) == getattr(followed.signal, name), name
    assert parent.signal._callbacks == [built.abort, followed.abort]
    built.unfollow(parent.signal)  # unlinked as a followed one is
    assert parent.signal._callbacks == [followed.abort]
    built.unfollow(parent.signal)
    again = controller_following(parent.signal)
    parent.abort("stop")
    assert again.signal.aborted and again.signal.reason == "stop"
    assert not built.signal.aborted
    late = controller_following(parent.signal)  # an aborted parent: aborted at once
    assert late.signal.reason == "stop" and parent.signal._callbacks == []
