"""The agent view in a real browser: the dark theme's contrast, per-cell views, the inbox panel
and a saved notebook reopened after its kernel is gone.

- The quick start runs in JupyterLab's **dark** theme; the user prompt's text must keep a WCAG
  AA contrast (≥ 4.5:1) against its background, as in the light theme. The agent view alone is
  saved as ``artifacts/screenshots/quickstart-widget-dark.png`` (the README's dark picture).
- A running turn's clock ticks in the browser, with no re-render from the kernel.
- A second ``%%agent`` cell's view does not show the first cell's turn (it sits behind the
  "1 earlier turn" toggle).
- A streaming answer is a padded block whose text keeps its line breaks and wraps.
- A follow-up queued with Ctrl+Enter while the agent talks is listed in the inbox panel,
  edited there, and the agent's inbox holds the edited text.
- After saving and shutting the kernel down, the reopened notebook still shows the
  conversation, not "model not found".
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from pathlib import Path

    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

DARK_SHOT = harness.SCREENSHOTS / "quickstart-widget-dark.png"
AA = 4.5

CELLS = [
    "%load_ext agentloop_nb\nimport asyncio",
    "%agent create bob",
    "%%agent bob\nhello",
    "await asyncio.wait_for(bob.when_idle(), 60)",
    "%%agent bob\nwhat is 6*7",
    "await asyncio.wait_for(bob.when_idle(), 60)",
    "%%agent bob\n" + "x" * 400,
    "await asyncio.wait_for(bob.when_idle(), 60)",
    "%agent create slow --pace 2",
    "%%agent slow\ntell me a story about the sea",
]
SLOW_CELL = len(CELLS) - 1

# Whether an element's content fits its width, and its line height relative to its font size.
FITS_JS = "(el) => el.scrollWidth <= el.clientWidth + 1"
# A streaming text's box: its display, its text's white-space, its left padding, and
# whether the text fits its width.
STREAM_JS = """(el) => {
  const text = el.querySelector('.widget-html-content');
  const s = getComputedStyle(el);
  return [s.display, getComputedStyle(text).whiteSpace, s.paddingLeft,
          el.scrollWidth <= el.clientWidth + 1];
}"""
# A running turn's clock (seconds shown, read from its animated counters), and whether the
# clock element marked by CLOCK_MARK_JS is still on the page (a kernel re-render replaces it)
# and shows at least ``target`` seconds.
CLOCK_JS = """(el) => {
  const s = getComputedStyle(el);
  return Number(s.getPropertyValue('--agentloop-clock-s'))
    + 60 * Number(s.getPropertyValue('--agentloop-clock-m'));
}"""
CLOCK_MARK_JS = "(el) => { el.dataset.agentloopTestClock = '1'; }"
CLOCK_TICKED_JS = """(target) => {
  const el = document.querySelector('[data-agentloop-test-clock]');
  if (!el) throw new Error('the clock was re-rendered by the kernel');
  const s = getComputedStyle(el);
  return Number(s.getPropertyValue('--agentloop-clock-s'))
    + 60 * Number(s.getPropertyValue('--agentloop-clock-m')) >= target;
}"""
LINE_JS = """(el) => {
  const s = getComputedStyle(el);
  return parseFloat(s.lineHeight) / parseFloat(s.fontSize);
}"""


def test_the_quick_start_in_the_dark_theme_keeps_prompts_readable(
    lab_page: Page, jupyter_lab: harness.LabServer, quickstart: Path
) -> None:
    from playwright.sync_api import expect

    jupyter_lab.set_theme(harness.DARK_THEME)
    try:
        harness.run_all(lab_page, jupyter_lab, quickstart)
        expect(lab_page.locator("body[data-jp-theme-light='false']")).to_have_count(1)
        view = lab_page.locator(".jp-Notebook .agentloop-agent").first
        view.wait_for(timeout=60_000)
        harness.wait_cells_done(lab_page, timeout=90_000)
        prompt = view.locator(".agentloop-user").first
        expect(prompt).to_contain_text("hello")
        ratio = harness.contrast(prompt)
        assert ratio >= AA, f"user prompt contrast {ratio:.2f}:1 in the dark theme"
        answer = view.locator(".agentloop-assistant").first
        assert harness.contrast(answer.locator("p").first) >= AA
        box = view.bounding_box()
        height = int(box["height"]) + 400 if box is not None else 2400
        lab_page.set_viewport_size({"width": 1200, "height": max(1000, height)})
        view.scroll_into_view_if_needed()
        harness.SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        view.screenshot(path=str(DARK_SHOT))
    finally:
        jupyter_lab.set_theme(harness.LIGHT_THEME)


def test_cell_views_inbox_editing_and_a_reopened_notebook(
    lab_page: Page, jupyter_lab: harness.LabServer
) -> None:
    from playwright.sync_api import expect

    with harness.scratch_dir("view") as folder:
        notebook = harness.write_notebook(folder / "view.ipynb", CELLS)
        harness.run_all(lab_page, jupyter_lab, notebook)
        harness.wait_cells_done(lab_page, timeout=120_000)
        assert harness.error_outputs(lab_page) == []

        # Light theme: the prompt is readable too.
        first = harness.cell_output(lab_page, 2).locator(".agentloop-agent")
        expect(first.locator(".agentloop-user")).to_contain_text("hello")
        assert harness.contrast(first.locator(".agentloop-user").first) >= AA

        # The second %%agent cell shows its own turn, the first behind a collapsed toggle.
        second = harness.cell_output(lab_page, 4).locator(".agentloop-agent")
        expect(second.locator(".agentloop-turn")).to_have_count(1)
        expect(second.locator(".agentloop-body")).to_contain_text("what is 6*7")
        expect(second.locator(".agentloop-body")).not_to_contain_text("hello")
        toggle = second.locator(".agentloop-earlier-toggle")
        expect(toggle).to_contain_text("1 earlier turn")
        toggle.click()
        expect(second.locator(".agentloop-earlier")).to_contain_text("hello")
        # ... and the first cell's view does not show the second turn.
        expect(first.locator(".agentloop-turn")).to_have_count(1)
        expect(first.locator(".agentloop-body")).not_to_contain_text("6*7")

        # A long word wraps inside its box; answers are not double-spaced.
        long_word = harness.cell_output(lab_page, 6).locator(".agentloop-user").first
        expect(long_word).to_contain_text("x" * 50)
        assert long_word.evaluate(FITS_JS), "a long word overflows its box"
        paragraph = first.locator(".agentloop-assistant p").first
        assert paragraph.evaluate(LINE_JS) < 1.7, "answer lines are double-spaced"

        # Queue a follow-up with Ctrl+Enter while the slow agent talks, then edit it.
        slow = harness.cell_output(lab_page, SLOW_CELL).locator(".agentloop-agent")
        expect(slow.locator(".agentloop-status").first).to_have_text(re.compile(r"^running"))
        # Its clock ticks in the browser: the same element counts on for two seconds, with
        # nothing sent from the kernel to keep it going.
        clock = slow.locator(".agentloop-clock").first
        shown = clock.evaluate(CLOCK_JS)
        clock.evaluate(CLOCK_MARK_JS)
        lab_page.wait_for_function(CLOCK_TICKED_JS, arg=shown + 2)
        # The streaming answer (one widget while it fits in one segment, no wrapper box) is
        # a padded block whose text keeps its line breaks, wraps inside it, single-spaced.
        streaming = slow.locator(".agentloop-streaming").first
        expect(streaming).to_have_text(re.compile(r"\S"))
        assert streaming.evaluate(STREAM_JS) == ["block", "pre-wrap", "6px", True]
        assert streaming.locator(".widget-html-content").first.evaluate(LINE_JS) < 1.7
        box = slow.locator("textarea.agentloop-prompt-input")
        box.fill("queued follow-up")
        box.press("Control+Enter")
        row = slow.locator(".agentloop-inbox-row")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("queued follow-up")
        row.locator("button.agentloop-inbox-edit").click()
        editor = slow.locator(".agentloop-inbox-editor textarea")
        expect(editor).to_have_value("queued follow-up")
        editor.fill("edited follow-up")
        slow.locator("button.agentloop-inbox-save").click()
        expect(row).to_contain_text("edited follow-up")  # re-listed from the agent's inbox
        expect(slow.locator(".agentloop-inbox-row")).to_have_count(1)

        # Save, shut the kernel down, reopen: the conversation is still there.
        harness.save_notebook(lab_page)
        jupyter_lab.delete_sessions()
        harness.open_notebook(lab_page, jupyter_lab, notebook)
        reopened = harness.cell_output(lab_page, 4)
        expect(reopened).to_contain_text("what is 6*7", timeout=30_000)
        expect(harness.cell_output(lab_page, 2)).to_contain_text("hello")
        expect(lab_page.get_by_text("model not found")).to_have_count(0)
