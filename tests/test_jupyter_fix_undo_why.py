"""Fix with agent, undo of an agent's kernel changes and ``%agent why``, driven in-process
through an IPython shell with the extension loaded (cells run with ``run_cell``, so IPython's
``pre/post_run_cell`` events fire as in a kernel; the real-kernel checks are in
``test_jupyter_kernel_fix.py``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell

import agentloop_nb.jupyter as J
from agentloop_nb.jupyter._state import state
from agentloop_nb.jupyter.kernel import analyse
from agentloop_nb.jupyter.kernel._provenance import Binding, Provenance
from agentloop_nb.llm.offline import OfflineModel
from agentloop_nb.tools import tool

pytestmark = pytest.mark.anyio


def _cell(sh: InteractiveShell, source: str, cell_id: str | None = None) -> Any:
    return sh.run_cell(source, store_history=True, cell_id=cell_id)


def _agent(sh: InteractiveShell, name: str = "a", run: str = "always") -> Any:
    if "quick" not in sh.user_ns["ctx"].llm.providers():
        sh.user_ns["ctx"].llm.register_adapter(["quick"], OfflineModel(token_delay=0))
    sh.run_line_magic("agent", f"create {name} --kernel --run {run} --provider quick --model m")
    return sh.user_ns[name]


async def _ask(agent: Any, prompt: Any) -> None:
    agent.followup(prompt)
    await asyncio.wait_for(agent.when_idle(), 10)


def _calls(agent: Any) -> list[tuple[str, dict[str, Any]]]:
    return [
        (e.data["name"], json.loads(e.data["arguments"]))
        for e in agent.session.events
        if e.type == "tool/call"
    ]


def state_root(shell: InteractiveShell) -> Any:
    """Where the loaded extension keeps its sessions (to reload it with the same root)."""
    return state().app.persistence.root


def _memory() -> Any:
    memory = state().memory
    assert memory is not None
    return memory


# -- the AST analysis --------------------------------------------------------------------------


def test_analysis_finds_bindings_deletions_and_in_place_changes() -> None:
    found = analyse(
        "import numpy as np, os.path\n"
        "a, (b, *c) = 1, (2, 3)\n"
        "d += 1\n"
        "df.drop(columns=['x'], inplace=True)\n"
        "frame['y'] = 5\n"
        "del e, table[1]\n"
        "def g(q=h.pop()):\n    global G\n    local = 1\n"
        "class K: pass\n"
        "[w := i for i in range(3)]\n"
        "if True:\n    u = 1\n"
        "print(len(only_read))\n"
    )
    assert set(found.bound) == {"np", "os", "a", "b", "c", "d", "g", "G", "K", "w", "u"}
    assert set(found.deleted) == {"e"}
    assert set(found.mutated) == {"df", "frame", "table", "h"}
    assert "local" not in found.names and "i" not in found.names
    assert "only_read" not in found.names and "print" not in found.names
    assert found.line_of("u") == "u = 1"
    assert analyse("def broken(:\n").names == set()


def test_provenance_is_bounded_per_name_and_in_names() -> None:
    log = Provenance(per_name=3, max_names=2)
    for i in range(5):
        log.add(Binding(name="x", action="rebound", by="cell", source=f"x = {i}"))
    assert [b.line for b in log.why("x")] == ["x = 4", "x = 3", "x = 2"]
    log.add(Binding(name="y", action="created", by="cell", source="y = 1"))
    log.add(Binding(name="z", action="created", by="cell", source="z = 1"))
    assert log.why("x") == [] and len(log) == 2  # the name bound longest ago went first


# -- autopsies ---------------------------------------------------------------------------------


async def test_autopsy_bounds_frame_locals_masks_secrets_and_keeps_until_the_cell_succeeds(
    shell: InteractiveShell,
) -> None:
    _cell(shell, "SERVICE_TOKEN = 'tok-0123456789'\nbig = list(range(100_000))")
    _cell(
        shell,
        "def work(rows, password='hunter2-secret'):\n"
        "    message = 'using ' + SERVICE_TOKEN\n"
        "    return rows[10**9]\n"
        "work(big)",
        cell_id="cell-a",
    )
    memory = _memory()
    autopsy = memory.autopsy("cell-a")
    assert autopsy is not None and autopsy.cell_id == "cell-a"
    text = autopsy.render(3000)
    assert len(text) <= 3000
    assert text.startswith(f"Error autopsy of cell [{autopsy.execution_count}] (id cell-a)")
    assert "IndexError: list index out of range" in text
    assert "in work: return rows[10**9]" in text
    assert "password = str (secret: value hidden)" in text
    assert "tok-0123456789" not in text and "hunter2-secret" not in text
    assert "using [secret]" in text  # a secret's value inside another local is masked
    assert "interactiveshell.py" not in text  # IPython's own frames are left out
    rows = next(line for line in text.splitlines() if line.strip().startswith("rows = "))
    assert len(rows) < 1000  # a 100,000-item list is summarised, not dumped
    assert memory.autopsy(None) is autopsy  # the last failure
    _cell(shell, "x = 1", cell_id="cell-b")  # another cell succeeding changes nothing
    assert memory.autopsy("cell-a") is autopsy
    _cell(shell, "work = None", cell_id="cell-a")  # the same cell succeeds: forgotten
    assert memory.autopsy("cell-a") is None


async def test_autopsy_shows_the_exception_chain_and_marks_library_frames(
    shell: InteractiveShell,
) -> None:
    _cell(
        shell,
        "import json\n"
        "try:\n    json.loads('{bad')\n"
        "except ValueError as exc:\n    raise RuntimeError('config unreadable') from exc",
        cell_id="chain",
    )
    text = _memory().autopsy("chain").render(6000)
    assert "exception chain (first raised first):" in text
    chain = text.split("exception chain (first raised first):\n", 1)[1].splitlines()
    assert chain[0].strip().startswith("json.decoder.JSONDecodeError: Expecting property name")
    assert chain[1].strip() == "→ raised from it: RuntimeError: config unreadable"
    assert "The above exception was the direct cause" in text
    library = [line for line in text.splitlines() if line.endswith("[library]")]
    assert library and all("json" in line for line in library)
    # Locals are those of the user's frame (the cell), not the json module's.
    assert "locals of the innermost frames in your code" in text
    assert "scan_once" not in text.split("locals of the innermost frames", 1)[1]


async def test_autopsy_names_the_missing_name_key_or_attribute_and_its_closest_match(
    shell: InteractiveShell,
) -> None:
    _cell(shell, "import pandas as pd\nsales = pd.DataFrame({'units': [1, 2]})")
    _cell(shell, "sale.head()", cell_id="n")
    _cell(shell, "sales['unit']", cell_id="k")
    _cell(shell, "sales.hed()", cell_id="at")
    _cell(shell, "{'alpha': 1}['alpa']", cell_id="lit")  # no named mapping: no suggestion
    memory = _memory()
    assert (
        memory.autopsy("n")
        .missing.line()
        .startswith("missing: name 'sale' — not among the live names; closest: 'sales'")
    )
    assert memory.autopsy("k").missing.line() == (
        "missing: key 'unit' — not among the keys of sales; closest: 'units'"
    )
    assert (
        memory.autopsy("at")
        .missing.line()
        .startswith(
            "missing: attribute 'hed' — not among the attributes of DataFrame; closest: 'head'"
        )
    )
    assert memory.autopsy("lit").missing is None


# -- fix ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "broken", "fixed", "total"),
    [
        ("sales = [1, 2, 3]", "total = sum(sale)", "total = sum(sales)", 6),
        ("prices = {'apple': 3}", "total = prices['appel']", "total = prices['apple']", 3),
        (
            "import types\nbox = types.SimpleNamespace(weight=4)",
            "total = box.wieght",
            "total = box.weight",
            4,
        ),
    ],
    ids=["NameError", "KeyError", "AttributeError"],
)
async def test_fix_corrects_a_misspelt_name_key_or_attribute_and_runs_it(
    shell: InteractiveShell, setup: str, broken: str, fixed: str, total: int
) -> None:
    _cell(shell, setup)
    _cell(shell, broken, cell_id="bad")
    a = _agent(shell)
    shell.run_line_magic("agent", "fix a")
    await asyncio.wait_for(a.when_idle(), 10)
    assert _calls(a) == [("run_python", {"code": fixed})]
    first = a.session.derive_messages()[0]
    assert first.content[0].text.startswith("Error autopsy of cell [")
    assert first.content[-1].text.startswith("fix:")
    assert shell.user_ns["total"] == total
    assert a.session.derive_messages()[-1].text == "The result is names: total"


async def test_fix_of_an_unsupported_error_explains_and_proposes_nothing(
    shell: InteractiveShell,
) -> None:
    _cell(shell, "ratio = 1 / 0", cell_id="zero")
    a = _agent(shell)
    shell.run_line_magic("agent", "fix a zero")
    await asyncio.wait_for(a.when_idle(), 10)
    assert _calls(a) == []
    answer = a.session.derive_messages()[-1].text
    assert answer.startswith("The cell failed with ZeroDivisionError: division by zero.")
    assert "I propose nothing" in answer


async def test_fix_uses_replace_cell_then_run_cell_when_the_notebook_tools_are_offered(
    shell: InteractiveShell,
) -> None:
    _cell(shell, "sales = [1, 2]")
    _cell(shell, "print(sum(sale))", cell_id="cell-7")
    a = _agent(shell)
    edits: list[tuple[str, str]] = []

    @tool
    def replace_cell(cell: str, source: str) -> str:
        """Replace a cell's source."""
        edits.append((cell, source))
        return "replaced"

    @tool
    def run_cell(cell: str, timeout: float = 60) -> str:
        """Run a cell."""
        edits.append((cell, "run"))
        return "3"

    a.ctx.tools.register(replace_cell)
    a.ctx.tools.register(run_cell)
    shell.run_line_magic("agent", "fix a")
    await asyncio.wait_for(a.when_idle(), 10)
    assert edits == [("cell-7", "print(sum(sales))"), ("cell-7", "run")]
    assert [name for name, _ in _calls(a)] == ["replace_cell", "run_cell"]


