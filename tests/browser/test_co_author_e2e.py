"""The co-author and "Fix with agent" flows end to end, as a person sees them: JupyterLab with
the extension as ``pip`` installs it, the offline model, Chromium.

(a) The agent (``%agent create bob --notebook``) inserts and replaces cells through diffs the
person approves in its view; the new cell's source and output show in the page, Ctrl+Z in the
replaced cell restores the old source, the badge names the agent and survives save + reload.
(b) A cell with a misspelt name shows "Fix with agent"; a click starts the fix turn in the
kernel, its diff approval appears in the agent's view, Approve → the cell is replaced, re-run
and succeeds.

Prompts are queued from a second client on the notebook's kernel (its output stays out of the
page); everything the test checks happens in the page. The bridge's ``insert`` round trips are
timed (kernel request → cell in the page's model → answer) and written to
``artifacts/bench/insert_round_trip.jsonl`` (benchmarks/README.md reports them; no timing is
asserted here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import harness
from .test_notebook_bridge import _driver, _source

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("lab_extension"),
]

# Times every bridge request the agent's tools make (op, ms), in the notebook's kernel.
_TIMING = """
import time as _t_time
_t_timings = []
_t_plain_request = _t_bridge.request
async def _t_timed_request(op, args, **kw):
    start = _t_time.perf_counter()
    try:
        return await _t_plain_request(op, args, **kw)
    finally:
        _t_timings.append((op, start * 1000, (_t_time.perf_counter() - start) * 1000))
_t_bridge.request = _t_timed_request
"""


@pytest.fixture
def notebook_dir() -> Iterator[Path]:
    with harness.scratch_dir("coauthor") as folder:
        yield folder


def _approve(page: Page, tool: str) -> None:
    """Click Approve on the one pending call (of ``tool``) in the agent's view in the notebook
    (the Agents panel shows the same view, so the page holds it twice)."""
    from playwright.sync_api import expect

    notebook = page.locator(".jp-Notebook")
    approval = notebook.locator(".agentloop-approval")
    expect(approval).to_have_count(1, timeout=30_000)
    expect(approval).to_contain_text(tool)
    notebook.locator("button.agentloop-approve").click()
    expect(approval).to_have_count(0, timeout=30_000)


def _badge(page: Page, index: int) -> Locator:
    return harness.cell(page, index).locator(".agentloop-badge")


def test_the_agent_inserts_and_replaces_cells_through_approved_diffs_in_the_page(
    lab_page: Page, jupyter_lab: harness.LabServer, notebook_dir: Path
) -> None:
    from playwright.sync_api import expect

    notebook = harness.write_notebook(
        notebook_dir / "coauthor.ipynb",
        ["%load_ext agentloop_nb\n%agent create bob --notebook", "x = 1", "%agent show bob"],
    )
    for driver in _driver(lab_page, jupyter_lab, notebook):
        driver.run(_TIMING)
        # Insert: the diff is shown for approval, then the cell lands in the page.
        driver.run('bob.followup("insert after 2: print(6 * 7)")')
        expect(lab_page.locator(".jp-Notebook .agentloop-approval")).to_contain_text("insert_cell")
        expect(harness.cell_output(lab_page, 2)).to_contain_text("print(6 * 7)")  # the diff
        _approve(lab_page, "insert_cell")
        expect(_source(lab_page, 2)).to_have_text("print(6 * 7)")
        expect(_badge(lab_page, 2)).to_have_text("bob")

        # Run it: its output shows under it.
        driver.run("await asyncio.wait_for(bob.when_idle(), 30)")
        driver.run('bob.followup("run cell 3")')
        _approve(lab_page, "run_cell")
        expect(harness.cell_output(lab_page, 2)).to_have_text("42")

        # Replace: approved, then Ctrl+Z in the cell brings the user's source back.
        driver.run("await asyncio.wait_for(bob.when_idle(), 30)")
        driver.run('bob.followup("replace 2: x = 2")')
        _approve(lab_page, "replace_cell")
        expect(_source(lab_page, 1)).to_have_text("x = 2")
        expect(_badge(lab_page, 1)).to_have_text("bob")
        _source(lab_page, 1).click()
        lab_page.keyboard.press("Control+z")
        expect(_source(lab_page, 1)).to_have_text("x = 1")
        expect(_badge(lab_page, 1)).to_have_count(0)  # the stamp went with the edit

        timings = json.loads(driver.run("print(json.dumps(_t_timings))").strip().splitlines()[-1])
        # The insert_cell body: its snapshot (the one just before) + the insert itself.
        i = next(i for i, (op, _, _) in enumerate(timings) if op == "insert")
        assert i > 0 and timings[i - 1][0] == "snapshot", timings
        (_, began, _), (_, start, ms) = timings[i - 1], timings[i]
        _record({"insert_ms": ms, "insert_cell_body_ms": start + ms - began, "requests": timings})

        # Saved like a user's edit: after a reload the cell and its badge are still there.
        lab_page.keyboard.press("Escape")
        harness.save_notebook(lab_page)
        saved = json.loads(notebook.read_text(encoding="utf-8"))
        assert "".join(saved["cells"][2]["source"]) == "print(6 * 7)"
        assert saved["cells"][2]["metadata"]["agentloop"]["agent"] == "bob"
        lab_page.reload()
        expect(_source(lab_page, 2)).to_have_text("print(6 * 7)", timeout=60_000)
        expect(_badge(lab_page, 2)).to_have_text("bob")


def test_fix_with_agent_replaces_the_failing_cell_after_approval_and_it_succeeds(
    lab_page: Page, jupyter_lab: harness.LabServer, notebook_dir: Path
) -> None:
    from playwright.sync_api import expect

    notebook = harness.write_notebook(
        notebook_dir / "fix.ipynb",
        [
            "%load_ext agentloop_nb\n%agent create bob --notebook\n%agent show bob",
            "sales = [3, 5, 7]",
            "print(sum(sale))",
        ],
    )
    for driver in _driver(lab_page, jupyter_lab, notebook):
        failing = harness.cell(lab_page, 2)
        expect(failing.locator(".jp-OutputArea")).to_contain_text("NameError")
        button = failing.get_by_role("button", name="Fix with agent")
        button.click()
        # The kernel answers under the button: which agent took it.
        expect(failing.locator(".agentloop-fix-notice")).to_contain_text("bob is fixing")

        # The diff approval appears in bob's view (the first cell's output).
        approval = harness.cell(lab_page, 0).locator(".agentloop-approval")
        expect(approval).to_contain_text("replace_cell", timeout=30_000)
        expect(harness.cell(lab_page, 0)).to_contain_text("print(sum(sales))")
        _approve(lab_page, "replace_cell")
        expect(_source(lab_page, 2)).to_have_text("print(sum(sales))")
        _approve(lab_page, "run_cell")
        expect(harness.cell_output(lab_page, 2)).to_have_text("15")
        # It succeeded: no error output, so no button.
        expect(failing.get_by_role("button", name=re.compile("Fix with agent"))).to_have_count(0)
        driver.run("await asyncio.wait_for(bob.when_idle(), 30)")


def _record(figures: dict[str, object]) -> None:
    out = harness.ARTIFACTS / "bench"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "insert_round_trip.jsonl"  # one line per run
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(figures) + "\n")
