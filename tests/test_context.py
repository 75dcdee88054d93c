from __future__ import annotations

import asyncio
import logging
import warnings
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agentloop_nb.context import (
    EVERY_NAME,
    Context,
    ErrorReport,
    Fiber,
    InactiveContextError,
    PluginError,
    listened,
)

# -- emit ------------------------------------------------------------------------------------


def test_emit_calls_listeners_in_registration_order_with_one_payload() -> None:
    ctx = Context()
    seen: list[tuple[str, Any]] = []
    ctx.on("ping", lambda p: seen.append(("a", p)))
    ctx.on("ping", lambda p: seen.append(("b", p)))
    payload = object()
    ctx.emit("ping", payload)
    assert seen == [("a", payload), ("b", payload)]


def test_emit_without_listeners_does_nothing() -> None:
    Context().emit("nobody/listens", 1)


def test_listened_is_a_live_view_of_the_names_heard_anywhere_in_the_tree() -> None:
    root = Context()
    listened = root.listened  # read once, as the session log does
    assert "ping" not in listened
    dispose = root.child(name="plugin", agent=object()).on("ping", lambda p: None)
    assert "ping" in listened and "ping" in root.listened
    dispose()
    assert "ping" not in listened


def test_listened_answers_for_a_context_and_for_a_dispatcher_that_cannot_say() -> None:
    root = Context()
    child = root.child(name="plugin", agent=object())
    assert listened(child) is child.listened
    assert "ping" not in listened(root)
    child.on("ping", lambda p: None)  # scoped to the child's agent: still counts as heard
    assert "ping" in listened(root) and not root.has_listeners("other")

    class Bare:
        async def waterfall(self, name: str, payload: Any, default: Any) -> Any:
            return None

    assert listened(Bare()) is EVERY_NAME and "anything" in listened(Bare())


def test_prepend_puts_listener_first() -> None:
    ctx = Context()
    seen: list[str] = []
    ctx.on("e", lambda p: seen.append("late"))
    ctx.on("e", lambda p: seen.append("early"), prepend=True)
    ctx.emit("e", None)
    assert seen == ["early", "late"]


def test_raising_emit_observer_is_contained_reported_and_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = Context()
    seen: list[str] = []
    reports: list[ErrorReport] = []
    boom = ValueError("boom")

    def bad(p: object) -> None:
        raise boom

    ctx.on("internal/error", reports.append)
    ctx.on("e", bad)
    ctx.on("e", lambda p: seen.append("after"))
    with caplog.at_level(logging.ERROR, logger="agentloop_nb"):
        ctx.emit("e", None)
    assert seen == ["after"]
    assert len(reports) == 1
    assert reports[0].event == "e"
    assert reports[0].error is boom
    assert "bad" in reports[0].handler
    assert any("bad" in r.getMessage() for r in caplog.records)


