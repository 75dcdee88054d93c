"""The Agents side panel end to end: the ``agentloop-nb`` JupyterLab extension (as ``pip``
installs it) in Chromium, and the kernel's ``AgentsPanel`` behind ``%load_ext agentloop_nb``.

- Open the panel with its shortcut, create an agent with its button, send a prompt with Enter
  and watch the answer stream in the panel's live view and land in the kernel's session log;
  approve a tool call from the panel's view; cancel a turn with Escape; ask about a selected
  line (context menu) and find the reference in the logged prompt. The picture of the panel in
  the light theme is saved as ``artifacts/screenshots/agents-panel-light.png``.
- Two notebooks on two kernels: the panel follows the notebook in focus; a kernel restart
  empties it, a resumed agent comes back; after a page reload the panel is back with the live
  view. Dark theme: ``artifacts/screenshots/agents-panel-dark.png``.

The session log is read through a second client on the notebook's kernel (its code shares the
notebook's namespace, its output stays out of the page).
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("lab_extension"),
]

LIGHT_SHOT = harness.SCREENSHOTS / "agents-panel-light.png"
DARK_SHOT = harness.SCREENSHOTS / "agents-panel-dark.png"

# Kernel-side reader of an agent's log: its user prompts (text blocks) and turn ends.
_READER = """
import json as _t_json
def _t_log(name):
    agent = get_ipython().user_ns[name]
    prompts, ends, answers = [], [], []
    for e in agent.session.events:
        if e.type == "user/message":
            c = e.data["message"]["content"]
            prompts.append([c] if isinstance(c, str) else [b["text"] for b in c])
        elif e.type == "turn/end":
            ends.append(dict(e.data["reason"]))
        elif e.type == "assistant/message":
            answers.append("".join(b.get("text", "") for b in e.data["message"]["content"]))
    print(_t_json.dumps({"prompts": prompts, "ends": ends, "answers": answers, "status": agent.status}))
"""


class Kernel(harness.KernelRunner):
    """Reads the notebook's agents through a second client on its kernel."""

    def log(self, name: str) -> dict[str, Any]:
        self.run(_READER)
        return dict(self.last_json(f"_t_log({name!r})"))

    def idle(self, name: str) -> None:
        """Wait until agent ``name`` is idle; on a timeout the error names its last events."""
        self.run(
            f"""
            import asyncio
            try:
                await asyncio.wait_for({name}.when_idle(), 90)
            except TimeoutError:
                raise AssertionError(
                    f"{name} still {{{name}.status}}: "
                    f"{{[e.type for e in {name}.session.events[-8:]]}}"
                ) from None
            """
        )


@pytest.fixture
def notebook_dir() -> Iterator[Path]:
    with harness.scratch_dir("panel") as folder:
        yield folder


def _kernel(lab: harness.LabServer, notebook: Path) -> Iterator[Kernel]:
    # On a loaded machine a fresh client's first kernel_info can take over a second, which
    # jupyter_client reads as a dead kernel when no heartbeat came yet: try again.
    for attempt in range(3):
        try:
            client = harness.kernel_client(lab, notebook)
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        yield Kernel(client)
    finally:
        client.stop_channels()


def _wait_kernel_started(lab: harness.LabServer, notebook: Path, timeout: float = 90) -> None:
    """Poll the server until the notebook's kernel reports ``idle`` (after a restart)."""
    rel = notebook.relative_to(lab.root).as_posix()
    deadline = time.monotonic() + timeout
    while True:
        states = [
            s["kernel"]["execution_state"]
            for s in lab.api("GET", "/api/sessions")
            if s["path"] == rel
        ]
        if states == ["idle"]:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the kernel of {rel} did not come back: {states}")
        time.sleep(0.2)  # polling interval of a REST API with no readiness callback


def _panel(page: Page) -> Locator:
    return page.locator("#agentloop-agents-panel")


def _open_panel(page: Page) -> Locator:
    """Open the panel with its shortcut (from the notebook's command mode)."""
    from playwright.sync_api import expect

    page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.keyboard.press("Escape")
    page.keyboard.press("Alt+Shift+G")
    panel = _panel(page)
    expect(panel).to_be_visible()
    return panel


def _rows(panel: Locator) -> Locator:
    return panel.locator(".agentloop-panel-agent")


def _send(panel: Locator, text: str) -> None:
    box = panel.locator("textarea.agentloop-panel-input")
    box.fill(text)
    box.press("Enter")


