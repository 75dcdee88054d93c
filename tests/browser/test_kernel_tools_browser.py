"""``run_python`` approved in a real browser: JupyterLab + the ipywidgets front end + Chromium.

An agent created with ``%agent create a --kernel`` asks to run code; the test clicks the
**Approve** button of the live view (the code is shown highlighted above it), waits until the
call is done, then re-runs the last cell, which uses the variable the approved code created.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

_SETUP = """\
%load_ext agentloop_nb
sales = {"north": 2, "south": 4}
%agent create a --kernel
"""
_ASK = "%%agent a\nrun: total = sum(sales.values())"
_USE = 'print("next cell sees", globals().get("total"))'


def test_approve_button_runs_the_code_and_the_next_cell_uses_its_variable(
    lab_page: Page, jupyter_lab: harness.LabServer
) -> None:
    from playwright.sync_api import expect

    with harness.scratch_dir("kernel-tools") as folder:
        notebook = harness.write_notebook(folder / "approve.ipynb", [_SETUP, _ASK, _USE])
        harness.run_all(lab_page, jupyter_lab, notebook)
        harness.wait_cells_done(lab_page)
        # Nothing ran before the approval.
        expect(harness.cell_output(lab_page, 2)).to_have_text(re.compile(r"next cell sees None"))

        view = harness.cell_output(lab_page, 1)
        approve = view.locator("button.agentloop-approve")
        expect(approve).to_have_count(1, timeout=30_000)
        expect(view).to_contain_text("total = sum(sales.values())")  # the code, shown
        approve.click()
        row = view.locator(".agentloop-pool-row", has_text="run_python")
        expect(row.locator(".agentloop-pool-state")).to_have_text("done", timeout=30_000)

        harness.cell(lab_page, 2).click()
        lab_page.keyboard.press("Shift+Enter")
        expect(harness.cell_output(lab_page, 2)).to_have_text(
            re.compile(r"next cell sees 6"), timeout=30_000
        )
        assert harness.error_outputs(lab_page) == []