def test_raising_internal_error_observer_is_not_reported_recursively(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = Context()
    calls: list[ErrorReport] = []

    def failing_observer(report: ErrorReport) -> None:
        calls.append(report)
        raise RuntimeError("observer broke")

    def bad(p: object) -> None:
        raise ValueError("first")

    ctx.on("internal/error", failing_observer)
    ctx.on("e", bad)
    with caplog.at_level(logging.ERROR, logger="agentloop_nb"):
        ctx.emit("e", None)
    assert len(calls) == 1
    assert any("observer broke" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_error_report_is_frozen() -> None:
    report = ErrorReport(event="e", handler="h", error=ValueError("x"))
    with pytest.raises(ValidationError):
        report.event = "other"  # type: ignore[misc]


@pytest.mark.anyio
async def test_async_emit_listener_runs_as_owned_task_and_its_error_is_reported() -> None:
    ctx = Context()
    ran = asyncio.Event()
    reported: asyncio.Future[ErrorReport] = asyncio.get_running_loop().create_future()

    async def observer(p: object) -> None:
        ran.set()
        raise KeyError("late")

    ctx.on("internal/error", reported.set_result)
    ctx.on("e", observer)
    ctx.emit("e", None)
    await ran.wait()
    report = await reported
    assert report.event == "e"
    assert isinstance(report.error, KeyError)


@pytest.mark.anyio
async def test_disposing_scope_cancels_its_pending_async_emit_listener() -> None:
    ctx = Context()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def observer(p: object) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    scope = ctx.child(name="observers")
    scope.on("e", observer)
    ctx.emit("e", None)
    await started.wait()
    await scope.fiber.aclose()
    assert cancelled.is_set()


def test_async_emit_listener_without_running_loop_is_reported_not_leaked() -> None:
    ctx = Context()
    reports: list[ErrorReport] = []

    async def observer(p: object) -> None:
        raise AssertionError("must never run")

    ctx.on("internal/error", reports.append)
    ctx.on("e", observer)
    ctx.emit("e", None)
    assert len(reports) == 1
    assert "running event loop" in str(reports[0].error)


def test_emit_strict_propagates_first_exception_and_stops() -> None:
    ctx = Context()
    seen: list[str] = []

    def veto(p: object) -> None:
        raise PermissionError("vetoed")

    ctx.on("created", veto)
    ctx.on("created", lambda p: seen.append("later"))
    with pytest.raises(PermissionError, match="vetoed"):
        ctx.emit_strict("created", None)
    assert seen == []


# -- once and snapshot dispatch --------------------------------------------------------------


def test_once_listener_runs_a_single_time() -> None:
    ctx = Context()
    seen: list[int] = []
    ctx.once("e", seen.append)
    ctx.emit("e", 1)
    ctx.emit("e", 2)
    assert seen == [1]


def test_once_listener_is_not_rerun_by_a_reentrant_emit() -> None:
    ctx = Context()
    seen: list[int] = []

    def reenter(p: int) -> None:
        seen.append(p)
        if p == 1:
            ctx.emit("e", 2)

    ctx.once("e", reenter)
    ctx.emit("e", 1)
    assert seen == [1]


def test_listener_disposing_itself_mid_dispatch_does_not_disturb_others() -> None:
    ctx = Context()
    seen: list[str] = []

    def self_disposing(p: object) -> None:
        seen.append("self")
        dispose_self()

    dispose_self = ctx.on("e", self_disposing)
    ctx.on("e", lambda p: seen.append("other"))
    ctx.emit("e", None)
    ctx.emit("e", None)
    assert seen == ["self", "other", "other"]


def test_listener_disposed_by_an_earlier_listener_is_skipped() -> None:
    ctx = Context()
    seen: list[str] = []
    ctx.on("e", lambda p: dispose_second())
    dispose_second = ctx.on("e", lambda p: seen.append("second"))
    ctx.emit("e", None)
    assert seen == []


def test_listener_added_mid_dispatch_is_not_called_in_that_dispatch() -> None:
    ctx = Context()
    seen: list[str] = []

    def adder(p: object) -> None:
        seen.append("adder")
        ctx.on("e", lambda q: seen.append("added"))

    ctx.once("e", adder)
    ctx.emit("e", None)
    assert seen == ["adder"]
    ctx.emit("e", None)
    assert seen == ["adder", "added"]


def test_disposer_is_idempotent() -> None:
    ctx = Context()
    seen: list[int] = []
    dispose = ctx.on("e", seen.append)
    dispose()
    dispose()
    assert dispose.disposed
    ctx.emit("e", 1)
    assert seen == []


# -- parallel / serial / bail ---------------------------------------------------------------


@pytest.mark.anyio
async def test_parallel_runs_listeners_concurrently() -> None:
    ctx = Context()
    a_started = asyncio.Event()
    b_started = asyncio.Event()

    async def a(p: object) -> None:
        a_started.set()
        await b_started.wait()

    async def b(p: object) -> None:
        b_started.set()
        await a_started.wait()

    ctx.on("flush", a)
    ctx.on("flush", b)
    await ctx.parallel("flush", None)  # would deadlock if run one after the other


@pytest.mark.anyio
async def test_parallel_raises_exception_group_after_all_listeners_settle() -> None:
    ctx = Context()
    release = asyncio.Event()
    finished: list[str] = []

    async def fails_fast(p: object) -> None:
        release.set()
        raise ValueError("fast")

    async def slow(p: object) -> None:
        await release.wait()
        await asyncio.sleep(0)
        finished.append("slow")

    def fails_sync(p: object) -> None:
        raise KeyError("sync")

    ctx.on("flush", fails_fast)
    ctx.on("flush", slow)
    ctx.on("flush", fails_sync)
    with pytest.raises(ExceptionGroup) as info:
        await ctx.parallel("flush", None)
    assert finished == ["slow"]
    assert sorted(type(e).__name__ for e in info.value.exceptions) == ["KeyError", "ValueError"]
    assert "flush" in str(info.value)


@pytest.mark.anyio
async def test_parallel_with_single_failing_listener_still_raises_exception_group() -> None:
    ctx = Context()

    async def fails(p: object) -> None:
        raise ValueError("only")

    ctx.on("flush", fails)
    with pytest.raises(ExceptionGroup):
        await ctx.parallel("flush", None)


@pytest.mark.anyio
async def test_serial_first_non_none_result_wins_and_later_listeners_are_skipped() -> None:
    ctx = Context()
    seen: list[str] = []

    async def passes(p: object) -> None:
        seen.append("passes")

    async def answers(p: object) -> str:
        seen.append("answers")
        return "first"

    def too_late(p: object) -> str:
        seen.append("too_late")
        return "second"

    ctx.on("q", passes)
    ctx.on("q", answers)
    ctx.on("q", too_late)
    assert await ctx.serial("q", None) == "first"
    assert seen == ["passes", "answers"]


@pytest.mark.anyio
async def test_serial_returns_none_when_nobody_answers_and_propagates_errors() -> None:
    ctx = Context()
    assert await ctx.serial("q", None) is None
    ctx.on("q", lambda p: None)
    assert await ctx.serial("q", None) is None

    async def broken(p: object) -> None:
        raise RuntimeError("plugin bug")

    ctx.on("q", broken)
    with pytest.raises(RuntimeError, match="plugin bug"):
        await ctx.serial("q", None)


def test_bail_is_sync_serial_first_non_none_wins() -> None:
    ctx = Context()
    ctx.on("q", lambda p: None)
    ctx.on("q", lambda p: p * 2)
    ctx.on("q", lambda p: "never")
    assert ctx.bail("q", 21) == 42
    assert Context().bail("q", 1) is None


def test_bail_rejects_async_listener() -> None:
    ctx = Context()

    async def answer(p: object) -> int:
        return 1

    ctx.on("q", answer)
    with pytest.raises(TypeError, match="serial"):
        ctx.bail("q", None)


# -- waterfall -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_waterfall_runs_middleware_outside_in_and_default_after_last_listener() -> None:
    ctx = Context()
    order: list[str] = []

    async def outer(p: object, next: Any) -> str:
        order.append("outer-in")
        result = await next()
        order.append("outer-out")
        return f"outer({result})"

    def inner(p: object, next: Any) -> Any:
        order.append("inner")
        return next()  # a sync middleware may hand back next()'s awaitable

    def default() -> str:
        order.append("default")
        return "base"

    ctx.on("chain", outer)
    ctx.on("chain", inner)
    assert await ctx.waterfall("chain", None, default) == "outer(base)"
    assert order == ["outer-in", "inner", "default", "outer-out"]


@pytest.mark.anyio
async def test_waterfall_listener_that_never_calls_next_short_circuits() -> None:
    ctx = Context()
    seen: list[str] = []

    async def short(p: object, next: Any) -> str:
        return "short"

    async def never(p: object, next: Any) -> str:
        seen.append("never")
        return await next()

    def default() -> str:
        seen.append("default")
        return "base"

    ctx.on("chain", short)
    ctx.on("chain", never)
    assert await ctx.waterfall("chain", None, default) == "short"
    assert seen == []


@pytest.mark.anyio
async def test_waterfall_without_listeners_runs_async_default() -> None:
    async def default() -> int:
        return 7

    assert await Context().waterfall("chain", None, default) == 7
    assert await Context().waterfall("chain", None) is None


@pytest.mark.anyio
async def test_waterfall_listener_exception_propagates() -> None:
    ctx = Context()

    async def broken(p: object, next: Any) -> None:
        raise RuntimeError("middleware bug")

    ctx.on("chain", broken)
    with pytest.raises(RuntimeError, match="middleware bug"):
        await ctx.waterfall("chain", None, lambda: None)


# -- scope filtering -------------------------------------------------------------------------


class _Agent:
    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.anyio
async def test_agent_dispatch_reaches_root_and_own_agent_listeners_only() -> None:
    root = Context()
    a, b = _Agent("a"), _Agent("b")
    ctx_a = root.child(name="agent-a", agent=a)
    ctx_b = root.child(name="agent-b", agent=b)
    seen: list[str] = []
    root.on("agent/status", lambda p: seen.append("root"))
    ctx_a.on("agent/status", lambda p: seen.append("a"))
    ctx_b.on("agent/status", lambda p: seen.append("b"))

    ctx_a.emit("agent/status", None)
    assert seen == ["root", "a"]

    seen.clear()
    ctx_b.child(name="nested").emit("agent/status", None)  # children inherit the agent
    assert seen == ["root", "b"]

    seen.clear()
    root.emit("agent/status", None)  # no agent: reaches everyone
    assert seen == ["root", "a", "b"]

    seen.clear()

    def middleware(label: str) -> Any:
        async def handler(p: object, next: Any) -> Any:
            seen.append(label)
            return await next()

        return handler

    root.on("chain", middleware("root"))
    ctx_a.on("chain", middleware("a"))
    ctx_b.on("chain", middleware("b"))
    await ctx_a.waterfall("chain", None, lambda: None)
    assert seen == ["root", "a"]


def test_plugin_applied_through_agent_context_inherits_agent() -> None:
    root = Context()
    a, b = _Agent("a"), _Agent("b")
    ctx_a = root.child(agent=a)
    seen: list[str] = []

    def plugin(ctx: Context, config: object) -> None:
        assert ctx.agent is a
        ctx.on("tools/result", lambda p: seen.append("plugin"))

    ctx_a.plugin(plugin)
    root.child(agent=b).emit("tools/result", None)
    assert seen == []
    ctx_a.emit("tools/result", None)
    assert seen == ["plugin"]


# -- services --------------------------------------------------------------------------------


def test_provided_service_resolves_from_this_context_and_descendants() -> None:
    root = Context()
    service = object()
    dispose = root.provide("store", service)
    assert root.store is service
    assert root.child().child().store is service
    dispose()
    with pytest.raises(AttributeError, match="store"):
        _ = root.store


def test_missing_service_attribute_error_names_service_and_fix() -> None:
    with pytest.raises(AttributeError, match=r"no service 'llm'.*ctx\.provide\('llm'"):
        _ = Context().llm
    assert not hasattr(Context(), "llm")


def test_child_can_shadow_service_without_affecting_parent() -> None:
    root = Context()
    root.provide("store", "global")
    child = root.child()
    child.provide("store", "local")
    assert child.store == "local"
    assert root.store == "global"


def test_providing_same_name_twice_in_one_layer_is_rejected() -> None:
    root = Context()
    root.provide("store", 1)
    with pytest.raises(ValueError, match="already provided"):
        root.provide("store", 2)
    with pytest.raises(ValueError, match="identifier"):
        root.provide("not a name", 3)
    with pytest.raises(ValueError, match="shadowed"):
        root.provide("emit", 4)


def test_core_services_resolve_like_any_other_service() -> None:
    root = Context()
    assert not hasattr(root, "tools")
    with pytest.raises(AttributeError, match="has no service 'tools'; provide it"):
        root.tools  # noqa: B018
    root.provide("tools", "root tools")
    plugin = root.child(name="plugin")
    assert root.tools == "root tools" and plugin.tools == "root tools"
    undo = plugin.provide("tools", "shadowing tools")  # a child layer may shadow it
    assert plugin.tools == "shadowing tools" and root.tools == "root tools"
    undo()
    assert plugin.tools == "root tools"  # the cached answer follows the change


def test_a_core_service_read_follows_every_provide_and_withdraw_at_the_next_read() -> None:
    # Core services are read from a per-context holder with no generation check of their
    # own (docs/architecture.md "Step, session 16"): every provide and withdraw empties it.
    root = Context()
    root.provide("llm", "root llm")
    agent = root.child(name="agent")
    assert root.llm == "root llm" and agent.llm == "root llm"  # both holders filled
    undo = agent.provide("llm", "agent llm")
    assert agent.llm == "agent llm" and root.llm == "root llm"
    unrelated = root.provide("store", 1)  # another service: the answers stay as they were
    assert agent.llm == "agent llm"
    undo()
    assert agent.llm == "root llm"
    unrelated()
    withdraw = root.provide("tools", "tools")
    assert agent.tools == "tools"
    withdraw()
    assert not hasattr(agent, "tools")
    with pytest.raises(AttributeError, match="has no service 'tools'"):
        agent.tools  # noqa: B018


def test_a_context_that_read_core_services_is_not_kept_alive_by_its_tree() -> None:
    import gc
    import weakref

    root = Context()
    root.provide("llm", "llm")
    child = root.child(name="gone")
    assert child.llm == "llm"
    holder = weakref.ref(child._core)
    child.fiber.dispose()
    del child
    gc.collect()
    assert holder() is None
    assert root.llm == "llm"
    for i in range(200):  # many short-lived readers between two bumps: dead entries pruned
        reader = root.child(name=f"c{i}")
        assert reader.llm == "llm"
        reader.fiber.dispose()
    del reader
    gc.collect()
    root.child(name="last").llm  # noqa: B018
    assert len(root._tree.gen.filled) < 200


class _Registry:
    """A service that hands every context a view owning registrations in that context."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def __bind__(self, ctx: Context) -> _RegistryView:
        return _RegistryView(self, ctx)


class _RegistryView:
    def __init__(self, registry: _Registry, ctx: Context) -> None:
        self.registry = registry
        self.ctx = ctx

    def add(self, item: str) -> None:
        items = self.registry.items

        def setup() -> Any:
            items.append(item)
            return lambda: items.remove(item)

        self.ctx.effect(setup)


def test_bind_view_is_per_context_cached_and_owns_registrations_in_that_scope() -> None:
    root = Context()
    registry = _Registry()
    root.provide("registry", registry)
    child = root.child(name="agent")
    view = child.registry
    assert isinstance(view, _RegistryView)
    assert view.ctx is child
    assert child.registry is view  # cached
    assert root.registry.ctx is root
    root.provide("unrelated", 1)  # cache invalidation must keep an unchanged view
    assert child.registry is view

    child.registry.add("scoped")
    root.registry.add("global")
    assert registry.items == ["scoped", "global"]
    child.fiber.dispose()
    assert registry.items == ["global"]


def test_plugin_provided_service_is_visible_to_sibling_plugins_and_removed_on_dispose() -> None:
    root = Context()

    def provider(ctx: Context, config: object) -> None:
        ctx.provide("approval", "yes")

    def consumer(ctx: Context, config: object) -> None:
        assert ctx.approval == "yes"

    consumer.inject = ["approval"]  # type: ignore[attr-defined]
    fiber = root.plugin(provider)
    root.plugin(consumer)
    assert root.approval == "yes"
    fiber.dispose()
    assert not hasattr(root, "approval")


# -- effects and disposal --------------------------------------------------------------------


def test_effects_tear_down_in_reverse_order_on_scope_dispose() -> None:
    ctx = Context().child()
    order: list[str] = []

    def effect(name: str) -> Any:
        def setup() -> Any:
            order.append(f"+{name}")
            return lambda: order.append(f"-{name}")

        return setup

    for name in ("first", "second", "third"):
        ctx.effect(effect(name))
    ctx.effect(lambda: None)
    ctx.fiber.dispose()
    ctx.fiber.dispose()  # idempotent
    assert order == ["+first", "+second", "+third", "-third", "-second", "-first"]


def test_effect_disposer_tears_down_early_once() -> None:
    ctx = Context()
    order: list[str] = []
    dispose = ctx.effect(lambda: lambda: order.append("down"))
    dispose()
    ctx.fiber.dispose()
    assert order == ["down"]


def test_effect_setup_returning_non_callable_is_rejected() -> None:
    with pytest.raises(TypeError, match="teardown"):
        Context().effect(lambda: 42)


def test_disposing_parent_disposes_children_and_their_listeners() -> None:
    root = Context()
    parent = root.child(name="parent")
    kid = parent.child(name="kid")
    seen: list[str] = []
    kid.on("e", lambda p: seen.append("kid"))
    parent.on("e", lambda p: seen.append("parent"))
    parent.fiber.dispose()
    root.emit("e", None)
    assert seen == []
    assert not kid.active and not kid.fiber.active
    assert root.active


def test_registering_through_disposed_context_raises_inactive_context_error() -> None:
    ctx = Context().child(name="gone")
    ctx.fiber.dispose()
    with pytest.raises(InactiveContextError, match=r"gone.*disposed"):
        ctx.on("e", lambda p: None)
    with pytest.raises(InactiveContextError):
        ctx.provide("x", 1)
    with pytest.raises(InactiveContextError):
        ctx.effect(lambda: None)
    with pytest.raises(InactiveContextError):
        ctx.plugin(lambda c, cfg: None)
    with pytest.raises(InactiveContextError):
        ctx.child()


def test_raising_disposer_is_reported_and_unwinding_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = Context()
    reports: list[ErrorReport] = []
    root.on("internal/error", reports.append)
    scope = root.child()
    order: list[str] = []

    def bad_teardown() -> None:
        raise RuntimeError("teardown failed")

    scope.effect(lambda: lambda: order.append("first"))
    scope.effect(lambda: bad_teardown)
    with caplog.at_level(logging.ERROR, logger="agentloop_nb"):
        scope.fiber.dispose()
    assert order == ["first"]
    assert [r.event for r in reports] == ["fiber/dispose"]


@pytest.mark.anyio
async def test_aclose_awaits_async_disposers_in_reverse_order() -> None:
    ctx = Context().child()
    order: list[str] = []

    def make(name: str) -> Any:
        async def teardown() -> None:
            await asyncio.sleep(0)
            order.append(name)

        return teardown

    ctx.effect(lambda: make("a"))
    ctx.effect(lambda: make("b"))
    await ctx.fiber.aclose()
    assert order == ["b", "a"]
    await ctx.fiber.aclose()  # idempotent
    assert order == ["b", "a"]


@pytest.mark.anyio
async def test_sync_dispose_schedules_async_teardown_and_aclose_waits_for_it() -> None:
    ctx = Context().child()
    done = asyncio.Event()

    async def teardown() -> None:
        await asyncio.sleep(0)
        done.set()

    ctx.effect(lambda: teardown)
    ctx.fiber.dispose()
    assert not done.is_set()
    await ctx.fiber.aclose()
    assert done.is_set()


# -- plugins ---------------------------------------------------------------------------------


def test_function_plugin_receives_child_context_and_config() -> None:
    root = Context()
    got: dict[str, Any] = {}

    def apply(ctx: Context, config: Any) -> None:
        got["ctx"] = ctx
        got["config"] = config
        ctx.on("e", lambda p: got.setdefault("event", p))

    fiber = root.plugin(apply, {"x": 1})
    assert isinstance(fiber, Fiber)
    assert got["ctx"].parent is root
    assert got["ctx"].fiber is fiber
    assert got["config"] == {"x": 1}
    assert fiber.instance is None
    root.emit("e", "hello")
    assert got["event"] == "hello"
    fiber.dispose()
    assert not fiber.active


def test_class_plugin_instance_is_kept_and_its_dispose_runs_on_scope_dispose() -> None:
    root = Context()
    order: list[str] = []

    class Guard:
        name = "guard"

        def __init__(self, ctx: Context, config: Any) -> None:
            ctx.effect(lambda: lambda: order.append("effect"))
            self.config = config

        def dispose(self) -> None:
            order.append("instance")

    fiber = root.plugin(Guard, "cfg")
    assert isinstance(fiber.instance, Guard)
    assert fiber.instance.config == "cfg"
    assert fiber.name == "guard"
    fiber.dispose()
    assert order == ["instance", "effect"]


def test_plugin_config_model_validates_dict_and_none() -> None:
    root = Context()
    got: list[Any] = []

    def apply(ctx: Context, config: Any) -> None:
        got.append(config)

    class Config(BaseModel):
        limit: int = 3

    apply.Config = Config  # type: ignore[attr-defined]
    root.plugin(apply, {"limit": "5"})
    root.plugin(apply)
    assert got == [Config(limit=5), Config(limit=3)]


def test_plugin_config_validation_failure_registers_nothing() -> None:
    root = Context()
    applied: list[bool] = []

    class Budget:
        class Config(BaseModel):
            limit: int

        def __init__(self, ctx: Context, config: Any) -> None:
            applied.append(True)
            ctx.on("e", lambda p: None)

    with pytest.raises(ValidationError, match="limit"):
        root.plugin(Budget, {"limit": "not a number"})
    assert applied == []


def test_plugin_inject_missing_service_names_it_and_how_to_provide_it() -> None:
    root = Context()
    applied: list[bool] = []

    def needs(ctx: Context, config: object) -> None:
        applied.append(True)

    needs.inject = ("approval",)  # type: ignore[attr-defined]
    with pytest.raises(PluginError, match=r"'approval'.*ctx\.provide\('approval'"):
        root.plugin(needs)
    assert applied == []
    root.provide("approval", object())
    root.plugin(needs)
    assert applied == [True]


def test_named_plugin_reregistered_replaces_instead_of_duplicating() -> None:
    root = Context()
    calls: list[str] = []
    disposed: list[int] = []

    def make(version: int) -> Any:
        def apply(ctx: Context, config: object) -> None:
            ctx.on("e", lambda p: calls.append(f"v{version}"))
            ctx.effect(lambda: lambda: disposed.append(version))

        return apply

    first = root.plugin(make(1), name="guard")
    second = root.plugin(make(2), name="guard")  # re-running the notebook cell
    assert not first.active and second.active
    assert disposed == [1]
    root.emit("e", None)
    assert calls == ["v2"]


def test_plugin_name_attribute_also_replaces() -> None:
    root = Context()
    calls: list[str] = []

    def apply(ctx: Context, config: object) -> None:
        ctx.on("e", lambda p: calls.append("x"))

    apply.name = "cell"  # type: ignore[attr-defined]
    root.plugin(apply)
    root.plugin(apply)
    root.emit("e", None)
    assert calls == ["x"]


def test_same_name_through_different_contexts_does_not_replace() -> None:
    root = Context()
    calls: list[str] = []

    def apply(ctx: Context, config: object) -> None:
        ctx.on("e", lambda p: calls.append("x"))

    root.plugin(apply, name="p")
    root.child().plugin(apply, name="p")
    root.emit("e", None)
    assert calls == ["x", "x"]


def test_plugin_apply_raising_leaves_nothing_registered() -> None:
    root = Context()
    calls: list[str] = []

    def apply(ctx: Context, config: object) -> None:
        ctx.on("e", lambda p: calls.append("leaked"))
        ctx.provide("half", object())
        ctx.effect(lambda: lambda: calls.append("undone"))
        raise RuntimeError("apply failed")

    with pytest.raises(RuntimeError, match="apply failed"):
        root.plugin(apply, name="broken")
    assert calls == ["undone"]
    root.emit("e", None)
    assert calls == ["undone"]
    assert not hasattr(root, "half")
    root.provide("half", "fresh")  # the name was freed, not left half-registered


def test_async_plugin_apply_is_rejected_and_rolled_back() -> None:
    root = Context()

    async def apply(ctx: Context, config: object) -> None:
        return None

    apply.name = "async-cell"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="synchronous"):
        root.plugin(apply)


def test_nested_plugins_are_disposed_with_their_parent_plugin() -> None:
    root = Context()
    calls: list[str] = []

    def inner(ctx: Context, config: object) -> None:
        ctx.on("e", lambda p: calls.append("inner"))

    def outer(ctx: Context, config: object) -> None:
        ctx.plugin(inner)

    fiber = root.plugin(outer)
    root.emit("e", None)
    fiber.dispose()
    root.emit("e", None)
    assert calls == ["inner"]


def test_listening_to_a_near_miss_of_a_catalogued_hook_warns_naming_the_hook_meant() -> None:
    ctx = Context()
    with pytest.warns(UserWarning, match=r"did you mean 'tools/pre-execute'"):
        ctx.on("tools/pre-exectue", lambda payload: None)
    # a catalogued name and a plugin's own hook name register quietly
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctx.on("tools/pre-execute", lambda payload, next_: next_())
        ctx.on("budget/reached", lambda payload: None)
