"""The notebook layer in a REAL kernel of this venv: notebooks built here and executed with
nbclient (plus one raw jupyter_client session for interrupts). Widget state is asserted
kernel-side from later cells (nbclient's saved widget state misses background updates)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _kernel_helpers import code_cell, execute, run_code, running_kernel

import agentloop_nb

pytestmark = pytest.mark.kernel

EXT = "agentloop_nb" if hasattr(agentloop_nb, "load_ipython_extension") else "agentloop_nb.jupyter"
CELL_TIMEOUT = 20


_cell = code_cell


def run_notebook(workdir: Path, cells: list[Any]) -> list[Any]:
    """Execute ``cells`` in a fresh kernel whose cwd is ``workdir``; fail on any unexpected
    cell error (``raises-exception`` tags allow one)."""
    return execute(workdir, cells, CELL_TIMEOUT)


def _text(cell: Any, name: str = "stdout") -> str:
    return "".join(
        o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == name
    )


def test_agent_streams_in_background_and_later_cells_steer_cancel_and_read_widgets(
    tmp_path: Path,
) -> None:
    cells = run_notebook(
        tmp_path,
        [
            _cell(f"""
            %load_ext {EXT}
            import asyncio
            import agentloop_nb.jupyter as J
            from agentloop_nb.testing import HANG, ScriptedModel, text
            gate = asyncio.Event()
            async def gated(options):
                await gate.wait()
                return text("first answer")
            model = ScriptedModel([gated, text("after steering"), HANG])
            _ = ctx.llm.register_adapter(["scripted"], model)
            streamed = asyncio.Event()
            _ = ctx.on("session/event",
                       lambda p: streamed.set() if p.event.type == "assistant/chunk" else None)
        """),
            _cell("%agent create a --provider scripted --model m"),
            _cell("%%agent a\nfirst question"),
            _cell("""
            assert a.status == "running", a.status   # the cell above returned at once
            print("returned while", a.status)
        """),
            _cell("%agent steer a focus on the steering"),
            _cell("""
            gate.set()
            await asyncio.wait_for(a.when_idle(), 10)
            users = [m.content[0].text for m in model.requests[1].messages if m.role == "user"]
            assert users == ["first question", "focus on the steering"], users
            streamed.clear()
        """),
            _cell("%%agent a\nplease hang"),
            _cell("""
            await asyncio.wait_for(streamed.wait(), 10)
            view = J.view(a)
            await view.settled()
            assert a.status == "running"
            assert "agentloop-status-running" in view.status.value
            assert "partial" in view.session_view.turn_htmls[-1]
        """),
            _cell("%agent cancel a"),
            _cell(
                """
            await asyncio.wait_for(a.when_idle(), 10)
            await view.settled()
            last_turn = view.session_view.turn_htmls[-1]
            assert "agentloop-turn-end-aborted" in last_turn and "aborted (user)" in last_turn
            assert "agentloop-status-idle" in view.status.value
            assert "after steering" in view.session_view.turn_htmls[-2]
            print(json.dumps([e.data["reason"]["kind"] for e in a.session.events
                              if e.type == "turn/end"]))
        """.replace("json.dumps", "__import__('json').dumps")
            ),
        ],
    )
    assert "returned while running" in _text(cells[3])
    # The %%agent cell's output is the live view.
    assert any(
        "application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in cells[2].outputs
    )
    assert json.loads(_text(cells[-1])) == ["completed", "aborted"]


def test_plugin_cells_replace_themselves_and_bad_arguments_print_usage(tmp_path: Path) -> None:
    bad = [
        "%agent create",
        "%agent create a --max-tokens x",
        "%agent steer nobody hi",
        "%agent frobnicate",
        "%%plugin\nx = 1",
        "%%agent\nno name",
    ]
    cells = run_notebook(
        tmp_path,
        [
            _cell(f"%load_ext {EXT}\nimport asyncio\nseen = []"),
            _cell('%%plugin watch\n_ = ctx.on("agent/status", lambda p: seen.append(p.status))'),
            _cell('%%plugin watch\n_ = ctx.on("agent/status", lambda p: seen.append(p.status))'),
            _cell(
                '%%plugin broken\n_ = ctx.on("agent/status", lambda p: seen.append("broken"))\n'
                'raise ValueError("boom")',
                "raises-exception",
            ),
            _cell("%agent create a"),
            _cell("""
            a.followup("echo hi")
            await asyncio.wait_for(a.when_idle(), 10)
            assert seen == ["running", "idle"], seen
        """),
            *[_cell(line) for line in bad],
        ],
    )
    errors = [o for o in cells[3].outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ["ValueError"]
    for cell in cells[-len(bad) :]:
        assert [o.output_type for o in cell.outputs] == ["stream"], cell.source
        err = _text(cell, "stderr")
        assert err.startswith("UsageError: ") and err.count("\n") == 1, err
        assert "Traceback" not in err


def test_resume_in_a_second_kernel_continues_the_conversation(tmp_path: Path) -> None:
    first = run_notebook(
        tmp_path,
        [
            _cell(f"%load_ext {EXT}"),
            _cell("%agent create a"),
            _cell("a.followup('what is 2+3')\nawait a.when_idle()\nprint(a.session.id)"),
        ],
    )
    sid = _text(first[2]).strip()
    second = run_notebook(
        tmp_path,
        [
            _cell(f"%load_ext {EXT}\nimport agentloop_nb.jupyter as J"),
            _cell("%agent sessions"),
            _cell(f"%agent resume {sid} --name b"),
            _cell("""
            from agentloop_nb.jupyter._state import state
            await state().drain()  # the listing ran off the event loop; its display is updated
        """),
            _cell("""
            assert b.status == "idle"
            assert "assistant: 2+3 = 5" in J.view(b).text   # history from the log
        """),
            _cell("%%agent b\nwhat is 4*5"),
            _cell("""
            await b.when_idle()
            events = b.session.events
            print([e.data["turn"] for e in events if e.type == "turn/start"],
                  [e.data["reason"] for e in events if e.type == "request/header"])
            print(J.run_sync(b, "echo synced"))
        """),
        ],
    )
    # The saved notebook holds the listing itself (update_display_data), not a placeholder.
    (listed,) = [o for o in second[1].outputs if o.output_type == "display_data"]
    listing = listed.data["text/plain"].splitlines()
    assert listing[0].split() == ["SESSION", "CREATED", "LIVE", "AS"]
    assert listing[1].startswith(sid)
    assert "<pre>SESSION" in listed.data["text/html"]
    shown = [o for o in second[2].outputs if o.output_type == "display_data"]
    assert "assistant: 2+3 = 5" in shown[0].data["text/plain"]
    turns, synced = _text(second[6]).strip().splitlines()
    assert turns == "[1, 2] ['initial', 'resume']"
    assert synced == "synced"


def test_kernel_interrupt_cancels_running_agents_idle_or_busy(tmp_path: Path) -> None:
    with running_kernel(tmp_path) as (km, kc):

        def run(code: str, on_output: Any = None) -> tuple[dict[str, Any], str]:
            return run_code(kc, code, CELL_TIMEOUT, on_output)

        reply, _ = run(f"""
            %load_ext {EXT}
            import asyncio
            from agentloop_nb.testing import HANG, ScriptedModel, text
            model = ScriptedModel([HANG, HANG, text("still alive")])
            _ = ctx.llm.register_adapter(["scripted"], model)
            streamed = asyncio.Event()
            _ = ctx.on("session/event",
                       lambda p: streamed.set() if p.event.type == "assistant/chunk" else None)
            %agent create a --provider scripted --model m
            a.followup("one")
        """)
        assert reply["status"] == "ok", reply
        reply, out = run("await asyncio.wait_for(streamed.wait(), 10)\nprint(a.status)")
        assert out.strip() == "running"

        km.interrupt_kernel()  # the kernel is idle: no cell to interrupt, the agent stops
        reply, out = run("""
            await asyncio.wait_for(a.when_idle(), 10)
            print([dict(e.data["reason"]) for e in a.session.events if e.type == "turn/end"])
        """)
        assert reply["status"] == "ok", reply
        assert out.strip() == "[{'kind': 'aborted', 'cause': FrozenDict({'kind': 'user'})}]"

        sent: list[bool] = []

        def interrupt_once(text_: str) -> None:
            if "waiting" in text_ and not sent:
                sent.append(True)
                km.interrupt_kernel()

        reply, _ = run(
            """
            a.followup("two")
            print("waiting", flush=True)
            await a.when_idle()
        """,
            on_output=interrupt_once,
        )
        assert sent and reply["status"] == "error"  # the busy cell was interrupted...
        reply, out = run("""
            await asyncio.wait_for(a.when_idle(), 10)
            print([e.data["reason"]["kind"] for e in a.session.events if e.type == "turn/end"])
            a.followup("three")
            await asyncio.wait_for(a.when_idle(), 10)
            print(a.session.derive_messages()[-1].content[0].text)
        """)
        assert reply["status"] == "ok", reply
        ends, last = out.strip().splitlines()
        assert ends == "['aborted', 'aborted']"  # ...and so was the agent
        assert last == "still alive"  # the kernel and the agent keep working
