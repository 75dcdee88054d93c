"""The bus behind ``Context``: dispatch with an abort signal, and lazy payloads."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from agentloop_nb.context import Context, Lazy
from agentloop_nb.signals import AbortController, AbortError


class Counted:
    """A payload factory that counts how often it built."""

    def __init__(self) -> None:
        self.built = 0

    def __call__(self, value: str) -> dict[str, str]:
        self.built += 1
        return {"value": value}


@pytest.mark.anyio
async def test_waterfall_with_a_signal_interrupts_a_listener_that_ignores_it() -> None:
    ctx = Context()
    controller = AbortController()
    entered = asyncio.Event()

    async def stubborn(payload: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        entered.set()
        await asyncio.Event().wait()  # never looks at the signal

    ctx.on("hook", stubborn)
    task = asyncio.ensure_future(
        ctx.waterfall("hook", None, lambda: "default", signal=controller.signal)
    )
    await entered.wait()
    controller.abort({"kind": "user"})
    with pytest.raises(AbortError) as info:
        await task
    assert info.value.reason == {"kind": "user"}


@pytest.mark.anyio
async def test_serial_with_a_signal_interrupts_a_listener_that_ignores_it() -> None:
    ctx = Context()
    controller = AbortController()
    entered = asyncio.Event()

    async def stubborn(payload: Any) -> Any:
        entered.set()
        await asyncio.Event().wait()

    ctx.on("hook", stubborn)
    task = asyncio.ensure_future(ctx.serial("hook", None, signal=controller.signal))
    await entered.wait()
    controller.abort("stop")
    with pytest.raises(AbortError):
        await task


@pytest.mark.anyio
async def test_a_listener_returning_after_the_abort_still_ends_the_dispatch_aborted() -> None:
    ctx = Context()
    controller = AbortController()

    def aborts_then_returns(payload: Any, next: Callable[[], Any]) -> str:
        controller.abort("late")
        return "too late"

    ctx.on("hook", aborts_then_returns)
    with pytest.raises(AbortError):
        await ctx.waterfall("hook", None, lambda: "default", signal=controller.signal)


@pytest.mark.anyio
async def test_an_already_aborted_signal_raises_before_anything_runs() -> None:
    ctx = Context()
    controller = AbortController()
    controller.abort("early")
    calls: list[str] = []
    with pytest.raises(AbortError):
        await ctx.waterfall(
            "unobserved", None, lambda: calls.append("default"), signal=controller.signal
        )
    ctx.on("observed", lambda p, next: calls.append("listener"))
    with pytest.raises(AbortError):
        await ctx.waterfall(
            "observed", None, lambda: calls.append("default"), signal=controller.signal
        )
    with pytest.raises(AbortError):
        await ctx.serial("observed", None, signal=controller.signal)
    assert calls == []


@pytest.mark.anyio
async def test_an_unobserved_waterfall_returns_the_default_and_leaves_the_signal_untouched() -> (
    None
):
    root = Context()
    agent_ctx = root.child(agent=object())
    root.child(agent=object()).on("hook", lambda p, next: "other agent's answer")
    controller = AbortController()
    seen: list[Any] = []
    controller.signal.add_callback(seen.append)
    result = await agent_ctx.waterfall("hook", None, lambda: "default", signal=controller.signal)
    assert result == "default"
    assert await agent_ctx.serial("hook", None, signal=controller.signal) is None
    controller.abort("after")
    assert seen == ["after"]  # only our own callback was ever on the signal


@pytest.mark.anyio
async def test_a_lazy_payload_is_built_only_when_a_listener_is_reached() -> None:
    root = Context()
    agent_ctx = root.child(agent=object())
    root.child(agent=object()).on("hook", lambda p, next: next())  # another agent's listener
    factory = Counted()
    assert await agent_ctx.waterfall("hook", Lazy(factory, "x"), lambda: "d") == "d"
    agent_ctx.emit("hook", Lazy(factory, "x"))
    assert await agent_ctx.serial("hook", Lazy(factory, "x")) is None
    assert factory.built == 0
    seen: list[Any] = []

    def record(payload: Any, next: Callable[[], Any]) -> Any:
        seen.append(payload)
        return next()

    agent_ctx.on("hook", record)
    agent_ctx.on("hook", record)
    assert await agent_ctx.waterfall("hook", Lazy(factory, "x"), lambda: "d") == "d"
    assert factory.built == 1
    assert seen == [{"value": "x"}, {"value": "x"}] and seen[0] is seen[1]


def test_a_lazy_payload_reaches_every_emit_listener_as_one_built_object() -> None:
    ctx = Context()
    factory = Counted()
    seen: list[Any] = []
    ctx.on("e", seen.append)
    ctx.on("e", seen.append)
    ctx.emit("e", Lazy(factory, "y"))
    assert factory.built == 1
    assert seen[0] is seen[1] == {"value": "y"}
    assert ctx.bail("e", Lazy(factory, "z")) is None  # append returns None: nobody answers
    assert factory.built == 2


@pytest.mark.anyio
async def test_listeners_that_pass_on_synchronously_reach_the_default_with_nothing_on_the_signal() -> (
    None
):
    ctx = Context()
    controller = AbortController()
    order: list[str] = []

    def passes_on(name: str) -> Callable[[Any, Callable[[], Any]], Any]:
        def listener(payload: Any, next: Callable[[], Any]) -> Any:
            order.append(name)
            return next()  # unawaited: the rest of the chain

        return listener

    def default() -> str:
        # No cancel scope was needed: nothing in this chain could be awaited.
        order.append(f"default, {len(controller.signal._callbacks)} signal callbacks")
        return "answer"

    ctx.on("hook", passes_on("first"))
    ctx.on("hook", passes_on("second"))
    assert await ctx.waterfall("hook", None, default, signal=controller.signal) == "answer"
    assert order == ["first", "second", "default, 0 signal callbacks"]


@pytest.mark.anyio
async def test_a_waterfall_listener_that_says_it_passes_is_stepped_over_without_its_payload() -> (
    None
):
    # ``passes(agent)`` true: the chain goes on without calling the listener or building
    # the payload for it; the next listener still gets the payload, built once.
    ctx = Context()
    controller = AbortController()
    factory = Counted()
    asked: list[Any] = []
    called: list[str] = []

    def passes(agent: Any) -> bool:
        asked.append(agent)
        return True

    def skipped(payload: Any, next: Callable[[], Any]) -> Any:
        called.append("skipped")
        return next()

    ctx.on("hook", skipped, passes=passes)
    lazy = Lazy(factory, "v")
    assert await ctx.waterfall("hook", lazy, lambda: "default", signal=controller.signal) == (
        "default"
    )
    assert (called, factory.built, asked) == ([], 0, [None])

    def later(payload: Any, next: Callable[[], Any]) -> Any:
        called.append(f"later {payload['value']}")
        return next()

    ctx.on("hook", later)
    assert await ctx.waterfall("hook", lazy, lambda: "default") == "default"
    assert (called, factory.built) == (["later v"], 1)


@pytest.mark.anyio
async def test_a_waterfall_listener_is_called_when_its_passes_test_says_no() -> None:
    # The test is asked per dispatch, with the dispatching context's agent: a false answer
    # calls the listener as usual (and a listener without a test is always called).
    ctx = Context()
    agent = object()
    child = ctx.child(agent=agent)
    answer = {"passes": False}
    asked: list[Any] = []

    def passes(who: Any) -> bool:
        asked.append(who)
        return answer["passes"]

    async def acts(payload: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        return f"acted on {payload}"

    ctx.on("hook", acts, passes=passes)
    assert await child.waterfall("hook", "p", lambda: "default") == "acted on p"
    answer["passes"] = True
    assert await child.waterfall("hook", "p", lambda: "default") == "default"
    assert asked == [agent, agent]


@pytest.mark.anyio
async def test_an_async_listener_after_one_that_passes_on_is_still_interrupted_by_the_abort() -> (
    None
):
    ctx = Context()
    controller = AbortController()
    entered = asyncio.Event()
    lock = anyio.Lock()  # its acquire opens a shielded scope: ours must be outside it

    async def stubborn(payload: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        async with lock:
            await anyio.lowlevel.checkpoint()
        entered.set()
        await asyncio.Event().wait()

    ctx.on("hook", lambda payload, next: next())
    ctx.on("hook", stubborn)
    task = asyncio.ensure_future(
        ctx.waterfall("hook", None, lambda: "default", signal=controller.signal)
    )
    await entered.wait()
    controller.abort("stop")
    with pytest.raises(AbortError) as info:
        await task
    assert info.value.reason == "stop"
    assert controller.signal._callbacks == []


@pytest.mark.anyio
async def test_a_synchronous_listener_raising_after_the_abort_ends_the_dispatch_aborted() -> None:
    ctx = Context()
    controller = AbortController()

    def aborts_then_raises(payload: Any, next: Callable[[], Any]) -> Any:
        controller.abort("late")
        raise ValueError("after the abort")

    ctx.on("hook", aborts_then_raises)
    with pytest.raises(AbortError) as info:
        await ctx.waterfall("hook", None, lambda: "default", signal=controller.signal)
    assert isinstance(info.value.__cause__, ValueError)
    ctx2 = Context()
    ctx2.on("hook", lambda payload, next: 1 / 0)  # no abort: the listener's own error
    with pytest.raises(ZeroDivisionError):
        await ctx2.waterfall("hook", None, lambda: "default", signal=AbortController().signal)
