from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from agentloop_nb.context import Context, InactiveContextError
from agentloop_nb.prompt import (
    PERSONA_SECTION,
    PERSONA_TEXT,
    AssemblePayload,
    Assembly,
    Section,
    SystemPrompt,
    UndefinedVariableError,
)
from agentloop_nb.signals import AbortController, AbortError


class FakeAgent:
    def __init__(self, root: Context, agent_id: str, provider: str = "scripted") -> None:
        self.id = agent_id
        self.provider = provider
        self.ctx = root.child(name=f"agent:{agent_id}", agent=self)


def make_ctx(*, persona: str | None = None) -> Context:
    ctx = Context()
    ctx.provide("system_prompt", SystemPrompt(ctx, persona=persona))
    return ctx


def add_loop_variables(ctx: Context) -> None:
    ctx.system_prompt.variable("provider", lambda agent: agent.provider)
    ctx.system_prompt.variable("model", lambda agent: "m1")
    ctx.system_prompt.variable("cwd", lambda agent: "/work")


async def render_for(ctx: Context, agent: Any) -> str:
    assembly = await ctx.system_prompt.assemble(agent)
    text: str = ctx.system_prompt.render(assembly)
    return text


@pytest.mark.anyio
async def test_default_persona_renders_with_the_loop_variables() -> None:
    ctx = Context()
    ctx.provide("system_prompt", SystemPrompt(ctx))
    add_loop_variables(ctx)
    agent = FakeAgent(ctx, "a")
    assembly = await ctx.system_prompt.assemble(agent)
    assert [s.name for s in assembly.sections] == [PERSONA_SECTION]
    assert assembly.tools == ()
    rendered = ctx.system_prompt.render(assembly)
    assert rendered == PERSONA_TEXT.replace("{{provider}}", "scripted").replace(
        "{{model}}", "m1"
    ).replace("{{cwd}}", "/work")
    assert "agentloop_nb" in rendered and "Jupyter" in rendered
    # Byte-stable across steps: the provider's prompt cache depends on it.
    assert await render_for(ctx, agent) == rendered


@pytest.mark.anyio
async def test_sections_render_by_order_then_registration_joined_by_blank_lines() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("b", "B")
    ctx.system_prompt.section("late-but-first", "first", order=-1)
    ctx.system_prompt.section("a", "A")
    ctx.system_prompt.section("tail", "Z", order=5)
    assert await render_for(ctx, None) == "first\n\nB\n\nA\n\nZ"
    assembly = await ctx.system_prompt.assemble(None)
    assert assembly.sections[0] == Section("late-but-first", "first", -1)


@pytest.mark.anyio
async def test_section_function_receives_the_agent_and_none_omits_it() -> None:
    ctx = make_ctx()
    a, b = FakeAgent(ctx, "a"), FakeAgent(ctx, "b")
    ctx.system_prompt.section(
        "who", lambda agent: f"You are {agent.id}." if agent.id == "a" else None
    )
    ctx.system_prompt.section("always", "hello")
    assert await render_for(ctx, a) == "You are a.\n\nhello"
    assert await render_for(ctx, b) == "hello"


@pytest.mark.anyio
async def test_unknown_variable_raises_key_error_naming_variable_section_and_fix() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("greeting", "Hi {{user_name}}")
    assembly = await ctx.system_prompt.assemble(None)
    with pytest.raises(KeyError) as info:
        ctx.system_prompt.render(assembly)
    assert isinstance(info.value, UndefinedVariableError)
    message = str(info.value)
    assert "user_name" in message and "'greeting'" in message
    assert "system_prompt.variable('user_name'" in message


@pytest.mark.anyio
async def test_variable_returning_none_raises_value_error_naming_it() -> None:
    ctx = make_ctx()
    ctx.system_prompt.variable("cwd", lambda agent: None)
    ctx.system_prompt.section("where", "cwd={{cwd}}")
    assembly = await ctx.system_prompt.assemble(None)
    assert assembly.variables == {"cwd": None}
    with pytest.raises(ValueError, match=r"'where'.*'cwd'"):
        ctx.system_prompt.render(assembly)


@pytest.mark.anyio
async def test_agent_scoped_section_shadows_global_for_that_agent_only() -> None:
    ctx = make_ctx(persona=PERSONA_TEXT)
    add_loop_variables(ctx)
    ctx.system_prompt.section("rules", "Be brief.")
    a, b = FakeAgent(ctx, "a"), FakeAgent(ctx, "b")
    a.ctx.system_prompt.section(PERSONA_SECTION, "You are a pirate on {{provider}}.")
    rendered_a = await render_for(ctx, a)
    rendered_b = await render_for(ctx, b)
    # The shadow takes the persona's place; b still sees the deployment persona.
    assert rendered_a == "You are a pirate on scripted.\n\nBe brief."
    assert rendered_b.startswith("You are a helpful assistant")
    assert rendered_b.endswith("Be brief.")


