"""Nothing notebook-wide lives in a module: the routers of a dispatcher are held by that
context, the describers by the kernel state, and an App closed without closing its feeds and
watchers leaves none of them reachable."""

from __future__ import annotations

import asyncio
import collections
import gc
import importlib
import pkgutil
import types
import weakref
from collections.abc import Iterator, MutableMapping, MutableSequence, MutableSet
from typing import Any

import pytest

import agentloop_nb.jupyter
from agentloop_nb import AgentOptions, App
from agentloop_nb.context import Context
from agentloop_nb.jupyter import SessionFeed, Throttle, WidgetApproval, kernel_tools
from agentloop_nb.jupyter._state import KernelState, attach, detach
from agentloop_nb.jupyter.fold import Router, router
from agentloop_nb.jupyter.fold._routes import Routers
from agentloop_nb.jupyter.view._childview import watch_children

# What the notebook layer keeps at module level on purpose, and why. Constant tables are
# frozen (``MappingProxyType``) and pass on their own.
ALLOWED = {
    ("agentloop_nb.jupyter._state", "_KERNEL"): "the holder of the loaded KernelState itself",
    ("agentloop_nb.jupyter.view._throttle", "_PACERS"): (
        "one render pacer per event loop, the resource it rations: keyed weakly by the loop "
        "(dies with it), and it holds a view's throttle only while a render is queued"
    ),
}

_MUTABLE = (
    dict,
    list,
    set,
    bytearray,
    collections.deque,
    MutableMapping,
    MutableSequence,
    MutableSet,
)


def _mutable(value: Any) -> bool:
    return isinstance(value, _MUTABLE)


def _holds_state(value: Any) -> bool:
    """A mutable container, or an object of this package keeping one in its fields (a
    registry by another name)."""
    if _mutable(value):
        return True
    if isinstance(value, type | types.ModuleType | types.FunctionType | types.BuiltinFunctionType):
        return False
    if not type(value).__module__.startswith("agentloop_nb"):
        return False
    fields = getattr(value, "__dict__", {})
    return any(_mutable(v) for v in fields.values())


def registries(module: types.ModuleType) -> Iterator[str]:
    """The names of ``module``'s globals that hold mutable state (dunders aside)."""
    for name, value in vars(module).items():
        if name.startswith("__") and name.endswith("__"):
            continue
        if _holds_state(value):
            yield name


def _notebook_modules() -> list[types.ModuleType]:
    package = agentloop_nb.jupyter
    names = [package.__name__] + [
        info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
    ]
    return [importlib.import_module(name) for name in sorted(names)]


def test_no_module_of_the_notebook_layer_holds_a_mutable_registry() -> None:
    modules = _notebook_modules()
    assert len(modules) > 50  # every room was walked
    found = [
        f"{m.__name__}.{name}"
        for m in modules
        for name in registries(m)
        if (m.__name__, name) not in ALLOWED
    ]
    assert not found, "module-level mutable state (hold it on the kernel state or a ctx):\n" + (
        "\n".join(found)
    )


def test_the_registry_check_catches_the_old_module_dicts_and_a_holder_object() -> None:
    old = types.ModuleType("agentloop_nb.jupyter.fold._old_feed")

    class _Holder:
        def __init__(self) -> None:
            self.by_type: dict[type, Any] = {}

    _Holder.__module__ = old.__name__
    old.__dict__.update(
        _ROUTERS={},  # the feed routers by id(ctx), as they were
        _BIRTHS={},
        _describers={},
        _SEEN=set(),
        _holder=_Holder(),
        SETTLED="tools/settled",  # constants pass
        _CALL_OVER=frozenset({"done"}),
        _MAGICS=(("line", "agent"),),
        _log=__import__("logging").getLogger("x"),
        __all__=["SETTLED"],
    )
    assert sorted(registries(old)) == ["_BIRTHS", "_ROUTERS", "_SEEN", "_describers", "_holder"]


# -- routers: held by the dispatching context ------------------------------------------------


def _key(payload: Any) -> Any:
    return payload