def _widen_panel(page: Page, by: int = 180) -> None:
    """Drag the right sidebar's edge ``by`` pixels to the left, as a reader would."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle:visible").last
    box = handle.bounding_box()
    assert box is not None, "the right sidebar has no split handle"
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - by, y, steps=5)
    page.mouse.up()


def _shot(page: Page, path: Path) -> None:
    """The panel with the notebook beside it (the README's picture)."""
    harness.SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), clip={"x": 280, "y": 0, "width": 1120, "height": 1000})


def test_create_prompt_approve_cancel_and_ask_about_a_line_from_the_panel(
    lab_page: Page, jupyter_lab: harness.LabServer, notebook_dir: Path
) -> None:
    from playwright.sync_api import expect

    notebook = harness.write_notebook(
        notebook_dir / "panel.ipynb", ["%load_ext agentloop_nb", "x = 1\ny = 40\nprint(x + y)"]
    )
    harness.run_all(lab_page, jupyter_lab, notebook)
    harness.wait_cells_done(lab_page)
    panel = _open_panel(lab_page)
    _widen_panel(lab_page)

    # An empty kernel says how to create an agent, and the button does it.
    empty = panel.locator(".agentloop-panel-empty")
    expect(empty).to_contain_text("%agent create NAME --notebook")
    empty.get_by_role("button", name="Create an agent").click()
    expect(_rows(panel)).to_have_count(1)
    row = _rows(panel).first
    expect(row.locator(".agentloop-panel-agent-name")).to_have_text("agent")
    expect(row.locator(".agentloop-state")).to_have_text("idle")
    expect(row).to_contain_text("offline/demo · 0 turns · 0 tokens")
    view = panel.locator(".agentloop-panel-view .agentloop-agent")
    expect(view).to_be_visible()

    for kernel in _kernel(jupyter_lab, notebook):
        # Enter sends a follow-up; the answer streams into the panel's live view.
        _send(panel, "hello")
        answer = view.locator(".agentloop-assistant").last
        seen = harness.distinct_texts(answer, 3)
        assert all(a in b for a, b in itertools.pairwise(seen)), seen  # it only grows
        expect(answer).to_contain_text("offline demo model")
        kernel.idle("agent")
        expect(row.locator(".agentloop-state")).to_have_text("idle")
        expect(row).to_contain_text("1 turn ·")
        log = kernel.log("agent")
        assert log["prompts"] == [["hello"]]  # logged as a %%agent cell logs its prompt
        assert "offline demo model" in log["answers"][0]

        # A tool call waits for approval; the panel's row says so and its view approves it.
        _send(panel, "run: 40 + 2")
        expect(row.locator(".agentloop-state")).to_have_text("awaiting approval")
        view.locator("button.agentloop-approve").click()
        expect(view.locator(".agentloop-assistant").last).to_contain_text("42")
        kernel.idle("agent")
        assert kernel.log("agent")["ends"][-1] == {"kind": "completed"}
        _shot(lab_page, LIGHT_SHOT)

        # Escape in the prompt box cancels the running turn.
        _send(panel, "run: 1 + 1")
        expect(row.locator(".agentloop-state")).to_have_text("awaiting approval")
        panel.locator("textarea.agentloop-panel-input").press("Escape")
        expect(row.locator(".agentloop-state")).to_have_text("idle")
        assert kernel.log("agent")["ends"][-1] == {"kind": "aborted", "cause": {"kind": "user"}}

        # Select line 2 of the cell, "Ask agent about selection" from the context menu: the
        # reference shows in the prompt box and reaches the log before the question.
        line = harness.cell(lab_page, 1).locator(".cm-line").nth(1)
        line.click()
        lab_page.keyboard.press("Home")
        lab_page.keyboard.press("Shift+End")
        line.click(button="right")
        lab_page.locator(".lm-Menu-itemLabel", has_text="Ask Agent About Selection").click()
        chip = panel.locator(".agentloop-panel-ref")
        expect(chip).to_have_text(re.compile(r"^cell 2 · line 2"))
        _send(panel, "what is y?")
        expect(chip).to_have_count(0)
        kernel.idle("agent")
        ref, question = kernel.log("agent")["prompts"][-1]
        assert question == "what is y?"
        assert re.match(r"The user selected this in cell 2 \(id [\w-]+\), line 2 ", ref), ref
        assert ref.endswith("```\ny = 40\n```")

        # The shortcut does the same for the output the user selects.
        output = harness.cell_output(lab_page, 1).locator(".jp-OutputArea-output")
        output.click(click_count=3)
        lab_page.keyboard.press("Alt+Shift+Q")
        expect(chip).to_have_text(re.compile(r"^cell 2 · output 1"))

        # A collapsed sidebar renders no view; opening it again brings the live view back.
        views = lab_page.locator("#agentloop-agents-panel .agentloop-panel-view .agentloop-agent")
        expect(views).to_have_count(1)
        tab = lab_page.locator(
            '.jp-SideBar.jp-mod-right .lm-TabBar-tab[data-id="agentloop-agents-panel"]'
        )
        tab.click()
        expect(panel).to_be_hidden()
        expect(views).to_have_count(0)
        tab.click()
        expect(views).to_have_count(1)
        expect(views.locator(".agentloop-body")).to_contain_text("what is y?")


