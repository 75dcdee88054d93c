"""The invariant companion: a request the log cannot reproduce ends the turn."""

from __future__ import annotations

import dataclasses

import pytest

from agentloop_nb import AgentOptions, App, UserMessage
from agentloop_nb.messages import TextBlock
from agentloop_nb.plugins.invariants import InvariantError, invariants, rebuild_messages
from agentloop_nb.testing import ScriptedModel, text, tool_call
from agentloop_nb.tools import tool


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


async def _run(app: App, script: list) -> tuple:
    model = ScriptedModel(script)
    app.ctx.llm.register_adapter(["scripted"], model)
    app.ctx.tools.register(echo)
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="scripted", model="m"))
    agent.followup("hi")
    await agent.when_idle()
    return agent, model


@pytest.mark.anyio
async def test_rebuild_from_log_matches_every_request_of_a_tool_turn() -> None:
    app = App(invariants=True)
    agent, model = await _run(app, [tool_call("c1", "echo", {"text": "x"}), text("done")])
    ends = [e.data["reason"]["kind"] for e in agent.session.events if e.type == "turn/end"]
    assert ends == ["completed"]
    assert rebuild_messages(agent.session) == agent.session.derive_messages()
    assert len(model.requests) == 2
    await app.aclose()


@pytest.mark.anyio
async def test_a_request_with_messages_the_log_does_not_hold_raises_invariant_error() -> None:
    app = App(invariants=True)
    _agent, model = await _run(app, [text("ok")])
    sent = model.requests[-1]
    forged = dataclasses.replace(
        sent,
        messages=(*sent.messages, UserMessage(id="m-x", content=(TextBlock(text="forged"),))),
        signal=None,
    )
    checker_stream = app.ctx.llm.stream(forged)
    with pytest.raises(InvariantError, match="differ from a rebuild from the log"):
        async for _ in checker_stream:
            pass
    await app.aclose()


@pytest.mark.anyio
async def test_a_system_prompt_that_drifts_from_the_logged_header_raises() -> None:
    app = App(invariants=True)
    agent, model = await _run(app, [text("ok")])
    forged = dataclasses.replace(
        model.requests[-1],
        messages=tuple(rebuild_messages(agent.session)),
        system="something else",
        signal=None,
    )
    with pytest.raises(InvariantError, match="system prompt"):
        async for _ in app.ctx.llm.stream(forged):
            pass
    await app.aclose()


@pytest.mark.anyio
async def test_an_agent_request_listener_that_edits_history_ends_the_turn_error() -> None:
    """A plugin that sends something the log cannot reproduce fails loudly: the turn ends
    `error` naming the invariant, and the next send still works."""
    app = App(invariants=True)
    model = ScriptedModel([text("first"), text("second")])
    app.ctx.llm.register_adapter(["scripted"], model)

    extra = UserMessage(id="m-t", content=(TextBlock(text="tampered"),))

    async def tamper(payload, next):
        options = payload.options
        if options.messages[-1] == extra:  # the forged request, re-entering the chain
            return await next()
        # send a request carrying a message the log never saw
        return app.ctx.llm.stream(dataclasses.replace(options, messages=(*options.messages, extra)))

    disposer = app.ctx.on("llm/stream", tamper, prepend=True)
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="scripted", model="m"))
    agent.followup("hi")
    await agent.when_idle()
    end = [e for e in agent.session.events if e.type == "turn/end"][-1]
    assert end.data["reason"]["kind"] == "error"
    assert "rebuild from the log" in end.data["reason"]["message"]
    disposer()
    agent.followup("again")
    await agent.when_idle()
    end = [e for e in agent.session.events if e.type == "turn/end"][-1]
    assert end.data["reason"]["kind"] == "completed"
    await app.aclose()


def test_invariants_is_a_named_plugin_so_loading_it_twice_replaces_it() -> None:
    app = App()
    first = app.ctx.plugin(invariants)
    second = app.ctx.plugin(invariants)
    assert not first.active and second.active
