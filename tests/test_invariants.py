"""The invariant companion: a request the log cannot reproduce ends the turn."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentloop_nb import AgentOptions, App, UserMessage
from agentloop_nb.messages import TextBlock
from agentloop_nb.plugins.invariants import invariants, rebuild_messages
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


def _tamper_once(app: App, edit: Any) -> Any:
    """An ``llm/stream`` listener (ahead of the checker) that re-sends the loop's next request
    with ``edit(options)`` applied; its re-entry passes through untouched."""
    done: list[bool] = []

    async def listener(payload: Any, next: Any) -> Any:
        if done:
            return await next()
        done.append(True)
        return app.ctx.llm.stream(edit(payload.options))

    return app.ctx.on("llm/stream", listener, prepend=True)


def _end(agent: Any) -> dict[str, Any]:
    return dict([e for e in agent.session.events if e.type == "turn/end"][-1].data["reason"])


@pytest.mark.anyio
async def test_a_request_with_messages_the_log_does_not_hold_ends_the_turn_invariant() -> None:
    app = App(invariants=True)
    forged = UserMessage(id="m-x", content=(TextBlock(text="forged"),))
    _tamper_once(app, lambda o: dataclasses.replace(o, messages=(*o.messages, forged)))
    agent, model = await _run(app, [text("never sent")])
    end = _end(agent)
    assert end["kind"] == "error" and end["code"] == "INVARIANT"
    assert "differ from a rebuild from the log" in end["message"] and model.requests == []
    await app.aclose()


@pytest.mark.anyio
async def test_a_system_prompt_that_drifts_from_the_logged_header_ends_the_turn_invariant() -> None:
    app = App(invariants=True)
    _tamper_once(app, lambda o: dataclasses.replace(o, system="something else"))
    agent, _model = await _run(app, [text("ok")])
    end = _end(agent)
    assert end["code"] == "INVARIANT" and "system prompt" in end["message"]
    await app.aclose()


@pytest.mark.anyio
async def test_a_one_shot_stream_outside_a_turn_is_never_checked() -> None:
    app = App(invariants=True)
    _agent, model = await _run(app, [text("ok"), text("one-shot answer")])
    sent = model.requests[-1]
    stranger = UserMessage(id="m-x", content=(TextBlock(text="not in the log"),))
    one_shot = dataclasses.replace(sent, messages=(stranger,), system="other", signal=None)
    chunks = [c async for c in app.ctx.llm.stream(one_shot)]
    assert chunks[-1].reason.kind == "stop" and len(model.requests) == 2
    await app.aclose()


def _replace_between_steps(app: App, *, compaction: bool) -> None:
    """Before step 2, swap the first surface message for another one: as a
    ``compaction/summary`` replace (whose node is ``data["message"]``) or, without
    ``compaction``, as a plain ``user/message`` replace."""

    async def pre_step(payload: Any, next: Any) -> Any:
        if payload.step == 2:
            session = payload.agent.session
            span = {"op": "replace", "start": 0, "end": 0}
            summary = UserMessage(id="m-s", content=(TextBlock(text="Summary: hi"),))
            node = {"message": summary.model_dump(mode="json")}
            if compaction:
                session.append("compaction/summary", {"summary": "hi", **node}, surface_op=span)
            else:
                session.append("user/message", node, surface_op=span)
        return await next()

    app.ctx.on("agent/pre-step", pre_step)


@pytest.mark.anyio
async def test_a_compaction_replace_between_steps_restarts_the_prefix_check() -> None:
    app = App(invariants=True)
    _replace_between_steps(app, compaction=True)
    agent, model = await _run(app, [tool_call("c1", "echo", {"text": "x"}), text("done")])
    assert _end(agent) == {"kind": "completed"} and len(model.requests) == 2
    assert model.requests[1].messages[0].text == "Summary: hi"
    await app.aclose()


@pytest.mark.anyio
async def test_any_other_replace_between_steps_breaks_the_prefix_and_ends_the_turn() -> None:
    app = App(invariants=True)
    _replace_between_steps(app, compaction=False)
    agent, model = await _run(app, [tool_call("c1", "echo", {"text": "x"}), text("done")])
    end = _end(agent)
    assert end["kind"] == "error" and end["code"] == "INVARIANT"
    assert "strict prefix extension" in end["message"] and len(model.requests) == 1
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
    assert end.data["reason"]["code"] == "INVARIANT"
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