def test_a_dispatcher_holds_one_router_per_hook_and_listens_only_while_someone_waits() -> None:
    ctx = Context()
    first = router(ctx, "session/event", _key)
    assert router(ctx, "session/event", _key) is first  # shared: one listener for every view
    assert router(ctx, "session/created", _key) is not first
    assert not ctx.has_listeners("session/event")  # made, not yet listening
    got: list[tuple[str, Any]] = []
    off_a = first.add("a", lambda p: got.append(("a", p)))
    off_b = first.add("b", lambda p: got.append(("b", p)))
    assert ctx.has_listeners("session/event")
    ctx.emit("session/event", "a")
    ctx.emit("session/event", "c")  # nobody's key: nobody called
    assert got == [("a", "a")]
    off_a()
    off_b()
    assert not ctx.has_listeners("session/event")  # nobody left: the hook is unobserved again
    again = first.add("a", lambda p: got.append(("again", p)))
    ctx.emit("session/event", "a")
    assert got[-1] == ("again", "a")
    again()


def test_each_context_holds_its_own_routers_and_a_plain_dispatcher_gets_an_unshared_one() -> None:
    root = Context()
    child = root.child(name="c")
    on_root = router(root, "session/event", _key)
    on_child = router(child, "session/event", _key)
    assert on_root is not on_child and on_child.dispatch is child

    class Plain:  # a dispatcher that cannot hold a service
        def __init__(self) -> None:
            self.listeners: list[Any] = []

        def on(self, name: str, handler: Any) -> Any:
            self.listeners.append(handler)
            return lambda: self.listeners.remove(handler)

    plain = Plain()
    routed = router(plain, "session/event", _key)
    assert isinstance(routed, Router)
    got: list[Any] = []
    off = routed.add("k", got.append)
    for handler in plain.listeners:
        handler("k")
    assert got == ["k"]
    off()
    assert plain.listeners == []


def test_a_router_on_a_disposed_context_refuses_instead_of_listening_to_nothing() -> None:
    root = Context()
    child = root.child(name="c")
    held = router(child, "session/event", _key)
    held.add("k", lambda p: None)
    child.fiber.dispose()
    with pytest.raises(Exception, match="disposed"):
        held.add("j", lambda p: None)


# -- lifetime: an App closed with its feeds and watchers still open ----------------------------


# Each App lives in a helper coroutine, as in a cell: a caller's frame may keep a snapshot of
# its locals (pydantic's deferred model build reads the calling frame's namespace), which is
# the test's own reference, not the package's.


async def _app_closed_with_open_feeds() -> list[weakref.ref[Any]]:
    app = App()
    agent = app.agent_loop.create("a", AgentOptions(provider="offline", model="demo"))
    feed = SessionFeed(agent.session, agent.ctx)
    watch_children(app.ctx, str(agent.session.id), lambda session: None)
    routers = app.ctx.notebook_routers
    assert isinstance(routers, Routers)
    gone = [weakref.ref(o) for o in (app, agent, feed, routers, agent.session)]
    await app.aclose()  # neither the feed nor the watch was closed
    return gone


@pytest.mark.anyio
async def test_an_app_closed_with_open_feeds_and_watchers_leaves_nothing_reachable() -> None:
    gone = await _app_closed_with_open_feeds()
    gc.collect()
    assert [ref() for ref in gone] == [None] * len(gone)


async def _kernel_state_closed() -> list[weakref.ref[Any]]:
    app = App()
    state = KernelState(None, app, WidgetApproval())
    attach(state)
    try:
        agent = app.agent_loop.create("a", AgentOptions(provider="offline", model="demo"))
        state.bind("a", agent)
        feed = state.feed(agent)
        kernel_tools.describe(int, lambda n: "a number")
        gone = [weakref.ref(o) for o in (state, app, agent, feed, state.describers)]
    finally:
        assert detach() is state
    state.close()
    await app.aclose()
    return gone


@pytest.mark.anyio
async def test_a_closed_kernel_state_leaves_its_app_feeds_and_describers_unreachable() -> None:
    gone = await _kernel_state_closed()
    gc.collect()
    assert [ref() for ref in gone] == [None] * len(gone)


def test_an_event_loop_that_paced_renders_is_collected_once_closed() -> None:
    # The render pacers are keyed weakly by their loop; a pacer holding its loop strongly kept
    # every loop that ever rendered a view (and the renders still queued on it) alive.
    async def render_once() -> None:
        throttle = Throttle(lambda: None, interval=0)
        throttle.poke()
        await throttle.settled()

    loop = asyncio.new_event_loop()
    loop.run_until_complete(render_once())
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None
