"""Fork: a new agent on a session seeded with another session's surface history up to a seq;
the source never changes; a cut inside a step never splits a tool call from its result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _loop_helpers import OPTIONS, dangling_calls, data, make_app, register, run, scripted

from agentloop_nb.app import App
from agentloop_nb.loop import Agent
from agentloop_nb.messages import AssistantMessage, ToolResultMessage, UserMessage
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


@tool(concurrency_safe=True)
def echo(text: str) -> str:
    """Echo text back."""
    return text


def roles(messages: list[Any]) -> list[str]:
    return [m.role for m in messages]


def seq_of(agent: Agent, type: str, nth: int = 0) -> int:
    return [e.seq for e in agent.session.events if e.type == type][nth]


async def two_turns(app: App) -> Agent:
    """Turn 1: two parallel echo calls then an answer; turn 2: a plain answer."""
    register(app, echo)
    scripted(
        app,
        combine(tool_call("c1", "echo", {"text": "a"}), tool_call("c2", "echo", {"text": "b"})),
        text("both echoed"),
        text("second answer"),
        text("forked answer"),
    )
    handle = await app.ctx.agents.create(session_id="src", agent_options=OPTIONS)
    await run(handle.agent, "first")
    await run(handle.agent, "second")
    return handle.agent


async def test_fork_of_everything_continues_from_the_whole_surface_history() -> None:
    app = make_app()
    source = await two_turns(app)
    handle = await app.ctx.agents.fork("src", session_id="copy")
    fork = handle.agent
    assert fork.session.id == "copy" and fork.options == source.options
    meta = fork.session.header.meta
    last, answer = source.session.events[-1].seq, seq_of(source, "assistant/message", 2)
    assert (meta["forked_from"], meta["at_seq"], meta["cut_seq"]) == ("src", last, answer)
    assert fork.session.derive_messages() == source.session.derive_messages()
    await run(fork, "third")
    assert [d["turn"] for d in data(fork, "turn/start")] == [1]
    assert len(data(source, "turn/start")) == 2  # the source did not move
    await app.aclose()


async def test_fork_at_a_turn_boundary_keeps_only_that_history() -> None:
    app = make_app()
    source = await two_turns(app)
    handle = await app.ctx.agents.fork("src", at_seq=seq_of(source, "turn/end", 0))
    messages = handle.agent.session.derive_messages()
    assert roles(messages) == ["user", "assistant", "tool", "tool", "assistant"]
    assert isinstance(messages[-1], AssistantMessage) and messages[-1].text == "both echoed"
    assert handle.agent.session.id.startswith("src-fork-")
    await app.aclose()


@pytest.mark.parametrize("cut", ["assistant/message", "first tool/result"])
async def test_fork_inside_a_step_with_open_calls_moves_back_before_the_calls(cut: str) -> None:
    app = make_app()
    source = await two_turns(app)
    at = (
        seq_of(source, "assistant/message", 0)
        if cut == "assistant/message"
        else seq_of(source, "tool/result", 0)
    )
    handle = await app.ctx.agents.fork("src", at_seq=at)
    fork = handle.agent
    messages = fork.session.derive_messages()
    assert [type(m) for m in messages] == [UserMessage]  # the step's input stays
    assert fork.session.header.meta["at_seq"] == at
    assert fork.session.header.meta["cut_seq"] == seq_of(source, "user/message", 0)
    await run(fork, "again")
    model_messages = fork.session.derive_messages()
    assert dangling_calls(model_messages) == []
    await app.aclose()


async def test_fork_after_the_last_result_of_a_step_keeps_the_calls_and_results() -> None:
    app = make_app()
    source = await two_turns(app)
    handle = await app.ctx.agents.fork("src", at_seq=seq_of(source, "tool/result", 1))
    messages = handle.agent.session.derive_messages()
    assert roles(messages) == ["user", "assistant", "tool", "tool"]
    assert {m.call_id for m in messages if isinstance(m, ToolResultMessage)} == {"c1", "c2"}
    assert dangling_calls(messages) == []
    await app.aclose()


async def test_fork_at_the_first_event_has_no_history() -> None:
    app = make_app()
    await two_turns(app)
    handle = await app.ctx.agents.fork("src", at_seq=0)
    assert handle.agent.session.derive_messages() == []
    assert handle.agent.session.header.meta["cut_seq"] == -1
    await app.aclose()


@pytest.mark.parametrize("at_seq", [-1, 10_000, "3", True])
async def test_fork_at_a_seq_outside_the_log_is_a_clear_error(at_seq: Any) -> None:
    app = make_app()
    await two_turns(app)
    with pytest.raises(ValueError, match="cannot fork session 'src' at seq"):
        await app.ctx.agents.fork("src", at_seq=at_seq)
    assert [a.id for a in app.ctx.agents.list()] == ["src"]
    await app.aclose()


async def test_fork_of_a_stored_session_leaves_its_file_byte_identical(tmp_path: Path) -> None:
    app = make_app(persistence=JsonlPersistence(tmp_path))
    source = await two_turns(app)
    mid = seq_of(source, "tool/result", 0)
    await app.aclose()
    stored = tmp_path / "src.jsonl"
    before = stored.read_bytes()

    app = make_app(persistence=JsonlPersistence(tmp_path))
    scripted(app, text("from the fork"))
    handle = await app.ctx.agents.fork("src", at_seq=mid, session_id="branch")
    fork = handle.agent
    assert fork.options == OPTIONS  # the stored log's last header
    await run(fork, "go on")
    await app.aclose()
    assert stored.read_bytes() == before
    header, events = JsonlPersistence(tmp_path).load("branch")
    assert header.meta is not None and header.meta["forked_from"] == "src"
    assert [e.type for e in events][:1] == ["user/message"]

    app = make_app(persistence=JsonlPersistence(tmp_path))  # the fork resumes on its own
    scripted(app, text("resumed fork"))
    resumed = await app.ctx.agents.resume(resume_session_id="branch")
    await run(resumed.agent, "more")
    assert data(resumed.agent, "assistant/message")[-1]["message"]["content"][0]["text"] == (
        "resumed fork"
    )
    await app.aclose()
    assert stored.read_bytes() == before


async def test_fork_of_a_live_session_leaves_its_events_unchanged() -> None:
    app = make_app()
    source = await two_turns(app)
    before = [e.to_dict() for e in source.session.events]
    handle = await app.ctx.agents.fork("src", at_seq=seq_of(source, "turn/end", 0))
    await run(handle.agent, "branch")
    assert [e.to_dict() for e in source.session.events] == before
    await app.aclose()


async def test_fork_through_a_plugin_context_is_owned_by_that_scope() -> None:
    app = make_app()
    await two_turns(app)
    handles: list[Any] = []

    async def plugin_body(ctx: Any) -> None:
        handles.append(await ctx.agents.fork("src", session_id="owned"))

    def apply(ctx: Any, _config: Any) -> None:
        ctx.effect(lambda: None)
        handles.append(ctx)

    fiber = app.ctx.plugin(apply, name="forker")
    plugin_ctx = handles.pop()
    await plugin_body(plugin_ctx)
    assert app.ctx.agents.get("owned") is not None
    await fiber.aclose()
    assert app.ctx.agents.get("owned") is None
    await app.aclose()


async def test_fork_of_an_unknown_session_without_persistence_is_a_clear_error() -> None:
    app = make_app()
    with pytest.raises(RuntimeError, match="not configured"):
        await app.ctx.agents.fork("nope")
    await app.aclose()


# -- %agent fork ---------------------------------------------------------------------------


async def test_agent_fork_magic_binds_a_fork_and_leaves_the_source(
    shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    await run(a, "what is 2+3")
    await run(a, "what is 4*5")
    before = [e.to_dict() for e in a.session.events]
    first_end = seq_of(a, "turn/end", 0)
    capsys.readouterr()
    shell.run_line_magic("agent", f"fork a --at {first_end} --name b")
    b = shell.user_ns["b"]
    assert f"forked {a.session.id} at seq {first_end} as b" in capsys.readouterr().out
    assert [m.role for m in b.session.derive_messages()] == ["user", "assistant"]
    await run(b, "what is 1+1")
    assert [e.to_dict() for e in a.session.events] == before
    shell.run_line_magic("agent", "fork a")
    assert shell.user_ns["a_fork"].session.header.meta["at_seq"] == len(before) - 1


@pytest.mark.parametrize(
    ("line", "problem"),
    [("fork a --at 999", "cannot fork session"), ("fork a --name 1x", "Python identifier")],
)
async def test_agent_fork_magic_reports_bad_arguments_in_one_line(
    shell: Any, capsys: pytest.CaptureFixture[str], line: str, problem: str
) -> None:
    shell.run_line_magic("agent", "create a")
    await run(shell.user_ns["a"], "hello")
    capsys.readouterr()
    shell.run_line_magic("agent", line)
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("UsageError: %agent fork:") and problem in err
