"""Fixtures for the real-browser tests (see ``harness.py`` for the contract).

Without Chromium (or Playwright) every test here skips with the fix in the message; with
``AGENTLOOP_REQUIRE_BROWSER=1`` (set by ``scripts/test.sh`` once Chromium is installed) it fails
instead, so CI cannot go green on a machine where the browser chain silently stopped working.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # Keep each phase's report on the item so `lab_page` can tell a failed test at teardown.
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


# One retry for a real-browser test, as JupyterLab's own end-to-end suite runs on CI. A whole
# Lab, a kernel and Chromium share two cores with the rest of the suite; a handful of timing
# faults in that stack were seen about once per full run (all in docs/architecture.md,
# "Browser tests retry once"), each passing on its own. A test that fails twice fails the
# run, and every retry is counted in pytest's summary line ("N rerun").
BROWSER_RERUNS = 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.flaky(reruns=BROWSER_RERUNS))


def _require_browser() -> None:
    harness.require(harness.browser_unavailable_reason())


@pytest.fixture
def lab_extension() -> None:
    """The ``agentloop-nb`` extension is installed in this venv (else skip, or fail in CI).
    Modules that drive the extension use it with ``pytest.mark.usefixtures``."""
    harness.require(harness.labextension_unavailable_reason())


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.LabServer]:
    """JupyterLab serving the repository root on 127.0.0.1 (one server per test session)."""
    _require_browser()
    lab = harness.start_lab(harness.REPO_ROOT, tmp_path_factory.mktemp("jupyterlab"))
    try:
        yield lab
    finally:
        harness.stop_lab(lab)


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[Browser]:
    """Debian's Chromium driven by Playwright's sync API (one browser per test module).

    Module scope on purpose: while a sync Playwright is alive it marks its event loop as the
    thread's running loop between calls, which breaks every anyio test that runs meanwhile.
    Stopping it when the module ends keeps the rest of the suite unaffected.
    """
    _require_browser()
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = harness.launch_chromium(playwright)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        playwright.stop()


@pytest.fixture
def quickstart() -> Iterator[Path]:
    """``notebooks/01-quickstart.ipynb`` as a clean copy (see :func:`harness.clean_notebook`)."""
    with harness.clean_notebook("notebooks/01-quickstart.ipynb") as path:
        yield path


@pytest.fixture
def lab_page(
    request: pytest.FixtureRequest,
    jupyter_lab: harness.LabServer,
    chromium_browser: Browser,
) -> Iterator[Page]:
    """A fresh page (own context) that can only reach loopback; screenshot + kernel cleanup after."""
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000})
    harness.confine_to_loopback(context)
    page = context.new_page()
    page.set_default_timeout(30_000)
    console: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            console.append(f"{message.type}: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    try:
        yield page
    finally:
        reports = request.node.stash.get(_REPORTS, {})
        failed = any(report.failed for report in reports.values())
        outcome, stale = ("failed", "passed") if failed else ("passed", "failed")
        # One picture per test: drop the other outcome's from an earlier run.
        harness.SCREENSHOTS.joinpath(f"{request.node.name}-{stale}.png").unlink(missing_ok=True)
        name = f"{request.node.name}-{outcome}"
        try:
            shot = harness.screenshot(page, name)
            if failed:
                Path(shot.with_suffix(".console.txt")).write_text(
                    "\n".join(console) + "\n\n--- jupyterlab log ---\n" + jupyter_lab.log_tail(200),
                    encoding="utf-8",
                )
        finally:
            context.close()
            jupyter_lab.delete_sessions()
