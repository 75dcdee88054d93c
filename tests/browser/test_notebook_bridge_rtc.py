"""The notebook bridge under real-time collaboration (jupyter-collaboration): two pages on one
notebook in a JupyterLab of this module's own with collaboration on; an insert requested by
the kernel through the bridge shows in the other page within 2 s."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from . import harness
from .test_notebook_bridge import Driver, _source

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def collaborative_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.LabServer]:
    if importlib.util.find_spec("jupyter_server_ydoc") is None:
        harness.require("jupyter-collaboration is not installed: pip install -e '.[test]'")
    harness.require(harness.browser_unavailable_reason())
    harness.require(harness.labextension_unavailable_reason())
    lab = harness.start_lab(
        harness.REPO_ROOT, tmp_path_factory.mktemp("jupyterlab-rtc"), collaborative=True
    )
    try:
        yield lab
    finally:
        lab.delete_sessions()
        harness.stop_lab(lab)


def test_a_second_page_sees_the_agents_inserted_cell_within_two_seconds(
    collaborative_lab: harness.LabServer, chromium_browser: Browser
) -> None:
    from playwright.sync_api import expect

    with harness.scratch_dir("rtc") as folder:
        notebook = harness.write_notebook(
            folder / "shared.ipynb", ["%load_ext agentloop_nb", "x = 1"]
        )
        pages = []
        for _ in range(2):
            context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000})
            harness.confine_to_loopback(context)
            page = context.new_page()
            page.set_default_timeout(30_000)
            pages.append(page)
        first, second = pages
        try:
            harness.run_all(first, collaborative_lab, notebook)
            harness.wait_cells_done(first)
            harness.open_notebook(second, collaborative_lab, notebook)
            expect(_source(second, 1)).to_have_text("x = 1")
            client = harness.kernel_client(collaborative_lab, notebook)
            try:
                driver = Driver(client)
                start = time.monotonic()
                inserted = driver.ok("insert", index=2, source="shared = 7", cell_type="code")
                assert inserted["cell"]["source"] == "shared = 7"
                for page in pages:
                    expect(_source(page, 2)).to_have_text("shared = 7", timeout=2_000)
                # From the kernel's request to the cell in both pages.
                assert time.monotonic() - start < 2.0
            finally:
                client.stop_channels()
        finally:
            for page in pages:
                page.context.close()
