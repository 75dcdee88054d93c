"""The system prompt's collection hands out the same assembly while nothing it is made of changed
(benchmarks/README.md "Step (session 12)"), and a new one as soon as anything did: a section's
text, a variable's value, the visible sections, a tool's schema. The rendered text of an
assembly the collection built is kept; one built elsewhere is rendered each time."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from agentloop_nb.context import Context
from agentloop_nb.prompt import Assembly, Section, SystemPrompt
from agentloop_nb.tools import ToolRuntime, tool


class FakeAgent:
    def __init__(self, root: Context, agent_id: str) -> None:
        self.id = agent_id
        self.ctx = root.child(name=f"agent:{agent_id}", agent=self)


def make_ctx(*, tools: bool = False) -> Context:
    ctx = Context()
    ctx.provide("system_prompt", SystemPrompt(ctx, persona=None))
    if tools:
        ctx.provide("tools", ToolRuntime(ctx))
    return ctx


async def assemble(agent: Any) -> Assembly:
    assembly: Assembly = await agent.ctx.system_prompt.assemble(agent)
    return assembly


@pytest.mark.anyio
async def test_an_unchanged_prompt_is_the_same_assembly_and_renders_to_the_same_text() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("s", "model {{model}}")
    ctx.system_prompt.variable("model", lambda agent: "m1")
    agent = FakeAgent(ctx, "a")
    first = await assemble(agent)
    text = SystemPrompt.render(first)
    second = await assemble(agent)
    assert second is first
    assert SystemPrompt.render(second) is text == "model m1"


@pytest.mark.anyio
async def test_a_changed_variable_value_makes_a_new_assembly_and_text() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("s", "model {{model}}")
    value = ["m1"]
    ctx.system_prompt.variable("model", lambda agent: value[0])
    agent = FakeAgent(ctx, "a")
    first = await assemble(agent)
    assert SystemPrompt.render(first) == "model m1"
    value[0] = "m2"
    second = await assemble(agent)
    assert second is not first
    assert SystemPrompt.render(second) == "model m2"
    assert SystemPrompt.render(first) == "model m1"  # the old one still says what it held


@pytest.mark.anyio
async def test_a_section_function_answering_other_text_makes_a_new_assembly() -> None:
    ctx = make_ctx()
    text = ["one"]
    ctx.system_prompt.section("s", lambda agent: text[0])
    agent = FakeAgent(ctx, "a")
    first = await assemble(agent)
    text[0] = "two"
    second = await assemble(agent)
    assert second is not first
    assert SystemPrompt.render(second) == "two"
    text[0] = "two!"[:3]  # an equal text, another object: the same section and assembly
    assert await assemble(agent) is second


@pytest.mark.anyio
async def test_a_section_registered_or_disposed_makes_a_new_assembly() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("s", "base")
    agent = FakeAgent(ctx, "a")
    first = await assemble(agent)
    dispose = ctx.system_prompt.section("t", "more")
    second = await assemble(agent)
    assert second is not first
    assert SystemPrompt.render(second) == "base\n\nmore"
    dispose()
    third = await assemble(agent)
    assert third is not second
    assert SystemPrompt.render(third) == "base"


@pytest.mark.anyio
async def test_each_agent_keeps_its_own_assembly() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("s", "I am {{me}}")
    ctx.system_prompt.variable("me", lambda agent: agent.id)
    a, b = FakeAgent(ctx, "a"), FakeAgent(ctx, "b")
    first_a, first_b = await assemble(a), await assemble(b)
    assert SystemPrompt.render(first_a) == "I am a"
    assert SystemPrompt.render(first_b) == "I am b"
    assert await assemble(a) is first_a
    assert await assemble(b) is first_b


@pytest.mark.anyio
async def test_a_tool_registered_or_changed_makes_a_new_assembly() -> None:
    ctx = make_ctx(tools=True)

    @tool
    async def probe(x: int) -> str:
        """First description."""
        return "ok"

    agent = FakeAgent(ctx, "a")
    empty = await assemble(agent)
    assert empty.tools == ()
    ctx.tools.register(probe)
    first = await assemble(agent)
    assert first is not empty
    assert [t["description"] for t in first.tools] == ["First description."]
    assert await assemble(agent) is first
    probe.description = "Second description."
    second = await assemble(agent)
    assert second is not first
    assert [t["description"] for t in second.tools] == ["Second description."]
    probe.parameters = {"type": "object", "properties": {}}
    third = await assemble(agent)
    assert third is not second
    assert third.tools[0]["parameters"] == {"type": "object", "properties": {}}


@pytest.mark.anyio
async def test_a_tools_service_provided_later_is_offered_at_the_next_collection() -> None:
    ctx = make_ctx()
    agent = FakeAgent(ctx, "a")
    assert (await assemble(agent)).tools == ()
    runtime = ToolRuntime(ctx)

    @tool
    async def probe() -> str:
        """Probe."""
        return "ok"

    runtime.register(probe)
    ctx.provide("tools", runtime)
    assert [t["name"] for t in (await assemble(agent)).tools] == ["probe"]


def test_a_tool_schema_is_the_same_dict_until_an_attribute_is_assigned() -> None:
    @tool
    async def probe() -> str:
        """Probe."""
        return "ok"

    first = probe.schema()
    assert probe.schema() is first
    probe.description = "Changed."
    second = probe.schema()
    assert second is not first
    assert second == {"name": "probe", "description": "Changed.", "parameters": probe.parameters}
    assert first["description"] == "Probe."


def test_an_assembly_built_elsewhere_is_rendered_from_its_current_variables() -> None:
    # Only assemblies the collection built keep their text: this one wraps a dict its maker
    # still holds, so its text may change between renders.
    values = {"v": "1"}
    assembly = Assembly(sections=(Section("s", "{{v}}"),), variables=MappingProxyType(values))
    assert SystemPrompt.render(assembly) == "1"
    values["v"] = "2"
    assert SystemPrompt.render(assembly) == "2"
