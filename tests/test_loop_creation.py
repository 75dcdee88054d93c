"""Agent creation, rollback, ownership and teardown."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from _loop_helpers import (
    OPTIONS,
    WAIT,
    chunk_text,
    data,
    idle,
    is_type,
    make_app,
    new_agent,
    reasons,
    run,
    scripted,
    types,
    wait_for,
)

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.loop import AgentOptions
from agentloop_nb.signals import AbortController, AbortError
from agentloop_nb.testing import HANG, text, tool_call
from agentloop_nb.tools import ToolExecution, tool

pytestmark = pytest.mark.anyio


def record(app: App, *names: str) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []
    for name in names:
        app.ctx.on(name, lambda p, name=name: seen.append((name, p)))
    return seen


LIFECYCLE = ("session/created", "agent/created", "agent/session-start")


async def test_create_mints_a_fresh_session_id_per_call_and_publishes_the_agent(app: App) -> None:
    seen = record(app, *LIFECYCLE)
    a = app.ctx.agent_loop.create("bot", OPTIONS)
    b = app.ctx.agent_loop.create("bot", OPTIONS)
    assert a.id.startswith("bot-session-") and b.id.startswith("bot-session-")
    assert a.id != b.id
    assert a.session.id == a.id and a.status == "idle" and a.options == OPTIONS
    assert app.ctx.agents.get(a.id) is a and app.ctx.agent_loop.get(b.id) is b
    assert app.ctx.sessions.get(a.id) is a.session
    assert [n for n, _ in seen] == list(LIFECYCLE) * 2
    assert seen[2][1].source == "startup"


async def test_programmatic_create_uses_the_exact_id_and_awaits_setup_before_publishing(
    app: App,
) -> None:
    scripted(app, text("ok"))
    seen = record(app, *LIFECYCLE)
    during_setup: list[Any] = []

    async def setup(ctx: Context) -> None:
        await anyio.lowlevel.checkpoint()
        during_setup.append((app.ctx.agents.get("s1"), list(seen)))
        ctx.system_prompt.section("scoped", "only for s1")

    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS, setup=setup)
    assert handle.agent.id == "s1" and app.ctx.agents.get("s1") is handle.agent
    assert during_setup == [(None, [])]  # nothing was published while setup ran
    assert [n for n, _ in seen] == list(LIFECYCLE)
    await run(handle.agent)
    assert "only for s1" in scripted_system(handle.agent)
    await handle.dispose()


def scripted_system(agent: Any) -> str:
    return agent.session.request_header()["system"]


async def test_setup_that_raises_publishes_nothing_and_frees_the_id(app: App) -> None:
    seen = record(app, *LIFECYCLE)
    contexts: list[Context] = []

    def setup(ctx: Context) -> None:
        contexts.append(ctx)
        ctx.on("agent/status", lambda p: None)
        raise RuntimeError("setup failed")

    with pytest.raises(RuntimeError, match="setup failed"):
        await app.ctx.agents.create(session_id="x", agent_options=OPTIONS, setup=setup)
    assert seen == []
    assert not contexts[0].active  # its registrations were unwound
    assert app.ctx.agents.get("x") is None and app.ctx.sessions.get("x") is None
    handle = await app.ctx.agents.create(session_id="x", agent_options=OPTIONS)
    assert handle.agent.id == "x"


@pytest.mark.parametrize("sync", [True, False])
async def test_agent_created_listener_veto_rolls_everything_back(app: App, sync: bool) -> None:
    veto = app.ctx.on("agent/created", lambda p: (_ for _ in ()).throw(PermissionError("no")))
    starts = record(app, "agent/session-start")
    with pytest.raises(PermissionError):
        if sync:
            app.ctx.agent_loop.create("v", OPTIONS)
        else:
            await app.ctx.agents.create(session_id="v", agent_options=OPTIONS)
    assert starts == [] and app.ctx.agents.list() == [] and app.ctx.sessions.list() == []
    assert app.ctx.agent_loop.list() == []
    veto()
    handle = await app.ctx.agents.create(session_id="v", agent_options=OPTIONS)
    assert app.ctx.agents.get("v") is handle.agent


async def test_signal_aborted_during_setup_publishes_nothing_and_frees_the_id(app: App) -> None:
    seen = record(app, *LIFECYCLE)
    controller = AbortController()

    async def setup(ctx: Context) -> None:
        controller.abort("changed my mind")

    with pytest.raises(AbortError, match="changed my mind"):
        await app.ctx.agents.create(
            session_id="s", agent_options=OPTIONS, setup=setup, signal=controller.signal
        )
    assert seen == [] and app.ctx.agents.get("s") is None
    await app.ctx.agents.create(session_id="s", agent_options=OPTIONS)


async def test_signal_already_aborted_refuses_creation(app: App) -> None:
    controller = AbortController()
    controller.abort()
    with pytest.raises(AbortError):
        await app.ctx.agents.create(session_id="s", signal=controller.signal)
    assert app.ctx.agents.list() == []


async def test_concurrent_creates_with_one_id_exactly_one_wins_and_the_loser_rolls_back(
    app: App,
) -> None:
    both_prepared = anyio.Event()
    contexts: list[Context] = []

    async def setup(ctx: Context) -> None:
        contexts.append(ctx)
        ctx.on("agent/status", lambda p: None)
        if len(contexts) == 2:
            both_prepared.set()
        await both_prepared.wait()

    results = await asyncio.gather(
        app.ctx.agents.create(session_id="dup", agent_options=OPTIONS, setup=setup),
        app.ctx.agents.create(session_id="dup", agent_options=OPTIONS, setup=setup),
        return_exceptions=True,
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    handles = [r for r in results if not isinstance(r, BaseException)]
    assert len(handles) == 1 and len(errors) == 1
    assert "already exists" in str(errors[0])
    assert [a.id for a in app.ctx.agents.list()] == ["dup"]
    assert sorted(c.active for c in contexts) == [False, True]  # the loser's scope unwound
    winner = handles[0].agent
    assert app.ctx.sessions.get("dup") is winner.session


async def test_create_with_an_id_that_is_live_raises_already_exists(app: App) -> None:
    await app.ctx.agents.create(session_id="live", agent_options=OPTIONS)
    with pytest.raises(ValueError, match="already exists"):
        await app.ctx.agents.create(session_id="live", agent_options=OPTIONS)
    assert len(app.ctx.agents.list()) == 1


async def test_resume_without_persistence_raises_a_clear_error(app: App) -> None:
    with pytest.raises(RuntimeError, match="cannot resume: session persistence is not configured"):
        await app.ctx.agents.resume(resume_session_id="anything")


async def test_dispose_emits_agent_disposed_then_session_disposed_and_frees_the_id(
    app: App,
) -> None:
    order: list[str] = []
    handle = await app.ctx.agents.create(session_id="t", agent_options=OPTIONS)
    agent = handle.agent
    agent.ctx.effect(lambda: lambda: order.append("scope"))
    app.ctx.on("agent/disposed", lambda p: order.append(f"agent/disposed:{p.agent.id}"))
    app.ctx.on("session/disposed", lambda p: order.append(f"session/disposed:{p.session.id}"))
    await handle.dispose()
    assert order == ["scope", "agent/disposed:t", "session/disposed:t"]
    assert app.ctx.agents.get("t") is None and app.ctx.sessions.get("t") is None
    assert not agent.ctx.active
    again = await app.ctx.agents.create(session_id="t", agent_options=OPTIONS)
    assert again.agent is not agent


async def test_dispose_is_idempotent_and_memoized(app: App) -> None:
    disposed: list[Any] = []
    app.ctx.on("agent/disposed", disposed.append)
    handle = await app.ctx.agents.create(session_id="m", agent_options=OPTIONS)
    await asyncio.gather(handle.dispose(), handle.dispose())
    await handle.dispose()
    await app.ctx.agent_loop.dispose(handle.agent)
    assert len(disposed) == 1


async def test_dispose_mid_turn_ends_the_turn_disposed_before_teardown(app: App) -> None:
    scripted(app, HANG)
    handle = await app.ctx.agents.create(session_id="d", agent_options=OPTIONS)
    agent = handle.agent
    agent.followup("hi")
    await wait_for(agent, lambda e: e.type == "assistant/chunk")
    statuses: list[str] = []
    agent.ctx.on("agent/status", lambda p: statuses.append(p.status))
    await handle.dispose()
    assert types(agent)[-2:] == ["step/end", "turn/end"]
    assert agent.session.events[-1].data["reason"] == {"kind": "disposed"}
    assert statuses == ["idle"]
    with pytest.raises(RuntimeError, match="disposed"):
        agent.followup("again")


async def test_events_of_one_agent_reach_its_scope_and_the_root_only(app: App) -> None:
    a, _ = new_agent(app, text("a"), text("b"))
    b = app.ctx.agent_loop.create("b", OPTIONS)
    on_a: list[Any] = []
    on_root: list[Any] = []
    a.ctx.on("agent/status", lambda p: on_a.append(p.agent))
    app.ctx.on("agent/status", lambda p: on_root.append(p.agent))
    await run(b)
    await run(a)
    assert set(on_a) == {a} and set(on_root) == {a, b}


async def test_hooks_run_with_the_agent_as_current_initiator(app: App) -> None:
    agent, _ = new_agent(app, text("ok"))
    seen: list[Any] = []

    async def pre_step(payload: Any, next: Any) -> Any:
        seen.append(app.ctx.agents.current_initiator())
        return await next()

    app.ctx.on("agent/pre-step", pre_step)
    await run(agent)
    assert seen == [agent] and app.ctx.agents.current_initiator() is None


async def test_prompt_variables_provider_model_and_cwd_are_supplied(app: App) -> None:
    model = scripted(app, text("ok"))
    app.ctx.system_prompt.section("where", "{{provider}}/{{model}} in {{cwd}}")
    agent = app.ctx.agent_loop.create("a", OPTIONS, meta={"cwd": "/work/x"})
    await run(agent)
    assert "scripted/m in /work/x" in (model.requests[0].system or "")


def test_send_without_a_running_loop_raises_a_clear_error() -> None:
    app = make_app()
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    with pytest.raises(RuntimeError, match="running asyncio event loop"):
        agent.followup("hi")
    assert types(agent) == []  # nothing was logged
    asyncio.run(app.aclose())


def test_agent_options_are_validated() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        AgentOptions(provider="p", model="m", max_tokens=0)
    with pytest.raises(ValueError, match="nope"):
        AgentOptions(nope=1)  # type: ignore[call-arg]


async def test_when_idle_returns_at_once_for_an_idle_agent(app: App) -> None:
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await idle(agent)
    assert agent.status == "idle" and types(agent) == []


async def test_dispose_waits_for_work_that_ignores_the_signal_before_unpublishing(
    app: App,
) -> None:
    release = anyio.Event()
    aborted = anyio.Event()

    @tool
    async def stubborn(execution: ToolExecution) -> str:
        """Finish what it started even when cancelled."""
        execution.signal.add_callback(lambda _reason: aborted.set())
        with anyio.CancelScope(shield=True):
            await release.wait()
        return "finished anyway"

    app.ctx.tools.register(stubborn)
    scripted(app, tool_call("c1", "stubborn", {}))
    handle = await app.ctx.agents.create(session_id="w", agent_options=OPTIONS)
    agent = handle.agent
    agent.followup("go")
    await wait_for(agent, is_type("tool/call", call_id="c1"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(handle.dispose)
        with anyio.fail_after(5):
            await aborted.wait()
        assert app.ctx.agents.get("w") is agent  # still draining: not yet unpublished
        release.set()
    assert app.ctx.agents.get("w") is None
    assert [d["content"] for d in data(agent, "tool/result")] == ["finished anyway"]
    assert agent.session.events[-1].data["reason"] == {"kind": "disposed"}


async def test_an_agent_created_through_a_plugin_context_is_disposed_with_that_plugin() -> None:
    app = make_app()
    scripted(app, HANG)
    created: list[Any] = []
    disposed: list[str] = []
    app.ctx.on("agent/disposed", lambda p: disposed.append(p.agent.id))

    def plugin(ctx: Any, config: Any) -> None:
        created.append(ctx.agent_loop.create("owned", OPTIONS))

    fiber = app.ctx.plugin(plugin, name="owner")
    (agent,) = created
    agent.followup("hi")
    await wait_for(agent, chunk_text("partial"))
    await fiber.aclose()  # e.g. a %%plugin cell re-run: its scope unwinds
    assert disposed == [agent.id] and app.ctx.agent_loop.get(agent.id) is None
    assert reasons(agent) == ["disposed"] and agent.status == "idle"
    await app.aclose()


async def test_disposing_an_owned_agent_first_leaves_nothing_for_its_owner_to_do() -> None:
    app = make_app()
    disposed: list[str] = []
    app.ctx.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    owner = app.ctx.child(name="owner")
    agent = owner.agent_loop.create("owned", OPTIONS)
    assert app.ctx.agent_loop is app.agent_loop  # the loop's own context sees the loop itself
    await app.agent_loop.dispose(agent)
    await owner.fiber.aclose()  # its teardown for the agent was already released
    assert disposed == [agent.id]
    await app.aclose()


async def test_ctx_agents_create_through_a_plugin_context_is_disposed_with_that_plugin() -> None:
    app = make_app()
    scripted(app, HANG)
    contexts: list[Context] = []
    disposed: list[str] = []
    app.ctx.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    fiber = app.ctx.plugin(lambda ctx, config: contexts.append(ctx), name="owner")
    handle = await contexts[0].agents.create(session_id="p", agent_options=OPTIONS)
    agent = handle.agent
    assert app.ctx.agents.get("p") is agent
    agent.followup("hi")
    await wait_for(agent, chunk_text("partial"))
    await fiber.aclose()  # unloading the plugin disposes what it created
    assert disposed == ["p"] and app.ctx.agents.get("p") is None
    assert reasons(agent) == ["disposed"] and agent.status == "idle"
    await app.aclose()


async def test_disposing_a_plugin_owned_handle_first_releases_the_plugin_teardown() -> None:
    app = make_app()
    contexts: list[Context] = []
    disposed: list[str] = []
    app.ctx.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    fiber = app.ctx.plugin(lambda ctx, config: contexts.append(ctx), name="owner")
    handle = await contexts[0].agents.create(session_id="p", agent_options=OPTIONS)
    await handle.dispose()
    assert handle.disposed and disposed == ["p"]
    await fiber.aclose()
    assert disposed == ["p"]
    await app.aclose()


async def test_ctx_agents_resume_through_a_plugin_context_is_owned_by_that_plugin(
    tmp_path: Any,
) -> None:
    app = make_app(persistence_root=tmp_path)
    scripted(app, text("one"))
    first = await app.ctx.agents.create(session_id="r", agent_options=OPTIONS)
    await run(first.agent)
    await first.dispose()
    contexts: list[Context] = []
    fiber = app.ctx.plugin(lambda ctx, config: contexts.append(ctx), name="owner")
    handle = await contexts[0].agents.resume(resume_session_id="r")
    assert app.ctx.agents.get("r") is handle.agent
    await fiber.aclose()
    assert app.ctx.agents.get("r") is None and app.ctx.sessions.get("r") is None
    await app.aclose()


async def test_a_signal_aborting_during_a_hanging_setup_interrupts_it_and_frees_the_id(
    app: App,
) -> None:
    seen = record(app, *LIFECYCLE)
    controller = AbortController()
    entered = anyio.Event()
    cancelled: list[bool] = []

    async def setup(ctx: Context) -> None:
        entered.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(True)
            raise

    async def abort_once_entered() -> None:
        await entered.wait()
        controller.abort("user gave up")

    async with anyio.create_task_group() as tg:
        tg.start_soon(abort_once_entered)
        with anyio.fail_after(WAIT), pytest.raises(AbortError) as raised:
            await app.ctx.agents.create(
                session_id="h", agent_options=OPTIONS, setup=setup, signal=controller.signal
            )
    assert raised.value.reason == "user gave up" and cancelled == [True]
    assert seen == [] and app.ctx.agents.get("h") is None and app.ctx.sessions.get("h") is None
    handle = await app.ctx.agents.create(session_id="h", agent_options=OPTIONS)
    assert app.ctx.agents.get("h") is handle.agent


async def test_app_aclose_waits_for_a_create_in_flight_and_it_rolls_back() -> None:
    app = make_app()
    entered = anyio.Event()
    outcome: list[Any] = []
    setup_contexts: list[Context] = []

    async def setup(ctx: Context) -> None:
        setup_contexts.append(ctx)
        entered.set()
        await anyio.sleep_forever()

    async def create() -> None:
        try:
            await app.ctx.agents.create(session_id="f", agent_options=OPTIONS, setup=setup)
        except AbortError as exc:
            outcome.append(exc.reason)

    async with anyio.create_task_group() as tg:
        tg.start_soon(create)
        await entered.wait()
        with anyio.fail_after(WAIT):
            await app.aclose()
        assert outcome == [{"kind": "disposed"}]  # settled before aclose returned
    assert not setup_contexts[0].active and app.agent_loop.list() == []
    with pytest.raises(RuntimeError, match="closed"):
        app.agent_loop.create("g", OPTIONS)


async def test_the_working_directory_goes_only_to_providers_on_this_machine(app: App) -> None:
    from agentloop_nb.llm.openai import OpenAIAdapter
    from agentloop_nb.loop._request import CWD_NOT_SHARED

    local = scripted(app, text("ok"))
    app.ctx.system_prompt.section("where", "in {{cwd}}")
    here = app.ctx.agent_loop.create("here", OPTIONS, meta={"cwd": "/home/ann/secret-project"})
    await run(here)
    assert "in /home/ann/secret-project" in (local.requests[0].system or "")

    for name, url, shared in [
        ("llamacpp", "http://127.0.0.1:8080/v1", True),
        ("remote", "https://api.example.com/v1", False),
    ]:
        adapter = OpenAIAdapter(base_url=url, name=name, require_key=False)
        app.ctx.llm.register_adapter([name], adapter)
        agent = app.ctx.agent_loop.create(
            name, OPTIONS.model_copy(update={"provider": name}), meta={"cwd": "/home/ann/p"}
        )
        assembly = await app.ctx.system_prompt.assemble(agent)
        assert assembly.variables["cwd"] == ("/home/ann/p" if shared else CWD_NOT_SHARED)
        await adapter.aclose()


@pytest.mark.anyio
async def test_an_agent_on_a_seeded_history_numbers_its_turns_after_the_seeds() -> None:
    app = App()
    scripted(app, text("later"))
    seed: list[dict[str, Any]] = []
    for turn in (1, 2):
        user = {
            "role": "user",
            "id": f"u{turn}",
            "content": [{"type": "text", "text": "hi"}],
            "source": {"kind": "user"},
        }
        seed += [
            {"type": "turn/start", "data": {"turn": turn}},
            {"type": "user/message", "data": {"message": user}},
            {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}},
        ]
    try:
        handle = await app.ctx.agents.create(session_id="s", agent_options=OPTIONS, seed=seed)
        await run(handle.agent, "again")
        assert [d["turn"] for d in data(handle.agent, "turn/start")] == [1, 2, 3]
    finally:
        await app.aclose()