def test_the_panel_follows_two_notebooks_a_restart_and_a_reload(
    lab_page: Page, jupyter_lab: harness.LabServer, notebook_dir: Path
) -> None:
    from playwright.sync_api import expect

    first = harness.write_notebook(
        notebook_dir / "first.ipynb",
        ["%load_ext agentloop_nb", "%agent create alpha --notebook"],
    )
    second = harness.write_notebook(
        notebook_dir / "second.ipynb",
        [
            "%load_ext agentloop_nb",
            "%agent create beta",
            "%%agent beta\nhello",
            "import asyncio; await asyncio.wait_for(beta.when_idle(), 60); sid = beta.session.id",
        ],
    )
    jupyter_lab.set_theme(harness.DARK_THEME)
    try:
        harness.run_all(lab_page, jupyter_lab, first)
        harness.wait_cells_done(lab_page)
        panel = _open_panel(lab_page)
        _widen_panel(lab_page)
        expect(_rows(panel)).to_have_count(1)
        expect(_rows(panel).first.locator(".agentloop-panel-agent-name")).to_have_text("alpha")

        # Open the second notebook from the file browser: the panel follows it.
        lab_page.locator(".jp-DirListing-item", has_text="second.ipynb").dblclick()
        second_tab = lab_page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="second")
        first_tab = lab_page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="first")
        expect(second_tab).to_have_class(re.compile("jp-mod-current"))
        harness.run_all(lab_page, jupyter_lab, second, in_place=True)
        names = panel.locator(".agentloop-panel-agent-name")
        expect(names).to_have_text(["beta"])
        expect(panel.locator(".agentloop-panel-heading")).to_have_text("Agents · second.ipynb")
        expect(_rows(panel).first).to_contain_text("1 turn")
        expect(panel.locator(".agentloop-panel-view .agentloop-body")).to_contain_text("hello")
        _shot(lab_page, DARK_SHOT)
        first_tab.click()
        expect(names).to_have_text(["alpha"])
        second_tab.click()
        expect(names).to_have_text(["beta"])

        for kernel in _kernel(jupyter_lab, second):
            sid = json.loads(kernel.run("import json; print(json.dumps(sid))"))
            # A restart empties the panel; the resumed agent comes back into it.
            harness.current_code_cells(lab_page).first.click()
            harness.menu_command(lab_page, "Kernel", "Restart Kernel…")
            lab_page.locator(".jp-Dialog .jp-mod-accept").click()
            expect(_rows(panel)).to_have_count(0)
            expect(panel.locator(".agentloop-panel-status")).to_contain_text("%load_ext")
        _wait_kernel_started(jupyter_lab, second)
        for kernel in _kernel(jupyter_lab, second):
            kernel.run(f"%load_ext agentloop_nb\n%agent resume {sid} --name beta")
            expect(names).to_have_text(["beta"])
            expect(_rows(panel).first).to_contain_text("1 turn")
            expect(panel.locator(".agentloop-panel-view .agentloop-body")).to_contain_text("hello")

        # A page reload: the panel is restored with the focused notebook's agents and view.
        lab_page.reload()
        expect(_panel(lab_page)).to_be_visible(timeout=60_000)
        expect(names).to_have_text(["beta"], timeout=60_000)
        expect(panel.locator(".agentloop-panel-view .agentloop-body")).to_contain_text(
            "hello", timeout=60_000
        )
        lab_page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="first").click()
        # The first notebook's kernel connection is restored when its tab is shown again: on a
        # loaded machine that can take longer than the default five seconds.
        expect(names).to_have_text(["alpha"], timeout=60_000)
    finally:
        jupyter_lab.set_theme(harness.LIGHT_THEME)
