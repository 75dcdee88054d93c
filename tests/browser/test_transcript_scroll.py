"""The transcript scrolls in a real browser instead of squeezing its turns.

A 12-turn conversation (the last turn with a failed tool call and an answer) outgrows the
transcript's scroll box. Every turn keeps its natural height, and every line of every turn can
be scrolled into view and is then visible (no ancestor clips it). The box is pinned to the
newest content while the reader has not scrolled up; once they have, new turns do not move
what they read, a "jump to latest" button shows, and clicking it brings the newest back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

_LINES = "\\n\\n".join(f"paragraph {k} of this turn" for k in range(5))
CELLS = [
    "%load_ext agentloop_nb\nimport asyncio",
    "from agentloop_nb import tool\n\n"
    "@tool\ndef boom() -> str:\n"
    '    """Always fails."""\n'
    '    raise RuntimeError("boom: the last turn fails here")\n\n'
    "ctx.tools.register(boom)",
    "%agent create bob",
    "for i in range(11):\n"
    f'    bob.followup(f"echo turn {{i}} starts\\n\\n{_LINES}\\n\\nturn {{i}} ends")\n'
    'bob.followup("use boom {}")\n'
    "await asyncio.wait_for(bob.when_idle(), 60)",
    "%agent show bob",
]
VIEW_CELL = len(CELLS) - 1

# For each turn box: whether it is squeezed (content taller than the box), and every text leaf
# that, once scrolled into view, is still cut by an ancestor that clips (overflow not visible),
# up to the notebook's own scroller.
CLIPPED_JS = """(view) => [...view.querySelectorAll('.agentloop-turn')].map((turn) => {
  const squeezed = turn.scrollHeight > turn.clientHeight + 1;
  const hidden = [];
  const leaves = [...turn.querySelectorAll('*')].filter(
    (e) => e.children.length === 0 && e.textContent.trim() && !e.closest('button'));
  for (const leaf of leaves) {
    leaf.scrollIntoView({ block: 'nearest', behavior: 'instant' });
    const r = leaf.getBoundingClientRect();
    for (let a = leaf.parentElement; a && !a.classList.contains('jp-Notebook'); a = a.parentElement) {
      const s = getComputedStyle(a);
      if (s.overflowY === 'visible' && s.overflowX === 'visible') continue;
      const c = a.getBoundingClientRect();
      if (r.top < c.top - 1 || r.bottom > c.bottom + 1) {
        hidden.push(leaf.textContent.trim().slice(0, 40) + ' <- ' + a.className);
        break;
      }
    }
  }
  return { squeezed, hidden, last: leaves.length ? leaves[leaves.length - 1].textContent : '' };
})"""

# Where the box is scrolled: 0 at the newest content (bottom-up box), negative above it.
SCROLL_TOP_JS = "(box) => box.scrollTop"
SCROLL_UP_JS = "(box) => { box.scrollTop = -(box.scrollHeight - box.clientHeight); }"
# The text of the first body line visible at the box's top edge, and its offset from it.
TOP_LINE_JS = """(box) => {
  const top = box.getBoundingClientRect().top;
  const lines = [...box.querySelectorAll('.agentloop-body p, .agentloop-body .agentloop-item')];
  const first = lines.find((e) => e.getBoundingClientRect().bottom > top + 2);
  return first ? [first.textContent.trim().slice(0, 60), first.getBoundingClientRect().top - top] : null;
}"""
# Whether the newest turn's end line is inside the box's visible area.
NEWEST_VISIBLE_JS = """(box) => {
  const ends = box.querySelectorAll('.agentloop-turn-end');
  if (!ends.length) return false;
  const r = ends[ends.length - 1].getBoundingClientRect(), c = box.getBoundingClientRect();
  return r.top >= c.top - 1 && r.bottom <= c.bottom + 1;
}"""


def _turn_ends(view: Locator) -> Locator:
    return view.locator(".agentloop-turn-end")


def test_a_long_transcript_scrolls_and_every_turn_stays_whole(
    lab_page: Page, jupyter_lab: harness.LabServer
) -> None:
    from playwright.sync_api import expect

    with harness.scratch_dir("scroll") as folder:
        notebook = harness.write_notebook(folder / "scroll.ipynb", CELLS)
        harness.run_all(lab_page, jupyter_lab, notebook)
        harness.wait_cells_done(lab_page, timeout=120_000)
        assert harness.error_outputs(lab_page) == []
        view = harness.cell_output(lab_page, VIEW_CELL).locator(".agentloop-agent")
        expect(view.locator(".agentloop-turn")).to_have_count(12, timeout=30_000)
        expect(_turn_ends(view)).to_have_count(12)
        box = view.locator(".agentloop-scroll").first
        view.scroll_into_view_if_needed()

        # The transcript outgrew its box: it scrolls, pinned to the newest turn.
        assert box.evaluate("(b) => b.scrollHeight > b.clientHeight + 100")
        assert box.evaluate(NEWEST_VISIBLE_JS), "the newest turn's end is not in view"
        jump = box.locator("button.agentloop-jump")
        expect(jump).to_be_hidden()

        turns = view.locator(".agentloop-body").first.evaluate(CLIPPED_JS)
        assert len(turns) == 12
        assert [t["squeezed"] for t in turns] == [False] * 12, turns
        assert [t["hidden"] for t in turns] == [[]] * 12, turns
        assert all(t["last"].startswith("turn ") for t in turns), turns
        last = view.locator(".agentloop-turn").last
        expect(last.locator(".agentloop-tool-failed")).to_contain_text("boom")
        expect(last.locator(".agentloop-assistant")).to_contain_text("boom")

        # The reader scrolls up: new turns neither move what they read nor pull them down.
        box.evaluate(SCROLL_UP_JS)
        expect(jump).to_be_visible()
        assert harness.contrast(jump) >= 4.5
        before = box.evaluate(TOP_LINE_JS)
        assert before is not None and before[0].startswith("turn 1")
        prompt = view.locator("textarea.agentloop-prompt-input")
        prompt.fill("hello")
        prompt.press("Control+Enter")
        expect(_turn_ends(view)).to_have_count(13, timeout=30_000)
        prompt.fill("echo one more")
        prompt.press("Control+Enter")
        expect(_turn_ends(view)).to_have_count(14, timeout=30_000)
        after = box.evaluate(TOP_LINE_JS)
        assert after is not None and after[0] == before[0], (before, after)
        assert abs(after[1] - before[1]) <= 2, (before, after)
        assert not box.evaluate(NEWEST_VISIBLE_JS)
        harness.screenshot(lab_page, "transcript-scrolled-up")

        # "Jump to latest" brings the newest turn back, and the box follows again.
        jump.click()
        assert box.evaluate(SCROLL_TOP_JS) == 0
        assert box.evaluate(NEWEST_VISIBLE_JS)
        expect(jump).to_be_hidden()
        prompt.fill("echo and the last one")
        prompt.press("Control+Enter")
        expect(_turn_ends(view)).to_have_count(15, timeout=30_000)
        expect(view.locator(".agentloop-turn").last).to_contain_text("and the last one")
        assert box.evaluate(NEWEST_VISIBLE_JS), "the box stopped following the newest turn"
