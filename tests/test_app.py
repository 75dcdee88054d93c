"""``App``: composition, configuration (dict, keywords, TOML, YAML), config-listed agents and
``aclose``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _loop_helpers import OPTIONS, make_app, new_agent, reasons, run, scripted
from pydantic import ValidationError

from agentloop_nb.app import App
from agentloop_nb.loop import AgentConfig, AgentLoopConfig
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import HANG, text

pytestmark = pytest.mark.anyio


async def test_the_default_app_provides_the_core_services_and_no_persistence() -> None:
    app = make_app()
    for name in ("sessions", "llm", "tools", "system_prompt", "agents", "agent_loop"):
        assert getattr(app.ctx, name) is not None
    assert app.ctx.agent_loop is app.agent_loop and app.persistence is None
    assert app.ctx.agent_loop.settings.max_parallel_tool_calls == 10
    await app.aclose()


async def test_the_spec_example_runs_end_to_end() -> None:
    from agentloop_nb.testing import ScriptedModel, tool_call
    from agentloop_nb.tools import tool

    @tool
    def echo(text: str) -> str:
        """Echo text back."""
        return text

    app = make_app()
    model = ScriptedModel([tool_call("c1", "echo", {"text": "ping"}), text("done")])
    app.ctx.llm.register_adapter(["scripted"], model)
    app.ctx.tools.register(echo)
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    await run(agent)
    assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "tool"]
    assert model.requests[1].messages[2].content == "ping"
    await app.aclose()


def test_agent_loop_config_validates_and_names_the_field() -> None:
    assert AgentLoopConfig().max_parallel_tool_calls == 10
    assert AgentLoopConfig().agents == []
    with pytest.raises(ValidationError, match="max_parallel_tool_calls"):
        AgentLoopConfig(max_parallel_tool_calls=0)
    with pytest.raises(ValidationError, match="agents"):
        AgentLoopConfig.model_validate({"agents": [{"provider": "x"}]})
    with pytest.raises(ValidationError, match="max_tokens"):
        AgentConfig(id="a", max_tokens=0)
    with pytest.raises(ValidationError, match="surprise"):
        AgentConfig(id="a", surprise=1)  # type: ignore[call-arg]


def test_session_id_and_resume_session_id_are_mutually_exclusive() -> None:
    with pytest.raises(ValidationError, match="mutually exclusive"):
        AgentConfig(id="a", session_id="s", resume_session_id="s")
    AgentConfig(id="a", session_id="s")
    AgentConfig(id="a", resume_session_id="s")


@pytest.mark.parametrize(
    "config",
    [
        {"max_parallel_tool_calls": 0},
        {"agents": [{"id": "a", "max_tokens": -1}]},
        {"unknown_key": 1},
    ],
)
def test_an_invalid_app_config_raises_validation_error(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        App(config)


async def test_config_listed_agents_start_automatically() -> None:
    app = make_app(
        config={
            "max_parallel_tool_calls": 3,
            "agents": [
                {"id": "writer", "provider": "scripted", "model": "m", "max_tokens": 5},
                {"id": "critic"},
            ],
        }
    )
    agents = app.ctx.agent_loop.list()
    assert [a.id.split("-session-")[0] for a in agents] == ["writer", "critic"]
    assert app.ctx.agent_loop.settings.max_parallel_tool_calls == 3
    writer = agents[0]
    assert (writer.options.provider, writer.options.max_tokens) == ("scripted", 5)
    model = scripted(app, text("hello"))
    await run(writer)
    assert reasons(writer) == ["completed"] and model.requests[0].max_tokens == 5
    await app.aclose()


async def test_config_agents_get_a_fresh_session_per_start_without_a_session_id() -> None:
    config = {"agents": [{"id": "bot"}]}
    first, second = make_app(config=config), make_app(config=config)
    assert first.ctx.agent_loop.list()[0].id != second.ctx.agent_loop.list()[0].id
    await first.aclose()
    await second.aclose()


async def test_from_file_reads_toml(tmp_path: Path) -> None:
    path = tmp_path / "app.toml"
    path.write_text(
        'max_parallel_tool_calls = 4\nretry = false\n\n[[agents]]\nid = "bot"\n'
        'provider = "scripted"\nmodel = "m"\n',
        encoding="utf-8",
    )
    app = App.from_file(path)
    assert app.ctx.agent_loop.settings.max_parallel_tool_calls == 4
    (agent,) = app.ctx.agent_loop.list()
    assert agent.options.model == "m" and app.config.retry is False
    await app.aclose()


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
async def test_from_file_reads_yaml(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"app{suffix}"
    path.write_text(
        f"persistence_root: {tmp_path / 'sessions'}\nagents:\n"
        "  - id: bot\n    provider: scripted\n    model: m\n    session_id: fixed\n",
        encoding="utf-8",
    )
    app = App.from_file(path)
    assert isinstance(app.persistence, JsonlPersistence)
    agent = app.ctx.agent_loop.get("fixed")
    assert agent is not None
    scripted(app, text("ok"))
    await run(agent)
    await app.aclose()
    assert (tmp_path / "sessions" / "fixed.jsonl").exists()


def test_from_file_rejects_other_formats_and_invalid_values(tmp_path: Path) -> None:
    bad = tmp_path / "app.json"
    bad.write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="toml"):
        App.from_file(bad)
    wrong = tmp_path / "app.toml"
    wrong.write_text("max_parallel_tool_calls = -2\n", encoding="utf-8")
    with pytest.raises(ValidationError, match="max_parallel_tool_calls"):
        App.from_file(wrong)


async def test_persistence_root_keyword_enables_jsonl_persistence(tmp_path: Path) -> None:
    app = make_app(persistence_root=tmp_path)
    agent, _ = new_agent(app, text("ok"))
    await run(agent)
    await app.aclose()
    header, events = JsonlPersistence(tmp_path).load(agent.id)
    assert header.id == agent.id and [e.type for e in events][-1] == "turn/end"


async def test_aclose_disposes_agents_ends_running_turns_and_is_idempotent() -> None:
    app = make_app()
    agent, _ = new_agent(app, HANG)
    disposed: list[Any] = []
    app.ctx.on("agent/disposed", disposed.append)
    agent.followup("hi")
    await app.aclose()
    await app.aclose()
    assert agent.session.events[-1].data["reason"] == {"kind": "disposed"}
    assert len(disposed) == 1 and app.agent_loop.list() == []
    assert not app.supervisor.tasks


async def test_app_works_as_an_async_context_manager() -> None:
    async with make_app() as app:
        agent, _ = new_agent(app, text("ok"))
        await run(agent)
    assert app.agent_loop.list() == []


async def test_creating_after_aclose_is_refused() -> None:
    app = make_app()
    await app.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        app.agent_loop.create("late", OPTIONS)


@pytest.mark.anyio
async def test_aclose_closes_the_http_adapters_the_app_built() -> None:
    app = App(providers={"openai": {"api_key": "k", "base_url": "http://127.0.0.1:9/v1"}})
    adapter = app.ctx.llm.adapter_for("openai")
    closed: list[str] = []
    original = adapter.aclose

    async def spy() -> None:
        closed.append("openai")
        await original()

    adapter.aclose = spy
    await app.aclose()
    assert closed == ["openai"]


@pytest.mark.parametrize("root", [None, "str", "path"])
async def test_a_plain_app_built_without_validation_holds_what_validation_gives(
    root: str | None, tmp_path: Path
) -> None:
    # What %load_ext builds (``App()`` / ``App(persistence_root=...)``) constructs its own
    # configuration, loop settings and default retry policy instead of validating them (start-up
    # cost): each must equal, value and type, what validating the same input gives.
    from agentloop_nb.app import AppConfig
    from agentloop_nb.llm import RetryPolicy
    from agentloop_nb.loop import LoopSettings
    from agentloop_nb.plugins.retry import RetryConfig

    given: dict[str, Any] = {}
    if root is not None:
        given["persistence_root"] = str(tmp_path) if root == "str" else tmp_path
    app = App(**given)
    try:
        validated = AppConfig.model_validate(
            {"persistence_root": str(tmp_path)} if root is not None else {}
        )
        assert app.config == validated
        assert app.config.model_dump() == validated.model_dump()
        settings = app.ctx.agent_loop.settings
        expected = LoopSettings.model_validate(
            {name: getattr(validated, name) for name in LoopSettings.model_fields}
        )
        assert settings.model_dump() == expected.model_dump()  # (its listeners differ)
        # The constructed settings still validate what a user assigns.
        with pytest.raises(ValidationError):
            settings.max_parallel_tool_calls = 0
        config = RetryConfig()
        assert config.default_policy == RetryPolicy.model_validate(
            config.model_dump(exclude={"providers"})
        )
    finally:
        await app.aclose()
