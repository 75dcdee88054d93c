"""Magics, plugin cells and the extension, driven in-process through an IPython shell (the
real-kernel behaviour — background tasks, interrupts, restarts — is in test_jupyter_kernel.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

import agentloop_nb.jupyter as J
from agentloop_nb.jupyter._state import state
from agentloop_nb.jupyter.kernel import run_eagerly
from agentloop_nb.testing import HANG, ScriptedModel, text

EXT = "agentloop_nb.jupyter"


def _scripted(sh: InteractiveShell, *script: Any) -> ScriptedModel:
    model = ScriptedModel(script)
    sh.user_ns["ctx"].llm.register_adapter(["scripted"], model)
    return model


def _when_event(sh: InteractiveShell, event_type: str) -> asyncio.Future[None]:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def check(payload: Any) -> None:
        if payload.event.type == event_type and not fut.done():
            fut.set_result(None)

    sh.user_ns["ctx"].on("session/event", check)
    return fut


def _stderr_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "line",
    [
        "",
        "bogus",
        "create",
        "create 1abc",
        "create a --max-tokens x",
        "create a --max-tokens 0",
        "create a --provider openai",
        "steer nobody hello",
        "cancel a --what",
        "resume",
        "resume no-such-session",
        'create "unbalanced',
    ],
)
async def test_bad_arguments_print_one_usage_line_and_no_traceback(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    capsys.readouterr()
    shell.run_line_magic("agent", line)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("UsageError: ")
    assert "Traceback" not in captured.err + captured.out


@pytest.mark.anyio
async def test_help_prints_argparse_help_and_the_magic_has_a_docstring(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "--help")
    out = capsys.readouterr().out
    assert out.startswith("usage: %agent") and "sessions" in out and "resume" in out
    shell.run_line_magic("agent", "create --help")
    assert "--max-tokens N" in capsys.readouterr().out
    doc = shell.find_line_magic("agent").__doc__
    assert "%agent create NAME" in doc and "%%agent NAME" in doc


@pytest.mark.anyio
async def test_create_binds_the_agent_to_name_with_the_offline_demo_default(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    assert (a.options.provider, a.options.model) == ("offline", "demo")
    assert J.app().agent_loop.list() == [a]
    shell.run_line_magic("agent", "create a")
    assert "exists" in _stderr_lines(capsys)[-1]


@pytest.mark.anyio
async def test_cell_magic_queues_the_body_and_returns_while_the_agent_runs(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _scripted(shell, HANG, text("steered answer"))
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    a = shell.user_ns["a"]
    streaming = _when_event(shell, "assistant/chunk")
    shell.run_cell_magic("agent", "a", "tell me\nsomething")
    assert a.status == "running"
    assert "<AgentView" in capsys.readouterr().out
    await streaming
    shell.run_line_magic("agent", 'steer a don\'t stop, "really"')
    shell.run_line_magic("agent", "cancel a --keep-inbox")
    await a.when_idle()
    assert [m.source["kind"] for m in a.inbox.next_step] == ["steer"]
    shell.run_cell_magic("agent", "a", "again")
    await a.when_idle()
    user_texts = [
        m.content[0].text  # type: ignore[union-attr]
        for m in model.requests[-1].messages
        if m.role == "user"
    ]
    assert user_texts == ["tell me\nsomething", 'don\'t stop, "really"', "again"]
    ends = [e.data["reason"]["kind"] for e in a.session.events if e.type == "turn/end"]
    assert ends == ["aborted", "completed"]
    shell.run_line_magic("agent", "cancel a")
    assert "nothing to cancel" in capsys.readouterr().out


@pytest.mark.anyio
async def test_inject_does_not_wake_and_list_shows_agents(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    shell.run_line_magic("agent", "inject a some context")
    assert a.status == "idle" and a.inbox.next_step[0].source["kind"] == "inject"
    capsys.readouterr()
    shell.run_line_magic("agent", "list")
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "TURNS", "MODEL", "SESSION"]
    assert out[1].split()[:4] == ["a", "idle", "0", "offline/demo"]


@pytest.mark.anyio
async def test_plugin_cell_run_twice_registers_its_handlers_once(
    shell: InteractiveShell,
) -> None:
    cell = "seen = []\nmine = ctx\nctx.on('agent/status', lambda p: seen.append(p.status))\n"
    shell.run_cell_magic("plugin", "watch", cell)
    shell.run_cell_magic("plugin", "watch", cell)
    assert shell.user_ns["ctx"] is J.app().ctx  # restored after the cell
    assert shell.user_ns["mine"] is not J.app().ctx
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    a.followup("echo hi")
    await a.when_idle()
    assert shell.user_ns["seen"] == ["running", "idle"]


@pytest.mark.anyio
async def test_plugin_cell_that_raises_leaves_no_half_registered_plugin(
    shell: InteractiveShell,
) -> None:
    shell.user_ns["seen"] = []
    with pytest.raises(ValueError, match="boom"):
        shell.run_cell_magic(
            "plugin",
            "broken",
            "ctx.on('agent/status', lambda p: seen.append(p.status))\nraise ValueError('boom')",
        )
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    a.followup("echo hi")
    await a.when_idle()
    assert shell.user_ns["seen"] == []


@pytest.mark.anyio
async def test_plugin_context_manager_and_decorator_replace_by_name(
    shell: InteractiveShell,
) -> None:
    seen: list[str] = []
    for _ in range(2):
        with J.plugin("cm") as pctx:
            pctx.on("agent/status", lambda p: seen.append("cm:" + p.status))

    for _ in range(2):

        @J.plugin("deco")
        def setup(pctx: Any) -> None:
            pctx.on("agent/status", lambda p: seen.append("deco:" + p.status))

    with pytest.raises(RuntimeError), J.plugin("failing") as pctx:
        pctx.on("agent/status", lambda p: seen.append("failing"))
        raise RuntimeError("no")
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    a.followup("echo hi")
    await a.when_idle()
    assert sorted(seen) == ["cm:idle", "cm:running", "deco:idle", "deco:running"]


@pytest.mark.anyio
async def test_sessions_and_resume_render_history_and_continue(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    a.followup("what is 2+3")
    await a.when_idle()
    sid = a.session.id
    shell.run_line_magic("agent", "dispose a")
    assert "a" not in shell.user_ns
    await state().drain()
    assert J.app().agent_loop.list() == []
    capsys.readouterr()
    shell.run_line_magic("agent", "sessions")
    assert capsys.readouterr().out.splitlines() == ["listing sessions…"]  # returned at once
    await state().drain()
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["SESSION", "CREATED", "LIVE", "AS"]
    assert out[1].startswith(sid) and len(out) == 2
    shell.run_line_magic("agent", f"resume {sid} --name b")
    b = shell.user_ns["b"]
    shown = capsys.readouterr().out
    assert "assistant: 2+3 = 5" in shown  # history rendered, nothing re-run
    assert b.status == "idle"
    b.followup("what is 4*5")
    await b.when_idle()
    headers = [e.data["reason"] for e in b.session.events if e.type == "request/header"]
    assert headers == ["initial", "resume"]
    turns = [e.data["turn"] for e in b.session.events if e.type == "turn/start"]
    assert turns == [1, 2]


@pytest.mark.anyio
async def test_unload_disposes_the_app_and_removes_the_magics(tmp_path: Path) -> None:
    config = Config()
    config.HistoryManager.enabled = False
    sh = InteractiveShell.instance(config=config)
    J.configure(persistence_root=tmp_path)
    try:
        sh.run_line_magic("load_ext", EXT)
        app = J.app()
        _scripted(sh, HANG)
        sh.run_line_magic("agent", "create a --provider scripted --model m")
        a = sh.user_ns["a"]
        a.followup("hang")
        sh.run_line_magic("unload_ext", EXT)
        await J.wait_closed()
        ends = [e.data["reason"]["kind"] for e in a.session.events if e.type == "turn/end"]
        assert ends == ["disposed"]
        assert app.agent_loop.list() == []
        assert sh.find_line_magic("agent") is None
        with pytest.raises(RuntimeError, match="load_ext"):
            J.app()
    finally:
        J.configure()
        sh.user_ns.pop("a", None)


@pytest.mark.anyio
async def test_run_eagerly_finishes_sync_coroutines_and_continues_suspended_ones() -> None:
    async def quick() -> int:
        return 1

    assert run_eagerly(quick()) == (True, 1)
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def slow() -> int:
        return await gate + 1

    done, task = run_eagerly(slow())
    assert not done
    gate.set_result(41)
    assert await task == 42


@pytest.mark.anyio
async def test_agent_view_calls_a_magic_bound_agent_by_its_name_and_keeps_the_id_as_tooltip(
    shell: InteractiveShell,
) -> None:
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    assert a.id.startswith("a-session-")
    view = J.view(a)
    header = view.status.value
    assert f'<span class="agentloop-agent-name" title="{a.id}">a</span>' in header
    assert header.count(a.id) == 1  # only in the tooltip
    assert repr(view).splitlines()[0] == f"<AgentView 'a' idle session={a.id!r}>"
    a.followup("what is 2+3")
    await a.when_idle()
    sid = a.session.id
    shell.run_line_magic("agent", "dispose a")
    await state().drain()
    shell.run_line_magic("agent", f"resume {sid} --name b")
    b = shell.user_ns["b"]
    assert repr(J.view(b)).splitlines()[0] == f"<AgentView 'b' idle session={sid!r}>"
    unnamed = J.AgentView(b)  # built outside the magics: no name to show, so the id
    assert f'<span class="agentloop-agent-id">{sid}</span>' in unnamed.status.value
    assert repr(unnamed).splitlines()[0] == f"<AgentView {sid!r} idle>"
    unnamed.close()


@pytest.mark.anyio
async def test_steer_and_inject_text_ending_in_a_question_mark_is_not_a_help_request(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create a")
    a = shell.user_ns["a"]
    shell.run_cell("%agent inject a is it raining?")
    assert [m.content[0].text for m in a.inbox.next_step] == ["is it raining?"]
    shell.run_cell("x = 1\nif x:\n    %agent steer a what is 6*7?\n")
    await a.when_idle()
    prompts = [
        e.data["message"]["content"][0]["text"]
        for e in a.session.events
        if e.type == "user/message"
    ]
    assert prompts == ["is it raining?", "what is 6*7?"]
    capsys.readouterr()
    shell.run_cell("%agent?")  # asking for the magic's help still works
    assert "%agent steer NAME TEXT" in capsys.readouterr().out
    doc = shell.find_line_magic("agent").__doc__
    assert 'A trailing "?" is kept' in doc
    shell.run_line_magic("unload_ext", EXT)
    try:  # the transformer goes with the extension
        assert "run_line_magic('pinfo'" in shell.transform_cell("%agent steer a why?\n")
    finally:
        shell.run_line_magic("load_ext", EXT)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "name",
    [
        "print",
        "get_ipython",
        "__builtins__",
        "In",
        "Out",
        "exit",
        "__foo__",
        "class",
        "match",
        "len",
        "display",
    ],
)
async def test_create_refuses_a_name_that_would_clobber_the_notebook(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    before = shell.user_ns.get(name, "<unset>")
    capsys.readouterr()
    shell.run_line_magic("agent", f"create {name}")
    lines = _stderr_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith("UsageError: ") and repr(name) in lines[0]
    assert shell.user_ns.get(name, "<unset>") is before
    assert J.app().agent_loop.list() == []


@pytest.mark.anyio
async def test_create_refuses_an_unknown_provider_with_the_known_ones_and_a_close_match(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    shell.run_line_magic("agent", "create carol --provider opneai --model gpt-4o")
    (line,) = _stderr_lines(capsys)
    assert "unknown provider 'opneai' (known: anthropic, " in line
    assert "offline, " in line and "openai" in line
    assert line.endswith("did you mean 'openai'?")
    assert "carol" not in shell.user_ns and J.app().agent_loop.list() == []


@pytest.mark.anyio
async def test_resume_of_a_missing_session_says_it_does_not_exist_and_names_close_ids(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create bob")
    sid = shell.user_ns["bob"].session.id
    await shell.user_ns["bob"].when_idle()
    shell.run_line_magic("agent", "dispose bob")
    await state().drain()
    capsys.readouterr()
    shell.run_line_magic("agent", "resume no-such-session")
    (line,) = _stderr_lines(capsys)
    assert "no session 'no-such-session'" in line and "--name" not in line
    shell.run_line_magic("agent", f"resume {sid[:-1]}x")
    (line,) = _stderr_lines(capsys)
    assert f"did you mean {sid!r}?" in line


@pytest.mark.anyio
async def test_sessions_lists_on_a_worker_thread_and_the_cell_returns_at_once(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    shell.run_line_magic("agent", "create a")
    persistence = J.app().persistence
    assert persistence is not None
    real = persistence.scan  # type: ignore[attr-defined]
    threads: list[threading.Thread] = []
    release = threading.Event()

    def slow_scan() -> Any:
        threads.append(threading.current_thread())
        release.wait(10)  # a slow disk: the kernel's loop must not wait for it
        return real()

    monkeypatch.setattr(persistence, "scan", slow_scan)
    capsys.readouterr()
    shell.run_line_magic("agent", "sessions")
    assert capsys.readouterr().out.strip() == "listing sessions…"
    a = shell.user_ns["a"]
    a.followup("still answering?")  # the loop keeps running agents meanwhile
    await a.when_idle()
    release.set()
    await state().drain()
    assert threads and threads[0] is not threading.main_thread()
    out = capsys.readouterr().out
    assert a.session.id in out and " a" in out.splitlines()[1]


@pytest.mark.anyio
async def test_each_agent_cell_shows_only_the_turns_it_started(
    shell: InteractiveShell,
) -> None:
    _scripted(shell, text("first answer"), text("second answer"))
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    a = shell.user_ns["a"]
    shell.run_cell_magic("agent", "a", "first prompt")
    await a.when_idle()
    shell.run_cell_magic("agent", "a", "second prompt")
    await a.when_idle()
    first, second = state().cell_views[a.id]
    for v in (first, second):
        await v.settled()
    assert "first answer" in first.text and "second prompt" not in first.text
    assert "second answer" in second.text and "first prompt" not in second.text
    assert second.text.startswith("(1 earlier turn)")
    shown = J.view(a)  # %agent show: everything
    assert "first answer" in shown.text and "second answer" in shown.text


@pytest.mark.anyio
async def test_a_disposed_agents_cell_views_stay_on_screen(shell: InteractiveShell) -> None:
    _scripted(shell, text("kept on screen"))
    shell.run_line_magic("agent", "create a --provider scripted --model m")
    a = shell.user_ns["a"]
    shell.run_cell_magic("agent", "a", "hello")
    await a.when_idle()
    (view,) = state().cell_views[a.id]
    shell.run_line_magic("agent", "dispose a")
    await state().drain()
    assert view.comm is not None  # not closed: the output keeps showing the conversation
    assert "kept on screen" in view.session_view.html
    assert a.id not in state().cell_views and a.id not in state().feeds


@pytest.mark.anyio
async def test_create_with_a_pace_streams_the_offline_model_at_that_many_words_per_second(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create slow --pace 40")
    assert "offline@40wps/demo" in capsys.readouterr().out
    slow = shell.user_ns["slow"]
    times: list[float] = []
    J.app().ctx.on(  # each chunk as it streams (the log holds them coalesced)
        "session/chunk",
        lambda p: times.append(time.time()) if p.chunk["type"] == "text-delta" else None,
    )
    slow.followup("one two three four five six seven eight")
    await slow.when_idle()
    assert len(times) >= 8 and times[-1] - times[0] >= 5 / 40  # paced, not at once
    shell.run_line_magic("agent", "create fast --provider openai --model m --pace 3")
    assert "offline provider only" in _stderr_lines(capsys)[-1]
    shell.user_ns.pop("slow", None)


@pytest.mark.anyio
async def test_sessions_lists_an_unreadable_session_as_a_row_saying_why(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_line_magic("agent", "create a")
    persistence = J.app().persistence
    assert persistence is not None
    root = Path(persistence.root)  # type: ignore[attr-defined]
    (root / "broken.jsonl").write_text("this is not a header\n", encoding="utf-8")
    capsys.readouterr()
    shell.run_line_magic("agent", "sessions")
    await state().drain()
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "listing sessions…" and rows[1].split() == [
        "SESSION",
        "CREATED",
        "LIVE",
        "AS",
    ]
    assert rows[2].startswith(shell.user_ns["a"].session.id) and rows[2].endswith(" a")
    assert rows[3].startswith("broken") and "unreadable: bad header:" in rows[3]
