"""The view in a REAL kernel (nbclient): per-cell views, the static transcript a saved notebook
keeps, names and providers refused at create, sessions listed without blocking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _kernel_helpers import code_cell, execute

pytestmark = pytest.mark.kernel

CELL_TIMEOUT = 30
WIDGET = "application/vnd.jupyter.widget-view+json"


_cell = code_cell


def _run(workdir: Path, cells: list[Any]) -> list[Any]:
    return execute(workdir, cells, CELL_TIMEOUT)


def _html(cell: Any) -> str:
    return "".join(str(o.get("data", {}).get("text/html", "")) for o in cell.outputs)


def _stream(cell: Any, name: str) -> str:
    return "".join(
        o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == name
    )


def test_agent_cells_show_their_own_turns_and_keep_a_static_transcript(tmp_path: Path) -> None:
    cells = _run(
        tmp_path,
        [
            _cell("""
            %load_ext agentloop_nb
            import asyncio
            from agentloop_nb.testing import ScriptedModel, text
            _ = ctx.llm.register_adapter(
                ["scripted"], ScriptedModel([text("**first** answer"), text("second answer")])
            )
            """),
            _cell("%agent create a --provider scripted --model m"),
            _cell("%%agent a\nfirst prompt"),
            _cell("await asyncio.wait_for(a.when_idle(), 10)"),
            _cell("%%agent a\nsecond prompt"),
            _cell("await asyncio.wait_for(a.when_idle(), 10)"),
            _cell("%agent create print"),
            _cell("%agent create carol --provider opneai --model gpt-4o"),
            _cell("%agent sessions"),
            _cell("""
            from agentloop_nb.jupyter._state import state
            await state().drain()
            print('still', 'here')
            """),
            _cell("""
            import agentloop_nb.jupyter as J
            _ = ctx.llm.register_adapter(["late"], ScriptedModel([text("a *late* answer")]))
            b = J.app().agent_loop.create("b", __import__("agentloop_nb").loop.AgentOptions(
                provider="late", model="m"))
            display(J.AgentView(b))
            b.followup("late prompt")
            await asyncio.wait_for(b.when_idle(), 10)
            """),
        ],
    )
    first, second = cells[2], cells[4]
    for cell in (first, second):
        kinds = [set(o.get("data", {})) for o in cell.outputs]
        assert any(WIDGET in k for k in kinds), kinds
        assert any("text/html" in k and WIDGET not in k for k in kinds), kinds
    # the static copy holds what the cell knew (its prompt), never another cell's turns
    assert "first prompt" in _html(first) and "second prompt" not in _html(first)
    assert "second prompt" in _html(second) and "first prompt" not in _html(second)
    assert "1 earlier turn" in _html(second)
    # a turn that ends while its cell still runs updates the static copy through its handle
    assert "a <em>late</em> answer" in _html(cells[10]) and "late prompt" in _html(cells[10])
    assert "'print'" in _stream(cells[6], "stderr") and "UsageError" in _stream(cells[6], "stderr")
    assert "did you mean 'openai'?" in _stream(cells[7], "stderr")
    # filled in when ready, through its display handle: the saved notebook holds the table
    (listed,) = [o for o in cells[8].outputs if o.output_type == "display_data"]
    assert listed.data["text/plain"].startswith("SESSION") and "a-session-" in _html(cells[8])
    assert _stream(cells[9], "stdout") == "still here\n"  # print was not clobbered


def test_an_agent_cell_marks_the_turns_other_cells_started_between_its_own(
    tmp_path: Path,
) -> None:
    cells = _run(
        tmp_path,
        [
            _cell("""
            %load_ext agentloop_nb
            import asyncio
            from agentloop_nb.testing import ScriptedModel, text
            script = [text("one"), text("two"), text("three")]
            _ = ctx.llm.register_adapter(["scripted"], ScriptedModel(script))
            """),
            _cell("%agent create a --provider scripted --model m"),
            _cell("%%agent a\nfirst prompt"),
            _cell("await asyncio.wait_for(a.when_idle(), 10)"),
            _cell("%%agent a\nsecond prompt"),
            _cell("await asyncio.wait_for(a.when_idle(), 10)"),
            _cell("""
            from agentloop_nb.jupyter._state import state
            first = state().cell_views[a.id][0]
            first.prompt.submit("back in the first cell")  # its follow-up box, as a click
            await asyncio.wait_for(a.when_idle(), 10)
            await first.settled()
            marker = first.session_view.elsewhere_marker(3)
            print(marker.toggle.description)
            print(first.text)
            """),
        ],
    )
    printed = _stream(cells[6], "stdout")
    assert printed.startswith("▸ 1 turn started elsewhere\n"), printed
    lines = printed.splitlines()
    assert lines.index("(1 turn started elsewhere)") < lines.index("[user] back in the first cell")
    assert "second prompt" not in printed
    # the first cell's saved copy, updated through its display handle when turn 3 ended
    saved = _html(cells[2])
    assert "<summary>1 turn started elsewhere</summary>" in saved, saved
    assert saved.index("first prompt") < saved.index("second prompt") < saved.index("back in")


def test_ask_returns_its_turns_answer_in_a_kernel_and_a_failed_turn_raises(tmp_path: Path) -> None:
    cells = _run(
        tmp_path,
        [
            _cell("""
            %load_ext agentloop_nb
            from agentloop_nb import AgentTurnError
            from agentloop_nb.testing import ScriptedModel, error, text
            script = [text("queued answer"), text("the answer"), error("AUTH", "bad key")]
            _ = ctx.llm.register_adapter(["scripted"], ScriptedModel(script))
            """),
            _cell("%agent create k --provider scripted --model m"),
            _cell("""
            k.followup("earlier")
            print("ASKED:", await k.ask("mine", timeout=10))
            """),
            _cell("""
            try:
                await k.ask("fails", timeout=10)
            except AgentTurnError as exc:
                print("REASON:", exc.reason["kind"], exc.reason["code"], exc.reason["message"])
            """),
        ],
    )
    assert _stream(cells[2], "stdout").strip() == "ASKED: the answer"
    assert _stream(cells[3], "stdout").strip() == "REASON: error AUTH bad key"
