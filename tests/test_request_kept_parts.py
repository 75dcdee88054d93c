"""What the per-step request path reuses between steps (docs/architecture.md "Step, session
16") is never stale: a tool registered or disposed between two steps, a schema part assigned,
another agent, or a definition that answers its own schema is offered at the next request; the
prompt's per-agent assembly leaves with its agent; the request path's live ``listened``
container sees a listener added after the first request; the ``cwd`` variable follows an
adapter registered between steps."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from _loop_helpers import OPTIONS, make_app, run, scripted

from agentloop_nb import AgentOptions
from agentloop_nb.context import Context
from agentloop_nb.loop._prompt_vars import CWD_NOT_SHARED
from agentloop_nb.prompt import SystemPrompt
from agentloop_nb.testing import ScriptedModel, text, tool_call
from agentloop_nb.tools import Tool, ToolRuntime, tool

pytestmark = pytest.mark.anyio


class FakeAgent:
    def __init__(self, root: Context, agent_id: str) -> None:
        self.id = agent_id
        self.ctx = root.child(name=f"agent:{agent_id}", agent=self)


def prompt_with_tools() -> tuple[Context, SystemPrompt]:
    ctx = Context()
    service = SystemPrompt(ctx, persona=None)
    ctx.provide("system_prompt", service)
    ctx.provide("tools", ToolRuntime(ctx))
    return ctx, service


def names(tools: Any) -> list[str]:
    return [schema["name"] for schema in tools]


async def tools_offered_around(app: Any, first: Tool) -> list[list[str]]:
    """Register ``first``, run a turn that calls it once, close the app: the tool names each
    request offered (before and after ``first`` ran)."""
    app.ctx.tools.register(first)
    model = scripted(app, tool_call("c1", "first", {}), text("done"))
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    await app.aclose()
    return [names(options.tools) for options in model.requests]


def make_tool(name: str) -> Tool:
    async def body() -> str:
        return "ok"

    return Tool(name, f"{name} tool", {"type": "object", "properties": {}}, lambda **_: body())


async def test_a_tool_registered_between_two_steps_is_offered_at_the_second() -> None:
    app = make_app()
    late = make_tool("late")

    @tool
    async def first() -> str:
        """Registers another tool."""
        app.ctx.tools.register(late)
        return "ok"

    assert await tools_offered_around(app, first) == [
        ["first"],
        ["first", "late"],
    ]


async def test_a_tool_disposed_between_two_steps_is_not_offered_at_the_second() -> None:
    app = make_app()
    gone = make_tool("gone")
    dispose = app.ctx.tools.register(gone)

    @tool
    async def first() -> str:
        """Disposes another tool."""
        dispose()
        return "ok"

    assert await tools_offered_around(app, first) == [
        ["gone", "first"],
        ["first"],
    ]


async def test_a_schema_part_assigned_between_collections_is_offered_at_the_next() -> None:
    ctx, service = prompt_with_tools()
    probe = make_tool("probe")
    ctx.tools.register(probe)
    agent = FakeAgent(ctx, "a")
    first = service.collect(agent).tools
    assert service.collect(agent).tools is first  # kept while nothing changed
    probe.name = "renamed"
    assert names(service.collect(agent).tools) == ["renamed"]
    probe.description = "another description"
    assert service.collect(agent).tools[0]["description"] == "another description"
    probe.parameters = {"type": "object", "properties": {"x": {"type": "integer"}}}
    assert service.collect(agent).tools[0]["parameters"]["properties"] == {"x": {"type": "integer"}}


async def test_alternating_agents_are_offered_their_own_tools() -> None:
    ctx, service = prompt_with_tools()
    ctx.tools.register(make_tool("shared"))
    a, b = FakeAgent(ctx, "a"), FakeAgent(ctx, "b")
    a.ctx.tools.register(make_tool("only_a"))
    for _ in range(2):
        assert names(service.collect(a).tools) == ["shared", "only_a"]
        assert names(service.collect(b).tools) == ["shared"]


async def test_a_definition_that_answers_its_own_schema_is_asked_at_every_collection() -> None:
    class Counting(Tool):
        __slots__ = ("asked",)

        def schema(self) -> dict[str, Any]:
            self.asked += 1
            return {**super().schema(), "description": f"asked {self.asked}"}

    ctx, service = prompt_with_tools()
    probe = Counting("probe", "", {"type": "object", "properties": {}}, lambda **_: None)
    probe.asked = 0
    ctx.tools.register(probe)
    agent = FakeAgent(ctx, "a")
    descriptions = [service.collect(agent).tools[0]["description"] for _ in range(3)]
    assert descriptions == ["asked 1", "asked 2", "asked 3"]


async def test_an_agents_kept_assembly_leaves_with_the_agent() -> None:
    class Bare:  # an agent outside the context tree (a FakeAgent's context keeps it)
        id = "bare"

    _, service = prompt_with_tools()
    gone, other = Bare(), Bare()
    service.collect(gone)
    service.collect(other)  # the registries' last answers now name ``other``
    assert len(service._collected) == 2
    del gone
    gc.collect()
    assert len(service._collected) == 1
    assert service.collect(other) is service.collect(other)


async def test_an_agent_without_weak_references_is_collected_each_time() -> None:
    _, service = prompt_with_tools()
    first = service.collect(None)
    assert service.collect(None) == first
    assert service._collected == {}


async def test_an_unhashable_agent_is_collected_each_time() -> None:
    class Unhashable:
        id = "u"
        __hash__ = None  # type: ignore[assignment]

    _, service = prompt_with_tools()
    agent = Unhashable()
    assert service.collect(agent) == service.collect(agent)
    assert service._collected == {}


async def test_an_agent_request_listener_added_after_the_first_request_runs_at_the_next() -> None:
    app = make_app()
    seen: list[int] = []

    @tool
    async def listen() -> str:
        """Adds an agent/request listener."""

        def on_request(payload: Any, next: Any) -> Any:
            seen.append(payload.step)
            return next()

        app.ctx.on("agent/request", on_request)
        return "ok"

    app.ctx.tools.register(listen)
    scripted(app, tool_call("c1", "listen", {}), text("done"))
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    assert seen == [2]
    await app.aclose()


async def test_an_adapter_registered_between_steps_changes_cwd() -> None:
    app = make_app()
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="later", model="m"))
    service = app.ctx.system_prompt
    assert service.collect(agent).variables["cwd"] == CWD_NOT_SHARED
    app.ctx.llm.register_adapter(["later"], ScriptedModel())  # in-process: ``is_local``
    assert service.collect(agent).variables["cwd"] == str(agent.session.header.cwd or ".")
    await app.aclose()
