"""The one scoped-registry + binding mechanism that services build their ``ctx`` views on."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop_nb._disposer import Disposer
from agentloop_nb._scoped import Bindable, BoundView, ScopedRegistry
from agentloop_nb.context import Context, InactiveContextError


class Agent:
    def __init__(self, id: str) -> None:
        self.id = id


def test_an_agent_sees_its_own_entry_first_and_other_agents_see_the_global_one() -> None:
    registry: ScopedRegistry[str] = ScopedRegistry("thing")
    a, b = Agent("a"), Agent("b")
    registry.add("x", "global")
    registry.add("x", "a's", a)
    assert registry.lookup("x", a) == "a's"
    assert registry.lookup("x", b) == "global"
    assert registry.lookup("x") == "global"
    assert registry.lookup("missing", a) is None


def test_a_lone_entry_is_seen_by_all_when_global_and_by_its_agent_alone_when_scoped() -> None:
    registry: ScopedRegistry[str] = ScopedRegistry("thing")
    a, b = Agent("a"), Agent("b")
    registry.add("g", "global")
    registry.add("s", "a's", a)
    assert [registry.lookup("g", who) for who in (a, b, None)] == ["global"] * 3
    assert [registry.lookup("s", who) for who in (a, b, None)] == ["a's", None, None]


def test_visible_keeps_a_shadowed_name_in_place_and_lists_agent_only_names_last() -> None:
    registry: ScopedRegistry[str] = ScopedRegistry("thing")
    a = Agent("a")
    registry.add("own", "a-only", a)
    registry.add("one", "g1")
    registry.add("two", "g2")
    registry.add("one", "a1", a)
    assert registry.visible(a) == (("one", "a1"), ("two", "g2"), ("own", "a-only"))
    assert registry.visible(None) == (("one", "g1"), ("two", "g2"))
    assert registry.visible(Agent("b")) == (("one", "g1"), ("two", "g2"))


def test_a_unique_registry_refuses_a_second_entry_in_the_same_scope_only() -> None:
    registry: ScopedRegistry[int] = ScopedRegistry("tool", unique=True)
    a = Agent("a")
    registry.add("t", 1)
    registry.add("t", 2, a)  # another scope: shadows instead
    with pytest.raises(ValueError, match="tool 't' is already registered"):
        registry.add("t", 3)
    with pytest.raises(ValueError, match="for agent 'a'"):
        registry.add("t", 4, a)
    assert registry.taken("t") and registry.taken("t", a) and not registry.taken("t", Agent("b"))


def test_latest_entry_wins_and_a_stale_disposer_never_removes_a_newer_one() -> None:
    registry: ScopedRegistry[str] = ScopedRegistry("thing")
    first = registry.add("x", "first")
    second = registry.add("x", "second")
    assert registry.lookup("x") == "second"
    second()
    assert registry.lookup("x") == "first"
    second()  # again: nothing
    assert registry.lookup("x") == "first"
    first()
    assert registry.lookup("x") is None and list(registry.names()) == []


def test_position_remembers_the_first_registration_of_a_name_across_replacement() -> None:
    registry: ScopedRegistry[str] = ScopedRegistry("thing")
    registry.add("a", "1")()
    registry.add("b", "2")
    registry.add("a", "3")
    assert registry.position("a") < registry.position("b")


def test_add_through_a_context_scopes_to_its_agent_and_is_owned_by_its_scope() -> None:
    root = Context()
    agent = Agent("a")
    agent_ctx = root.child(agent=agent)
    registry: ScopedRegistry[str] = ScopedRegistry("thing")
    registry.add_through(agent_ctx, "x", "scoped")
    registry.add_through(None, "x", "global")
    assert registry.lookup("x", agent) == "scoped"
    assert registry.lookup("x") == "global"
    agent_ctx.fiber.dispose()
    assert registry.lookup("x", agent) == "global"
    with pytest.raises(InactiveContextError):
        registry.add_through(agent_ctx, "y", "late")
    assert registry.lookup("y", agent) is None


class Counter(Bindable):
    """A toy service: a global registry plus a value, bound per context."""

    def __init__(self) -> None:
        self.registry: ScopedRegistry[int] = ScopedRegistry("counter")
        self.label = "counter"

    def add(self, name: str, value: int) -> Disposer:
        return self.registry.add(name, value)

    class View(BoundView["Counter"]):
        __slots__ = ()

        def add(self, name: str, value: int) -> Disposer:
            registry, agent = self.service.registry, self.agent
            return self.own(lambda: registry.add(name, value, agent))


def test_a_bound_view_routes_registrations_through_its_context_and_forwards_the_rest() -> None:
    root = Context()
    service = Counter()
    root.provide("counter", service)
    agent = Agent("a")
    agent_ctx = root.child(agent=agent)
    view: Any = agent_ctx.counter
    assert isinstance(view, Counter.View)
    assert agent_ctx.counter is view  # stable per context
    assert view.service is service and view.ctx is agent_ctx and view.agent is agent
    assert view.label == "counter"  # forwarded
    view.add("n", 1)
    assert service.registry.lookup("n", agent) == 1
    assert service.registry.lookup("n") is None
    agent_ctx.fiber.dispose()
    assert service.registry.lookup("n", agent) is None
    with pytest.raises(AttributeError):
        view._private  # noqa: B018


def test_visible_reflects_every_add_and_removal_although_its_answer_is_reused() -> None:
    registry: ScopedRegistry[str] = ScopedRegistry("thing")
    a = Agent("a")
    first = registry.visible(a)
    assert first == () and registry.visible(a) is first  # unchanged: the same answer
    undo = registry.add("x", "global")
    assert registry.visible(a) == (("x", "global"),)
    undo_own = registry.add("x", "mine", a)
    assert registry.visible(a) == (("x", "mine"),)
    assert registry.visible(None) == (("x", "global"),)  # another viewer: its own answer
    undo_own()
    assert registry.visible(a) == (("x", "global"),)
    undo()
    assert registry.visible(a) == ()
