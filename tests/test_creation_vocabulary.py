"""One creation vocabulary on every door: ``options=`` (alias ``agent_options=``),
``session_id=`` (alias ``resume_session_id=`` for resume), ``meta=``, ``setup=``, ``signal=``;
unknown keywords and doubled aliases are clear ``TypeError``s; config-listed agents take every
agent option."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from _loop_helpers import OPTIONS, make_app, reasons, run, scripted
from pydantic import ValidationError

from agentloop_nb import AgentConfig, AgentOptions
from agentloop_nb.agents import AgentHandle, AgentRegistry
from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import text

pytestmark = pytest.mark.anyio

OTHER = AgentOptions(provider="scripted", model="m", max_tokens=7)


async def persisted(root: Path, sid: str = "src") -> App:
    """An App on ``root`` holding one finished session ``sid``."""
    app = make_app(persistence=JsonlPersistence(root))
    scripted(app, text("first answer"), text("second answer"))
    handle = await app.agent_loop.acreate(session_id=sid, options=OPTIONS)
    await run(handle.agent)
    return app


async def test_every_async_door_takes_options_and_the_agent_options_alias(tmp_path: Path) -> None:
    app = await persisted(tmp_path)
    doors: dict[str, Callable[..., Awaitable[AgentHandle]]] = {
        "agent_loop.acreate": app.agent_loop.acreate,
        "agents.create": app.ctx.agents.create,
        "agent_loop.fork": lambda **kw: app.agent_loop.fork("src", **kw),
        "agents.fork": lambda **kw: app.ctx.agents.fork("src", **kw),
    }
    seen: dict[str, tuple[AgentOptions, AgentOptions]] = {}
    for name, door in doors.items():
        got = []
        for keyword in ("options", "agent_options"):
            handle = await door(session_id=f"{name}-{keyword}", **{keyword: OTHER})
            got.append(handle.agent.options)
            await handle.dispose()
        seen[name] = (got[0], got[1])
    assert seen == {name: (OTHER, OTHER) for name in doors}
    await app.aclose()


async def test_resume_takes_session_id_and_the_spec_names_on_both_doors(tmp_path: Path) -> None:
    await (await persisted(tmp_path)).aclose()
    app = make_app(persistence=JsonlPersistence(tmp_path))
    model = scripted(app, text("resumed answer"))
    calls: list[Callable[[], Awaitable[AgentHandle]]] = [
        lambda: app.agent_loop.resume(session_id="src", options=OTHER),
        lambda: app.ctx.agents.resume(session_id="src", agent_options=OTHER),
        lambda: app.ctx.agents.resume(resume_session_id="src", options=OTHER),
        lambda: app.agent_loop.resume(resume_session_id="src", agent_options=OTHER),
    ]
    for call in calls:
        handle = await call()
        assert handle.agent.id == "src" and handle.agent.options == OTHER
        await handle.dispose()
    handle = await app.ctx.agents.resume(session_id="src")
    await run(handle.agent, "again")
    assert reasons(handle.agent) == ["completed", "completed"]
    assert model.requests[0].max_tokens is None  # options default to the log's, not OTHER's
    await app.aclose()


async def test_a_parameter_given_under_both_its_names_is_a_type_error_on_every_door(
    tmp_path: Path,
) -> None:
    app = await persisted(tmp_path)
    both = {"options": OPTIONS, "agent_options": OPTIONS}
    doors: list[tuple[str, Callable[[], Any]]] = [
        ("create", lambda: app.agent_loop.create("x", **both)),
        ("acreate", lambda: app.agent_loop.acreate(session_id="x", **both)),
        ("create", lambda: app.ctx.agents.create(session_id="x", **both)),
        ("resume", lambda: app.agent_loop.resume(session_id="x", **both)),
        ("resume", lambda: app.ctx.agents.resume(session_id="x", **both)),
        ("fork", lambda: app.agent_loop.fork("src", **both)),
        ("fork", lambda: app.ctx.agents.fork("src", **both)),
        ("resume", lambda: app.ctx.agents.resume(session_id="x", resume_session_id="x")),
        ("create", lambda: app.ctx.child(name="p").agent_loop.create("x", **both)),
    ]
    for door, call in doors:
        with pytest.raises(TypeError, match=rf"^{door}\(\) got both \w+= and \w+=.*pass \w+= only"):
            result = call()
            if isinstance(result, Awaitable):
                await result
    assert [a.id for a in app.ctx.agents.list()] == ["src"]  # nothing was published
    await app.aclose()


async def test_an_unknown_keyword_names_what_the_door_accepts_and_the_near_miss() -> None:
    app = make_app()
    with pytest.raises(TypeError, match=r"create\(\) got an unexpected keyword argument 'option'"):
        await app.ctx.agents.create(session_id="s", option=OPTIONS)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"'metadata' \(did you mean meta=\?\); it accepts id="):
        app.agent_loop.create("a", OPTIONS, metadata={})  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"'at' \(did you mean at_seq=\?\).*session_id="):
        await app.agent_loop.fork("s", at=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"'colour'; it accepts session_id=, options=, setup="):
        await app.ctx.agents.resume(session_id="s", colour=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"resume\(\) needs session_id="):
        await app.agent_loop.resume(options=OPTIONS)
    assert app.ctx.agents.list() == [] and app.ctx.sessions.list() == []
    await app.aclose()


async def test_a_custom_factory_gets_the_callers_keywords_and_never_a_bad_one() -> None:
    calls: list[dict[str, Any]] = []

    class Factory:
        async def create(self, **kw: Any) -> AgentHandle:
            calls.append(kw)
            return AgentHandle(object(), lambda: None)

        resume = create

    ctx = Context()
    ctx.provide("agents", AgentRegistry())
    ctx.agents.set_factory(Factory())
    await ctx.agents.create(session_id="s", agent_options=OPTIONS, meta={"k": 1})
    await ctx.agents.create(session_id="t", options=OPTIONS)
    with pytest.raises(TypeError, match="did you mean setup="):
        await ctx.agents.create(session_id="u", setpu=print)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="got both"):
        await ctx.agents.create(session_id="u", options=OPTIONS, agent_options=OPTIONS)
    assert calls == [
        {"session_id": "s", "agent_options": OPTIONS, "meta": {"k": 1}},
        {"session_id": "t", "options": OPTIONS},
    ]
    with pytest.raises(RuntimeError, match="has no fork"):
        await ctx.agents.fork("s")


async def test_a_plugins_async_agent_loop_doors_make_agents_owned_by_its_scope(
    tmp_path: Path,
) -> None:
    app = await persisted(tmp_path)
    disposed: list[str] = []
    app.ctx.on("agent/disposed", lambda p: disposed.append(p.agent.id))
    owner = app.ctx.child(name="plugin")
    made = await owner.agent_loop.acreate(session_id="made", options=OPTIONS)
    forked = await owner.agent_loop.fork("src", session_id="forked")
    early = await owner.agent_loop.acreate(session_id="early", options=OPTIONS)
    await early.dispose()  # disposing first releases the scope's teardown
    await owner.fiber.aclose()
    assert sorted(disposed) == ["early", "forked", "made"]
    assert made.agent.status == "idle" and forked.agent.status == "idle"
    assert app.ctx.agents.get("forked") is None
    assert [a.id for a in app.ctx.agents.list()] == ["src"]  # the root's own agent stays
    await app.aclose()


async def test_the_sync_create_is_the_notebook_convenience_with_the_same_options_names() -> None:
    app = make_app()
    scripted(app, text("hi there"))
    agent = app.agent_loop.create("nb", agent_options=OTHER, meta={"cwd": "/tmp"})
    assert agent.id.startswith("nb-session-") and agent.options == OTHER
    assert agent.session.header.cwd == "/tmp"
    await run(agent)
    assert reasons(agent) == ["completed"]
    await app.aclose()


def test_agent_config_has_every_agent_option_validated_the_same_way() -> None:
    assert set(AgentOptions.model_fields) <= set(AgentConfig.model_fields)
    cfg = AgentConfig(id="a", provider="p", model="m", temperature=0.2, reasoning_effort="low")
    assert cfg.options == AgentOptions(
        provider="p", model="m", temperature=0.2, reasoning_effort="low"
    )
    assert type(cfg.options) is AgentOptions
    with pytest.raises(ValidationError, match="temperature"):
        AgentConfig(id="a", temperature="warm")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="max_tokens"):
        AgentConfig(id="a", max_tokens=0)


async def test_a_config_listed_agent_sends_its_temperature_and_reasoning_effort() -> None:
    app = make_app(
        config={
            "agents": [
                {
                    "id": "tuned",
                    "provider": "scripted",
                    "model": "m",
                    "temperature": 0.25,
                    "reasoning_effort": "high",
                }
            ]
        }
    )
    model = scripted(app, text("ok"))
    (agent,) = app.agent_loop.list()
    await run(agent)
    request = model.requests[0]
    assert (request.temperature, request.reasoning_effort) == (0.25, "high")
    await app.aclose()
