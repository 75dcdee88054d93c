"""The quick-start notebook in a real browser: JupyterLab + the ipywidgets front end + Chromium.

Runs ``notebooks/01-quickstart.ipynb`` with "Restart Kernel and Run All Cells" and checks what
only a live front end can show (a saved notebook never holds updates made by a background task):

- the assistant's answer grows in the DOM while it streams (several intermediate values);
- the tool pool lists the ``calculate`` call, done;
- the ``%%agent`` cell's view shows only the turn that cell started;
- the controls work: typing a prompt and pressing Ctrl+Enter starts a turn that streams, and
  clicking **Cancel** ends it ``aborted`` with the partial answer marked interrupted.

Screenshots: the ``lab_page`` fixture saves the whole page as
``artifacts/screenshots/<test>-{passed,failed}.png``; this test also saves the agent view alone
as ``artifacts/screenshots/quickstart-widget.png`` (the README's picture is a copy of it in
``docs/img/``).
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from pathlib import Path

    from playwright.sync_api import Locator, Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

WIDGET_SHOT = harness.SCREENSHOTS / "quickstart-widget.png"


def _assert_grows(texts: list[str]) -> None:
    """Each sampled text extends the previous one: streamed words are appended, never replaced."""
    words = [t.split() for t in texts]
    for before, after in itertools.pairwise(words):
        assert len(after) > len(before) and after[: len(before)] == before, texts


def _agent_views(page: Page) -> Locator:
    return page.locator(".jp-Notebook .agentloop-agent")  # the Agents panel shows one too


def test_quickstart_streams_calls_tools_and_cancels_in_the_browser(
    lab_page: Page, jupyter_lab: harness.LabServer, quickstart: Path
) -> None:
    from playwright.sync_api import expect

    harness.run_all(lab_page, jupyter_lab, quickstart)

    # The %%agent cell's view: the greeting streams in word by word (0.05 s per word).
    first_view = _agent_views(lab_page).first
    first_view.wait_for(timeout=60_000)
    first_view.scroll_into_view_if_needed()
    greeting = first_view.locator(".agentloop-turn").first.locator(".agentloop-assistant").first
    # Sample from the first word on (before it, an empty block can read as "" twice).
    expect(greeting).to_have_text(re.compile(r"^Hello!"), timeout=60_000)
    streamed = harness.distinct_texts(greeting, 4, timeout=30_000)
    _assert_grows(streamed)
    assert streamed[-1].startswith("Hello!"), streamed

    harness.wait_cells_done(lab_page, timeout=90_000)
    assert harness.error_outputs(lab_page) == []

    # The %%agent cell's view shows the one turn that cell started; `%agent show` (the last
    # cell) shows every turn: the calculate call (the steered "what is 6*7") sits in its pool,
    # done, and its transcript shows the turn the notebook cancelled.
    expect(first_view.locator(".agentloop-turn")).to_have_count(1)
    expect(first_view.locator(".agentloop-status").first).to_have_text("idle")
    last_view = _agent_views(lab_page).last
    last_view.scroll_into_view_if_needed()
    pool_row = last_view.locator(".agentloop-pool-row", has_text="calculate")
    expect(pool_row).to_have_count(1)
    expect(pool_row.locator(".agentloop-pool-state")).to_have_text("done")
    expect(last_view.locator(".agentloop-turn-end-aborted")).to_have_count(1)
    expect(last_view.locator(".agentloop-status").first).to_have_text("idle")
    turns_before = last_view.locator(".agentloop-turn").count()

    # Drive the last view with its own controls (Ctrl+Enter in the box sends).
    box = last_view.locator("textarea.agentloop-prompt-input")
    box.fill("tell me a long story")
    box.press("Control+Enter")
    expect(last_view.locator(".agentloop-turn")).to_have_count(turns_before + 1)
    new_turn = last_view.locator(".agentloop-turn").last
    answer = new_turn.locator(".agentloop-assistant").first
    expect(answer).to_have_text(re.compile(r"\S"))
    _assert_grows(harness.distinct_texts(answer, 3, timeout=30_000))
    expect(last_view.locator(".agentloop-status").first).to_have_text(re.compile(r"^running"))
    expect(last_view.locator(".agentloop-spinner")).to_have_count(2)  # top and bottom lines
    expect(box).to_have_value("")  # sent, and cleared

    last_view.locator("button.agentloop-cancel").click()
    expect(new_turn.locator(".agentloop-turn-end-aborted")).to_contain_text("aborted")
    expect(new_turn.locator(".agentloop-interrupted")).to_have_count(1)
    expect(last_view.locator(".agentloop-status").first).to_have_text("idle")
    # The %%agent cell's view still shows only its own turn.
    expect(first_view.locator(".agentloop-turn")).to_have_count(1)
    expect(last_view.locator(".agentloop-notice")).to_have_count(0)
    assert re.search(r"\btell me a long story\b", new_turn.inner_text())

    # The view is taller than the notebook panel: grow the window so the element shot is whole.
    bounds = first_view.bounding_box()
    height = int(bounds["height"]) + 400 if bounds is not None else 2400
    lab_page.set_viewport_size({"width": 1200, "height": max(1000, height)})
    first_view.scroll_into_view_if_needed()
    harness.SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    first_view.screenshot(path=str(WIDGET_SHOT))
