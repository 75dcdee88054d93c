"""Smoke test of the whole browser chain: JupyterLab, the ipywidgets front end, Chromium and
Playwright on this machine, with widget values changed by a background asyncio task."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

_TICKER = """\
import asyncio
import ipywidgets as widgets

slider = widgets.IntSlider(value=0, min=0, max=400, description="ticks")
label = widgets.HTML(value="tick 0")

async def tick():
    # Runs on the kernel's loop after this cell has returned: only a live front end sees it.
    for i in range(1, 401):
        await asyncio.sleep(0.05)
        slider.value = i
        label.value = f"tick {i}"

task = asyncio.get_running_loop().create_task(tick())
widgets.VBox([slider, label])
"""

_STILL_RUNNING = 'print("ticker running:", not task.done())'


def _ticks(texts: list[str]) -> list[int]:
    values = []
    for text in texts:
        match = re.fullmatch(r"tick (\d+)", text.strip())
        assert match, f"unexpected widget text {text!r}"
        values.append(int(match.group(1)))
    return values


def test_widget_updated_by_background_task_changes_live_in_browser(
    lab_page: Page, jupyter_lab: harness.LabServer
) -> None:
    from playwright.sync_api import expect

    with harness.scratch_dir("smoke") as folder:
        notebook = harness.write_notebook(folder / "ticker.ipynb", [_TICKER, _STILL_RUNNING])
        harness.run_all(lab_page, jupyter_lab, notebook)
        harness.wait_cells_done(lab_page)

        # The cell returned while its task kept running.
        expect(harness.cell_output(lab_page, 1)).to_have_text(re.compile(r"ticker running: True"))

        label = harness.cell_output(lab_page, 0).locator(".widget-html-content")
        ticks = _ticks(harness.distinct_texts(label, 5))
        assert ticks == sorted(ticks) and len(set(ticks)) == 5, ticks
        # Intermediate values, not just the start and the end state.
        assert 0 < ticks[1] < ticks[-1] < 400, ticks

        readout = harness.cell_output(lab_page, 0).locator(".widget-readout")
        readouts = [int(t) for t in harness.distinct_texts(readout, 3)]
        assert readouts == sorted(readouts) and len(set(readouts)) == 3, readouts
        assert harness.error_outputs(lab_page) == []