async def test_fix_without_a_failure_or_an_agent_prints_one_usage_line(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    _agent(shell)
    capsys.readouterr()
    shell.run_line_magic("agent", "fix a")
    shell.run_line_magic("agent", "fix nobody")
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("UsageError: %agent fix: no failure is kept for any cell")
    assert err[1].startswith("UsageError: no agent named 'nobody'")


async def test_read_error_returns_the_autopsy_on_demand(shell: InteractiveShell) -> None:
    _cell(shell, "values = [1]\nvalues.apend(2)", cell_id="cell-9")
    a = _agent(shell)
    await _ask(a, 'use read_error {"cell": "cell-9"}')
    await _ask(a, 'use read_error {"cell": "nope"}')
    results = [e.data for e in a.session.events if e.type == "tool/result"]
    assert not results[0]["is_error"]
    assert (
        "missing: attribute 'apend' — not among the attributes of list; closest: 'append'"
        in (results[0]["content"])
    )
    assert results[1]["is_error"] and "no failure is kept for cell 'nope'" in results[1]["content"]


# -- undo --------------------------------------------------------------------------------------


async def test_undo_restores_rebound_removes_created_and_brings_back_deleted_names(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    _cell(shell, "data = [1, 2, 3]\nold = 'keep me'\nnums = [5, 6]")
    a = _agent(shell)
    await _ask(a, "run: data = data[:1]\nfresh = 42\ndel old\nnums.append(7)")
    assert shell.user_ns["data"] == [1] and "old" not in shell.user_ns
    capsys.readouterr()
    shell.run_line_magic("agent", "undo a")
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "undid 1 run(s) of a (run_python offline-2):"
    assert sorted(out[1:]) == [
        "  data: restored",
        "  fresh: removed",
        "  nums: restored",
        "  old: restored",
    ]
    ns = shell.user_ns
    assert ns["data"] == [1, 2, 3] and ns["old"] == "keep me" and ns["nums"] == [5, 6]
    assert "fresh" not in ns
    shell.run_line_magic("agent", "undo a")
    assert capsys.readouterr().out.strip() == (
        "a: nothing to undo (no run of its code is remembered)"
    )


async def test_undo_reports_too_big_and_uncopyable_values_as_not_restorable(
    shell: InteractiveShell,
) -> None:
    root = state_root(shell)
    shell.run_line_magic("unload_ext", "agentloop_nb.jupyter")
    await J.wait_closed()
    J.configure(persistence_root=root, undo_size_limit=1_000_000)
    shell.run_line_magic("load_ext", "agentloop_nb.jupyter")
    assert _memory().size_limit == 1_000_000
    with pytest.raises(ValueError, match="undo_size_limit must be a number of bytes"):
        J.configure(undo_size_limit=-1)
    _cell(shell, "big = bytearray(3_000_000)\nstream = (i for i in range(3))")
    a = _agent(shell)
    await _ask(a, "run: big = b''\nstream = None")
    report = a.undo()
    outcomes = {o.name: str(o) for o in report.outcomes}
    assert outcomes["big"].startswith("big: not restorable (too big to copy (about 2.9 MB")
    assert outcomes["stream"].startswith("stream: not restorable (a generator cannot be copied")
    assert shell.user_ns["big"] == b"" and shell.user_ns["stream"] is None  # left as they were
    result = next(e.data for e in a.session.events if e.type == "tool/result")
    assert set(result["meta"]["not_restorable"]) == {"big", "stream"}


async def test_undo_never_half_restores_a_name_across_runs(shell: InteractiveShell) -> None:
    # blob's state before the first run cannot be copied: undoing both runs must not leave
    # it at the state between them (restored by the newer snapshot only).
    _cell(shell, "blob = bytearray(3_000_000)\nsmall = [1]")
    _memory().size_limit = 1_000_000
    a = _agent(shell)
    await _ask(a, "run: blob = b'first'\nsmall.append(2)")
    await _ask(a, "run: blob = b'second'\nsmall.append(3)")
    report = a.undo(2)
    assert report.outcome("blob") == "not restorable"
    assert shell.user_ns["blob"] == b"second"  # left exactly as it was
    assert report.outcome("small") == "restored" and shell.user_ns["small"] == [1]


async def test_undo_keeps_names_the_user_changed_since_and_undoes_several_calls(
    shell: InteractiveShell,
) -> None:
    _cell(shell, "x = 1\ny = 1")
    a = _agent(shell)
    await _ask(a, "run: x = 2\ny = 2")
    await _ask(a, "run: x = 3")
    _cell(shell, "y = 'mine'")  # the user rebinds y after the agent
    report = J.undo(a, calls=2)
    assert report.outcome("x") == "restored" and shell.user_ns["x"] == 1
    assert report.outcome("y") == "changed since, kept" and shell.user_ns["y"] == "mine"
    with pytest.raises(ValueError, match="calls must be an integer >= 1"):
        a.undo(0)


async def test_undo_button_on_a_finished_run_python_call_in_the_pool_view(
    shell: InteractiveShell,
) -> None:
    from agentloop_nb.jupyter import ToolPoolView

    _cell(shell, "n = 1")
    a = _agent(shell)
    view = ToolPoolView(a, interval=0)
    try:
        await _ask(a, "run: n = 99")
        view.render()
        call_id = next(e.data["call_id"] for e in a.session.events if e.type == "tool/call")
        button = view.action_button(call_id, "Undo")
        assert button is not None and button.description == "Undo run_python"
        button.click()
        assert shell.user_ns["n"] == 1
        assert "n: restored" in view.action_report.value
        view.render()
        assert view.action_button(call_id, "Undo") is None  # nothing left to undo
    finally:
        view.close()


async def test_undo_covers_a_cell_the_agent_ran_with_run_cell(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from agentloop_nb.jupyter import ToolPoolView
    from agentloop_nb.jupyter.notebook import notebook_tools

    _cell(shell, "data = [1, 2, 3]\nold = 'keep me'")
    cells = [nbformat.v4.new_code_cell("data = data[:1]\nfresh = 42\ndel old", id="c-run")]
    path = tmp_path / "work.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))
    state().notebooks.attach(path)
    a = _agent(shell)
    notebook_tools(a, edit="always")
    view = ToolPoolView(a, interval=0)
    try:
        await _ask(a, "run cell 1")
        assert _calls(a) == [("run_cell", {"cell": 1})]
        assert shell.user_ns["data"] == [1] and shell.user_ns["fresh"] == 42
        assert "old" not in shell.user_ns
        view.render()
        call_id = next(e.data["call_id"] for e in a.session.events if e.type == "tool/call")
        button = view.action_button(call_id, "Undo")
        assert button is not None and button.description == "Undo run_cell"
        capsys.readouterr()
        shell.run_line_magic("agent", "undo a")
        out = capsys.readouterr().out
        assert f"undid 1 run(s) of a (run_cell {call_id})" in out
        assert shell.user_ns["data"] == [1, 2, 3] and shell.user_ns["old"] == "keep me"
        assert "fresh" not in shell.user_ns
        view.render()
        assert view.action_button(call_id, "Undo") is None  # nothing left to undo
    finally:
        view.close()


async def test_agent_undo_without_an_undo_service_says_what_to_load() -> None:
    from agentloop_nb import App

    async with App(persistence=None) as app:
        agent = app.agent_loop.create("plain")
        with pytest.raises(RuntimeError, match="needs an 'undo' service"):
            agent.undo()


# -- why ---------------------------------------------------------------------------------------


def test_undo_values_run_outcomes_and_pending_approvals_keep_their_equality_and_repr() -> None:
    from agentloop_nb.jupyter.kernel._memory import UndoReport
    from agentloop_nb.jupyter.kernel._run_code import RunOutcome
    from agentloop_nb.jupyter.kernel._undo import NameOutcome, Snapshot
    from agentloop_nb.jupyter.view import PendingApproval

    held = {"x": object()}
    snap = Snapshot("x = 1", {}, frozenset(), 10, call_id="c1", created=1.0, originals=held)
    assert repr(snap) == (  # the objects held before the run are not shown
        "Snapshot(code='x = 1', names={}, mutated=frozenset(), limit=10, tool='run_python', "
        "call_id='c1', turn=0, agent='', created=1.0, after={}, same=frozenset(), settled=False)"
    )
    assert snap == Snapshot("x = 1", {}, frozenset(), 10, call_id="c1", created=1.0, originals=held)
    assert snap != Snapshot("x = 1", {}, frozenset(), 10, call_id="c1", created=1.0)
    report = UndoReport("a", [NameOutcome("x", "restored")], [snap])
    assert repr(report) == str(report) == "undid 1 run(s) of a (run_python c1):\n  x: restored"
    assert report == UndoReport("a", [NameOutcome("x", "restored")], [snap])
    out = RunOutcome("hi\n", value="1")
    assert out == RunOutcome("hi\n", value="1") and out != RunOutcome("hi\n")
    assert repr(out) == (
        "RunOutcome(stdout='hi\\n', stderr='', value='1', names=[], images=[], displays=[], "
        "error=None, ename=None, evalue=None, interrupted=False)"
    )
    for value in (snap, report, out):
        with pytest.raises(TypeError, match="unhashable"):
            hash(value)
    loop = asyncio.new_event_loop()
    try:
        future: asyncio.Future[Any] = loop.create_future()
        pending = PendingApproval("c1", "run_python", "{}", None, "a", future)
        twin = PendingApproval("c1", "run_python", "{}", None, "a", future)
        assert pending != twin and pending == pending and {pending: 1}[pending] == 1  # identity
        assert repr(pending) == (  # without its future
            "PendingApproval(call_id='c1', name='run_python', arguments='{}', reason=None, "
            "agent='a')"
        )
    finally:
        loop.close()


async def test_why_lists_cell_and_agent_bindings_newest_first_with_secrets_hidden(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    _cell(shell, "DB_PASSWORD = 'pw-very-secret'\nconn = 'db://' + DB_PASSWORD", cell_id="c1")
    _cell(shell, "dsn = 'postgres://me:pw-very-secret@db'")
    first = _cell(shell, "df = [3, 1, 2]", cell_id="c2").execution_count
    a = _agent(shell)
    await _ask(a, "run: df = sorted(df)")
    capsys.readouterr()
    shell.run_line_magic("agent", "why df")
    shell.run_line_magic("agent", "why DB_PASSWORD")
    shell.run_line_magic("agent", "why")
    shell.run_line_magic("agent", "why dsn")
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "df: rebound by agent a, turn 1, call offline-2: `df = sorted(df)`; "
        f"created by cell [{first}] (id c2): `df = [3, 1, 2]`"
    )
    assert out.splitlines()[1].startswith("DB_PASSWORD: created by cell [")
    assert "(line hidden: the name looks like a secret)" in out.splitlines()[1]
    assert out.splitlines()[2:4] == [
        "names agents changed (newest first):",
        "  df: rebound by agent a, turn 1, call offline-2: `df = sorted(df)`",
    ]
    assert out.splitlines()[4].endswith("`dsn = 'postgres://me:[secret]@db'`")
    assert "pw-very-secret" not in out
    await _ask(a, "inspect df")
    inspected = [e.data for e in a.session.events if e.type == "tool/result"][-1]["content"]
    assert inspected.endswith(
        "origin: rebound by agent a, turn 1, call offline-2: `df = sorted(df)`"
    )
