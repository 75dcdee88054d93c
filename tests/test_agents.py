from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentloop_nb.agents import AgentHandle, AgentRegistry, current_initiator
from agentloop_nb.context import Context


class FakeAgent:
    def __init__(self, agent_id: str) -> None:
        self.id = agent_id


class FakeFactory:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def create(self, **kw: Any) -> AgentHandle:
        self.calls.append(("create", kw))
        return AgentHandle(FakeAgent(kw["session_id"]), lambda: None)

    async def resume(self, **kw: Any) -> AgentHandle:
        self.calls.append(("resume", kw))
        return AgentHandle(FakeAgent(kw["resume_session_id"]), lambda: None)


def make_ctx() -> Context:
    ctx = Context()
    ctx.provide("agents", AgentRegistry())
    return ctx


@pytest.mark.anyio
async def test_create_and_resume_without_a_factory_raise_a_clear_error() -> None:
    ctx = make_ctx()
    with pytest.raises(RuntimeError, match="no agent factory is set"):
        await ctx.agents.create(session_id="s")
    with pytest.raises(RuntimeError, match="cannot resume"):
        await ctx.agents.resume(resume_session_id="s")


@pytest.mark.anyio
async def test_create_and_resume_delegate_to_the_factory_with_the_keywords() -> None:
    ctx = make_ctx()
    factory = FakeFactory()
    dispose = ctx.agents.set_factory(factory)
    created = await ctx.agents.create(session_id="s1", meta={"k": 1})
    resumed = await ctx.agents.resume(resume_session_id="s2")
    assert created.agent.id == "s1" and resumed.agent.id == "s2"
    assert factory.calls == [
        ("create", {"session_id": "s1", "meta": {"k": 1}}),
        ("resume", {"resume_session_id": "s2"}),
    ]
    dispose()
    with pytest.raises(RuntimeError):
        await ctx.agents.create(session_id="s3")


@pytest.mark.anyio
async def test_latest_factory_wins_and_its_disposer_reveals_the_previous() -> None:
    registry = AgentRegistry()
    first, second = FakeFactory(), FakeFactory()
    registry.set_factory(first)
    dispose_second = registry.set_factory(second)
    await registry.create(session_id="x")
    assert len(second.calls) == 1 and first.calls == []
    dispose_second()
    await registry.create(session_id="y")
    assert len(first.calls) == 1


def test_set_factory_refuses_an_object_without_create() -> None:
    with pytest.raises(TypeError, match="not an agent factory"):
        AgentRegistry().set_factory(object())


def test_enter_publishes_agents_and_get_and_list_see_them() -> None:
    registry = AgentRegistry()
    a, b = FakeAgent("a"), FakeAgent("b")
    registry.enter(a)
    registry.enter(b)
    assert registry.get("a") is a
    assert registry.get("missing") is None
    assert registry.list() == [a, b]


def test_enter_refuses_an_id_collision() -> None:
    registry = AgentRegistry()
    registry.enter(FakeAgent("a"))
    with pytest.raises(ValueError, match="agent 'a' already exists"):
        registry.enter(FakeAgent("a"))


def test_stale_disposer_does_not_remove_a_later_agent_with_the_same_id() -> None:
    registry = AgentRegistry()
    first = FakeAgent("a")
    dispose_first = registry.enter(first)
    dispose_first()
    assert registry.get("a") is None
    second = FakeAgent("a")
    registry.enter(second)
    dispose_first()  # idempotent and bound to `first` only
    assert registry.get("a") is second


@pytest.mark.anyio
async def test_handle_dispose_is_memoized_across_concurrent_and_later_calls() -> None:
    release = asyncio.Event()
    started = asyncio.Event()
    runs: list[str] = []

    async def teardown() -> None:
        runs.append("start")
        started.set()
        await release.wait()
        runs.append("end")

    handle = AgentHandle(FakeAgent("a"), teardown)
    assert not handle.disposed
    first = asyncio.create_task(handle.dispose())
    await started.wait()
    second_entered = asyncio.Event()

    async def second_call() -> None:
        second_entered.set()
        await handle.dispose()  # no suspension point between the event and this await

    second = asyncio.create_task(second_call())
    await second_entered.wait()
    assert handle.disposed and not first.done() and not second.done()
    release.set()
    await asyncio.gather(first, second)
    await handle.dispose()
    assert runs == ["start", "end"]


@pytest.mark.anyio
async def test_handle_dispose_failure_is_seen_by_every_caller() -> None:
    calls = 0

    async def teardown() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("teardown broke")

    handle = AgentHandle(FakeAgent("a"), teardown)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="teardown broke"):
            await handle.dispose()
    assert calls == 1


@pytest.mark.anyio
async def test_cancelling_a_dispose_caller_does_not_interrupt_the_teardown() -> None:
    release = asyncio.Event()
    started = asyncio.Event()
    finished = asyncio.Event()

    async def teardown() -> None:
        started.set()
        await release.wait()
        finished.set()

    handle = AgentHandle(FakeAgent("a"), teardown)
    caller = asyncio.create_task(handle.dispose())
    await started.wait()  # the caller is parked in dispose() by now
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    release.set()
    await handle.dispose()
    assert finished.is_set()


@pytest.mark.anyio
async def test_with_initiator_sets_the_contextvar_for_the_block_and_its_tasks() -> None:
    registry = AgentRegistry()
    outer, inner = FakeAgent("outer"), FakeAgent("inner")
    assert registry.current_initiator() is None
    with registry.with_initiator(outer):
        assert registry.current_initiator() is outer
        task = asyncio.create_task(asyncio.sleep(0, result=current_initiator()))
        with registry.with_initiator(inner):
            assert current_initiator() is inner
        assert registry.current_initiator() is outer
    assert registry.current_initiator() is None
    assert await task is outer


@pytest.mark.anyio
async def test_initiator_does_not_leak_between_concurrent_tasks() -> None:
    registry = AgentRegistry()
    a, b = FakeAgent("a"), FakeAgent("b")
    both_inside = asyncio.Barrier(2)

    async def run(agent: FakeAgent) -> Any:
        with registry.with_initiator(agent):
            await both_inside.wait()
            return registry.current_initiator()

    assert await asyncio.gather(run(a), run(b)) == [a, b]


def test_registry_emits_nothing_itself() -> None:
    ctx = make_ctx()
    seen: list[str] = []
    for name in ("agent/created", "agent/disposed"):
        ctx.on(name, lambda payload, name=name: seen.append(name))
    dispose = ctx.agents.enter(FakeAgent("a"))
    dispose()
    assert seen == []


@pytest.mark.anyio
async def test_a_child_contexts_creations_are_owned_by_its_scope() -> None:
    ctx = make_ctx()
    disposed: list[str] = []

    class Factory(FakeFactory):
        async def create(self, **kw: Any) -> AgentHandle:
            sid = kw["session_id"]
            return AgentHandle(FakeAgent(sid), lambda: disposed.append(sid))

    ctx.agents.set_factory(Factory())
    child = ctx.child(name="plugin")
    assert ctx.agents is ctx.agents.__bind__(ctx)  # the root sees the registry itself
    owned = await child.agents.create(session_id="owned")
    early = await child.agents.create(session_id="early")
    await early.dispose()  # disposing first releases the scope's teardown
    await child.fiber.aclose()
    assert disposed == ["early", "owned"]
    await owned.dispose()  # memoized: the scope already ran it
    root_made = await ctx.agents.create(session_id="root")
    await ctx.child(name="other").fiber.aclose()
    assert disposed == ["early", "owned"] and not root_made.disposed
