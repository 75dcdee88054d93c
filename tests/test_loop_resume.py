"""Resume: history and turn numbering continue, the header reason is ``resume``, crashed logs
are repaired, the inbox is rebuilt, config session ids create-then-resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _loop_helpers import (
    OPTIONS,
    dangling_calls,
    data,
    make_app,
    reasons,
    register,
    run,
    scripted,
    types,
    user_texts,
)

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.session import JsonlPersistence, SessionHeader
from agentloop_nb.testing import text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


@tool
def echo(text: str) -> str:
    """Echo text back."""
    return text


def app_at(root: Path, **kw: Any) -> App:
    return make_app(persistence=JsonlPersistence(root), **kw)


async def first_run(root: Path, *script: Any, content: str = "first", sid: str = "s1") -> None:
    app = app_at(root)
    register(app, echo)
    scripted(app, *script)
    handle = await app.ctx.agents.create(session_id=sid, agent_options=OPTIONS)
    await run(handle.agent, content)
    await app.aclose()


async def test_resume_continues_history_and_turn_numbering_with_a_resume_header(
    tmp_path: Path,
) -> None:
    await first_run(tmp_path, text("first answer"))
    app = app_at(tmp_path)
    model = scripted(app, text("second answer"))
    sources: list[str] = []
    app.ctx.on("agent/session-start", lambda p: sources.append(p.source))
    handle = await app.ctx.agents.resume(resume_session_id="s1")
    agent = handle.agent
    assert (agent.id, agent.options.provider, agent.options.model) == ("s1", "scripted", "m")
    assert sources == ["resume"] and reasons(agent) == ["completed"]
    await run(agent, "second")
    assert [d["turn"] for d in data(agent, "turn/start")] == [1, 2]
    assert [d["reason"] for d in data(agent, "request/header")] == ["initial", "resume"]
    assert [m.role for m in model.requests[0].messages] == ["user", "assistant", "user"]
    await app.aclose()
    _, stored = JsonlPersistence(tmp_path).load("s1")
    assert [e.type for e in stored] == types(agent, chunks=True)


async def test_resume_with_setup_and_explicit_options(tmp_path: Path) -> None:
    await first_run(tmp_path, text("a"))
    app = app_at(tmp_path)
    model = scripted(app, text("b"))

    def setup(ctx: Context) -> None:
        ctx.system_prompt.section("resumed", "welcome back")

    handle = await app.ctx.agents.resume(
        resume_session_id="s1",
        agent_options=OPTIONS.model_copy(update={"max_tokens": 7}),
        setup=setup,
    )
    await run(handle.agent)
    assert "welcome back" in (model.requests[0].system or "")
    assert model.requests[0].max_tokens == 7
    await app.aclose()


async def test_resume_repairs_a_crashed_log_so_the_next_request_has_no_dangling_call(
    tmp_path: Path,
) -> None:
    await first_run(tmp_path, tool_call("c1", "echo", {"text": "x"}), text("done"))
    store = JsonlPersistence(tmp_path)
    header, events = store.load("s1")
    cut = next(i for i, e in enumerate(events) if e.type == "tool/call") + 1
    store.create(SessionHeader("crashed", created_at=header.created_at, cwd=header.cwd))
    store.append("crashed", events[:cut])  # the process died while the tool ran

    app = app_at(tmp_path)
    register(app, echo)
    model = scripted(app, text("recovered"))
    handle = await app.ctx.agents.resume(resume_session_id="crashed")
    agent = handle.agent
    assert types(agent)[-3:] == ["tool/result", "step/end", "turn/end"]
    result = data(agent, "tool/result")[0]
    assert (result["call_id"], result["is_error"]) == ("c1", True)
    assert result["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert reasons(agent) == ["interrupted"]
    await run(agent, "again")
    assert dangling_calls(model.requests[0].messages) == []
    assert [m.role for m in model.requests[0].messages] == ["user", "assistant", "tool", "user"]
    assert [d["turn"] for d in data(agent, "turn/start")] == [1, 2]
    await app.aclose()


async def test_resume_gives_an_undispatched_call_a_synthetic_call_and_result(
    tmp_path: Path,
) -> None:
    await first_run(tmp_path, tool_call("c1", "echo", {"text": "x"}), text("done"))
    store = JsonlPersistence(tmp_path)
    header, events = store.load("s1")
    cut = next(i for i, e in enumerate(events) if e.type == "assistant/message") + 1
    store.create(SessionHeader("early", created_at=header.created_at))
    store.append("early", events[:cut])
    app = app_at(tmp_path)
    model = scripted(app, text("ok"))
    agent = (await app.ctx.agents.resume(resume_session_id="early")).agent
    assert [d["call_id"] for d in data(agent, "tool/call")] == ["c1"]
    await run(agent)
    assert dangling_calls(model.requests[0].messages) == []
    await app.aclose()


async def test_the_inbox_is_rebuilt_from_the_log_and_a_pending_injection_survives(
    tmp_path: Path,
) -> None:
    app = app_at(tmp_path)
    handle = await app.ctx.agents.create(session_id="s1", agent_options=OPTIONS)
    agent = handle.agent
    dropped = agent.inject("drop me")
    agent.inject("remember this")
    agent.send("queued question", wakeup=False)
    agent.inbox.remove(dropped.id)
    await app.aclose()

    app = app_at(tmp_path)
    model = scripted(app, text("a"), text("b"))
    handle = await app.ctx.agents.resume(resume_session_id="s1", agent_options=OPTIONS)
    agent = handle.agent
    assert [m.text for m in agent.inbox.next_step] == ["remember this"]
    assert [m.text for m in agent.inbox.next_turn] == ["queued question"]
    await run(agent, "go")
    assert user_texts(agent, 1) == ["remember this", "queued question"]
    assert user_texts(agent, 2) == ["go"] and len(model.requests) == 2
    await app.aclose()


async def test_resume_of_an_unknown_session_names_it(tmp_path: Path) -> None:
    app = app_at(tmp_path)
    with pytest.raises(Exception, match="nope"):
        await app.ctx.agents.resume(resume_session_id="nope")
    assert app.ctx.agents.list() == []
    await app.aclose()


async def test_resume_of_a_live_session_raises_already_exists(tmp_path: Path) -> None:
    app = app_at(tmp_path)
    handle = await app.ctx.agents.create(session_id="live", agent_options=OPTIONS)
    await handle.agent.session.flush()
    with pytest.raises(ValueError, match="already exists"):
        await app.ctx.agents.resume(resume_session_id="live")
    assert app.ctx.agents.list() == [handle.agent]
    await app.aclose()


async def test_a_config_session_id_is_created_then_resumed_by_a_later_app(
    tmp_path: Path,
) -> None:
    config = {
        "agents": [
            {
                "id": "bot",
                "provider": "scripted",
                "model": "m",
                "session_id": "stable",
                "cwd": "/tmp/work",
            }
        ]
    }
    app = make_app(config=config, persistence_root=tmp_path)
    agent = app.ctx.agent_loop.get("stable")
    assert agent is not None and agent.session.header.cwd == "/tmp/work"
    scripted(app, text("one"))
    await run(agent, "first")
    await app.aclose()

    app = make_app(config=config, persistence_root=tmp_path)
    again = app.ctx.agent_loop.get("stable")
    assert again is not None and again is not agent
    assert reasons(again) == ["completed"]
    model = scripted(app, text("two"))
    await run(again, "second")
    assert [d["turn"] for d in data(again, "turn/start")] == [1, 2]
    assert [m.role for m in model.requests[0].messages] == ["user", "assistant", "user"]
    await app.aclose()


async def test_a_config_resume_session_id_requires_an_existing_session(tmp_path: Path) -> None:
    config = {"agents": [{"id": "bot", "resume_session_id": "missing"}]}
    with pytest.raises(Exception, match="missing"):
        make_app(config=config, persistence_root=tmp_path)


async def test_a_config_resume_session_id_loads_the_persisted_history(tmp_path: Path) -> None:
    await first_run(tmp_path, text("a"), sid="kept")
    config = {
        "agents": [{"id": "bot", "provider": "scripted", "model": "m", "resume_session_id": "kept"}]
    }
    app = make_app(config=config, persistence_root=tmp_path)
    agent = app.ctx.agent_loop.get("kept")
    assert agent is not None and user_texts(agent) == ["first"]
    await app.aclose()
