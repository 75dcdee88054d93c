"""Every text of the agent view meets WCAG AA in JupyterLab Light and Dark (a real browser).

One notebook shows every part of the view at once: answers in Markdown, usage lines and turn
ends, a failed tool call, a request error ending its turn, the "earlier turns" toggle opened,
the inbox with a queued follow-up and a steer, a ``run_python`` call awaiting approval (its
code highlighted, the Approve/Deny buttons, the running status pill), a diff shown under a
second pending approval, the pool table (its short values on one line) and the notice under the controls (the "jump to
latest" button is measured in ``test_transcript_scroll.py``). In both themes every visible text (own text node, or a
text field's value) must reach 4.5:1 against its effective background, computed by the browser
from the colours it applied (alpha composited). The Cancel button of an idle agent is a neutral
button, not the warning colour it has while a turn runs. Screenshots:
``artifacts/screenshots/contrast-<theme>.png``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

AA = 4.5
# How many lines an element's text is laid out on.
LINES_JS = """(el) => {
  const range = document.createRange();
  range.selectNodeContents(el);
  return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
}"""

_DIFF = "--- a/x.py\\n+++ b/x.py\\n@@ -1,2 +1,2 @@\\n-old = 1\\n+new = 2\\n same = 3\\n"
CELLS = [
    "%load_ext agentloop_nb\nimport asyncio, json\n"
    "from agentloop_nb import Ask, tool\n"
    "from agentloop_nb.jupyter.fold import code_html\n"
    "from agentloop_nb.testing import ScriptedModel, error\n"
    'ctx.llm.register_adapter(["scripted"], ScriptedModel([error("AUTH", "the key was refused")]))\n'
    "\n@tool\ndef boom() -> str:\n"
    '    """Always fails."""\n'
    '    raise RuntimeError("boom")\n\n'
    "@tool\ndef patch(diff: str) -> str:\n"
    '    """Apply a diff."""\n'
    '    return "applied"\n\n'
    "async def review(payload, next_):\n"
    '    if payload.name == "patch":\n'
    '        return Ask(reason="review the diff")\n'
    "    return await next_()\n\n"
    "ctx.tools.register(boom); ctx.tools.register(patch)\n"
    'ctx.approval.register_detail("patch", lambda a: code_html(json.loads(a)["diff"], "diff"))\n'
    "None",
    "%agent create bob",
    "%%agent bob\nhello",
    "await asyncio.wait_for(bob.when_idle(), 60)",
    "%%agent bob\nuse boom {}",
    "await asyncio.wait_for(bob.when_idle(), 60)",
    "%agent create err --provider scripted --model m",
    "%%agent err\nhi",
    "await asyncio.wait_for(err.when_idle(), 60)",
    "%agent create k --kernel",
    "%%agent k\nrun:\nimport math\ntotal = sum(range(10))  # a comment\nprint(f'{total} {math.pi:.2f}')",
    'k.followup("a queued follow-up"); k.steer("a steer"); None',
    '%agent create d\nd.ctx.on("tools/pre-execute", review); None',
    "%%agent d\nuse patch {" + f'"diff": "{_DIFF}"' + "}",
]
IDLE_CELL = 4  # bob's second turn: idle, a failed call, an earlier turn
ERROR_CELL = 7
KERNEL_CELL = 10
DIFF_CELL = 13


# Texts the audit must have measured (one from each part of the view).
MUST_MEASURE = (
    "Approve",
    "Deny",
    "Cancel",
    "Send",
    "fork from here",
    "total",  # run_python's code, highlighted
    "+new = 2",  # the diff
    "a queued follow-up",  # the inbox
    "awaiting approval",  # the pool table
    "AUTH",  # a request error
    "type a message first",  # the notice
    "tokens in",  # usage
    "failed",  # a failed call's state
)


def _audit(page: Page, theme: str) -> tuple[list[str], set[str]]:
    from playwright.sync_api import expect

    views = page.locator(".jp-Notebook .agentloop-agent")  # not the Agents panel's copy
    # Lab renders cells lazily: bring each view on screen before measuring it.
    problems: list[str] = []
    seen: set[str] = set()
    for k in range(views.count()):
        view = views.nth(k)
        view.scroll_into_view_if_needed()
        expect(view.locator(".agentloop-status").first).to_be_visible()
        for t in harness.text_contrasts(view):
            seen.update(m for m in MUST_MEASURE if m in t["text"])
            if t["ratio"] < AA:
                problems.append(
                    f"{theme}: {t['ratio']:.2f}:1 {t['tag']}.{t['cls']} {t['text']!r} "
                    f"({t['fg']} on {t['bg']})"
                )
    return problems, seen


def _show_everything(page: Page) -> None:
    from playwright.sync_api import expect

    idle = harness.cell_output(page, IDLE_CELL).locator(".agentloop-agent")
    idle.scroll_into_view_if_needed()
    idle.locator(".agentloop-earlier-toggle").click()
    expect(idle.locator(".agentloop-earlier")).to_contain_text("hello")
    idle.get_by_role("button", name="Send", exact=True).click()
    expect(idle.locator(".agentloop-notice")).to_contain_text("type a message first")


def test_every_text_of_the_view_meets_aa_in_light_and_dark(
    lab_page: Page, jupyter_lab: harness.LabServer
) -> None:
    from playwright.sync_api import expect

    problems: list[str] = []
    with harness.scratch_dir("contrast") as folder:
        notebook = harness.write_notebook(folder / "contrast.ipynb", CELLS)
        try:
            for theme in (harness.LIGHT_THEME, harness.DARK_THEME):
                jupyter_lab.set_theme(theme)
                harness.run_all(lab_page, jupyter_lab, notebook)
                light = "true" if theme == harness.LIGHT_THEME else "false"
                expect(lab_page.locator(f"body[data-jp-theme-light='{light}']")).to_have_count(1)
                harness.wait_cells_done(lab_page, timeout=120_000)
                assert harness.error_outputs(lab_page) == []

                kernel = harness.cell_output(lab_page, KERNEL_CELL)
                expect(kernel.locator("button.agentloop-approve")).to_have_count(1)
                expect(kernel.locator(".agentloop-code")).to_contain_text("total = sum")
                expect(kernel.locator(".agentloop-inbox-row")).to_have_count(2)
                expect(kernel.locator(".agentloop-status-running").first).to_be_visible()
                diff = harness.cell_output(lab_page, DIFF_CELL)
                expect(diff.locator(".agentloop-code-diff .gi").last).to_have_text("+new = 2")
                err = harness.cell_output(lab_page, ERROR_CELL)
                expect(err.locator(".agentloop-error").first).to_contain_text("AUTH")
                _show_everything(lab_page)
                # Short values in the pool table stay on one line.
                state = kernel.locator(".agentloop-pool-state").first
                expect(state).to_have_text("awaiting approval")
                assert state.evaluate(LINES_JS) == 1

                # Idle: Cancel looks like Steer (neutral), not the warning colour.
                idle = harness.cell_output(lab_page, IDLE_CELL).locator(".agentloop-agent")
                cancel = idle.locator("button.agentloop-cancel")
                steer = idle.locator("button.agentloop-steer")
                assert "mod-warning" not in (cancel.get_attribute("class") or "")
                bg = "(el) => getComputedStyle(el).backgroundColor"
                assert cancel.evaluate(bg) == steer.evaluate(bg)
                running = kernel.locator("button.agentloop-cancel")
                assert "mod-warning" in (running.get_attribute("class") or "")

                found, seen = _audit(lab_page, theme)
                problems += found
                assert seen == set(MUST_MEASURE), set(MUST_MEASURE) - seen
                name = "light" if theme == harness.LIGHT_THEME else "dark"
                kernel.scroll_into_view_if_needed()
                harness.screenshot(lab_page, f"contrast-{name}")
                jupyter_lab.delete_sessions()
        finally:
            jupyter_lab.set_theme(harness.LIGHT_THEME)
    assert problems == [], "\n".join(problems)
