"""Insert round trip through the notebook bridge in a real browser (issue 23, goal ≤ 150 ms).

Starts JupyterLab (tests/browser/harness.py) with the extension as ``pip`` installs it, opens a
scratch notebook in Chromium, loads the extension in its kernel, then times 30 kernel-side
``bridge.request("insert", ...)`` calls: comm message to the page, the insert through the
notebook's shared model, the page's answer back. Prints min / median / p90 / max in ms.

    python benchmarks/bench_bridge_browser.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.browser import harness
from tests.browser.test_notebook_bridge import Driver

_TIMED = """
_b_ms = []
for _b_i in range(30):
    _b_t = time.perf_counter()
    await _t_bridge.request("insert", {"index": 2, "source": f"z = {_b_i}", "cell_type": "code"})
    _b_ms.append((time.perf_counter() - _b_t) * 1000)
_b_ms.sort()
print(json.dumps({"min": _b_ms[0], "median": _b_ms[15], "p90": _b_ms[27], "max": _b_ms[-1]}))
"""


def main() -> None:
    from playwright.sync_api import sync_playwright

    lab = harness.start_lab(harness.REPO_ROOT, Path(tempfile.mkdtemp(prefix="bench-bridge")))
    try:
        with sync_playwright() as playwright, harness.scratch_dir("bench") as folder:
            browser = harness.launch_chromium(playwright)
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            notebook = harness.write_notebook(
                folder / "bench.ipynb", ["%load_ext agentloop_nb", "x = 1"]
            )
            harness.run_all(page, lab, notebook)
            harness.wait_cells_done(page)
            client = harness.kernel_client(lab, notebook)
            try:
                print(Driver(client).run(_TIMED).strip())
            finally:
                client.stop_channels()
                browser.close()
    finally:
        lab.delete_sessions()
        harness.stop_lab(lab)


if __name__ == "__main__":
    main()