@pytest.mark.anyio
async def test_agent_scoped_variable_shadows_the_global_one() -> None:
    ctx = make_ctx()
    ctx.system_prompt.variable("tone", lambda agent: "neutral")
    ctx.system_prompt.section("tone", "Tone: {{tone}}")
    a, b = FakeAgent(ctx, "a"), FakeAgent(ctx, "b")
    a.ctx.system_prompt.variable("tone", lambda agent: "cheerful")
    assert await render_for(ctx, a) == "Tone: cheerful"
    assert await render_for(ctx, b) == "Tone: neutral"


@pytest.mark.anyio
async def test_disposing_the_agent_scope_removes_its_sections() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("x", "global")
    a = FakeAgent(ctx, "a")
    a.ctx.system_prompt.section("x", "mine")
    assert await render_for(ctx, a) == "mine"
    a.ctx.fiber.dispose()
    assert await render_for(ctx, a) == "global"
    with pytest.raises(InactiveContextError):
        a.ctx.system_prompt.section("y", "too late")


@pytest.mark.anyio
async def test_plugin_section_is_replaced_when_the_named_plugin_is_reapplied() -> None:
    ctx = make_ctx()

    def make_plugin(body: str) -> Any:
        def apply(pctx: Context, config: Any) -> None:
            pctx.system_prompt.section("notes", body)

        return apply

    ctx.plugin(make_plugin("v1"), name="notes")
    ctx.plugin(make_plugin("v2"), name="notes")
    assert await render_for(ctx, None) == "v2"


@pytest.mark.anyio
async def test_latest_registration_wins_and_disposing_it_reveals_the_previous() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("s", "old")
    ctx.system_prompt.section("other", "O")
    dispose_new = ctx.system_prompt.section("s", "new")
    assert await render_for(ctx, None) == "new\n\nO"  # keeps the name's position
    dispose_new()
    assert await render_for(ctx, None) == "old\n\nO"


@pytest.mark.anyio
async def test_assemble_waterfall_listener_can_rewrite_the_assembly() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("base", "base")
    payloads: list[AssemblePayload] = []

    async def add_footer(payload: AssemblePayload, next: Any) -> Assembly:
        payloads.append(payload)
        assembly: Assembly = await next()
        return replace(assembly, sections=(*assembly.sections, Section("footer", "footer", 9)))

    ctx.on("system-prompt/assemble", add_footer)
    agent = FakeAgent(ctx, "a")
    assert await render_for(ctx, agent) == "base\n\nfooter"
    assert payloads[0].agent is agent
    assert [s.name for s in payloads[0].assembly.sections] == ["base"]


@pytest.mark.anyio
async def test_assemble_listener_scoped_to_another_agent_does_not_apply() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("base", "base")
    a, b = FakeAgent(ctx, "a"), FakeAgent(ctx, "b")

    def only_a(payload: AssemblePayload, next: Any) -> Assembly:
        return payload.assembly.replace(sections=(Section("a", "for a only"),))

    a.ctx.on("system-prompt/assemble", only_a)
    assert await render_for(ctx, a) == "for a only"
    assert await render_for(ctx, b) == "base"


@pytest.mark.anyio
async def test_assemble_listener_returning_a_non_assembly_is_a_type_error() -> None:
    ctx = make_ctx()
    ctx.on("system-prompt/assemble", lambda payload, next: "oops")
    with pytest.raises(TypeError, match="return an Assembly"):
        await ctx.system_prompt.assemble(None)


def test_invalid_registrations_are_refused_with_the_name() -> None:
    ctx = make_ctx()
    with pytest.raises(TypeError, match="'s'"):
        ctx.system_prompt.section("s", 42)
    with pytest.raises(ValueError, match="'bad name'"):
        ctx.system_prompt.variable("bad name", lambda agent: "x")


@pytest.mark.anyio
async def test_assemble_with_a_signal_interrupts_a_listener_that_ignores_it() -> None:
    ctx = make_ctx()
    ctx.system_prompt.section("base", "base")
    controller = AbortController()
    entered = asyncio.Event()

    async def stuck(payload: AssemblePayload, next: Any) -> Assembly:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    agent = FakeAgent(ctx, "a")
    agent.ctx.on("system-prompt/assemble", stuck)
    task = asyncio.ensure_future(ctx.system_prompt.assemble(agent, signal=controller.signal))
    await entered.wait()
    controller.abort("stop")
    with pytest.raises(AbortError):
        await task
    other = FakeAgent(ctx, "b")  # nobody listens for b: the collected assembly, signal or not
    assembly = await other.ctx.system_prompt.assemble(other, signal=AbortController().signal)
    assert [s.name for s in assembly.sections] == ["base"]


def test_the_same_section_text_renders_each_request_with_that_requests_values() -> None:
    text = "{{a}}{{ b }} and {{a}}."
    sections = (Section("s", text, 0),)
    first = Assembly(sections=sections, variables={"a": "1", "b": "2"})
    second = Assembly(sections=sections, variables={"a": "x", "b": "{{a}}"})
    assert SystemPrompt.render(first) == "12 and 1."
    # a value is inserted as it is, never scanned for placeholders itself
    assert SystemPrompt.render(second) == "x{{a}} and x."
    with pytest.raises(ValueError, match="variable 'b' has no value"):
        SystemPrompt.render(Assembly(sections=sections, variables={"a": "1", "b": None}))
