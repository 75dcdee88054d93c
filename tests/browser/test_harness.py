"""The browser harness's network confinement (``harness.confine_to_loopback``).

The page may reach only loopback, and reaching loopback must never depend on the test thread:
a page's request to Lab goes through while the test waits on a kernel cell of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import harness

if TYPE_CHECKING:
    from playwright.sync_api import Page


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8888/lab/tree/x.ipynb?token=abc",
        "ws://127.0.0.1:8888/api/kernels/k/channels?session_id=s",
        "http://localhost:8888/api/sessions",
        "https://LOCALHOST/",
        "http://[::1]:8888/api/status",
        "http://127.0.0.1",
        "data:image/png;base64,AAAA",
        "blob:http://127.0.0.1:8888/0b1c",
        "about:blank",
    ],
)
def test_loopback_and_in_page_urls_are_local(url: str) -> None:
    assert harness.is_local_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-svg.js",
        "wss://example.com/socket",
        "http://127.0.0.1.example.com/",
        "http://localhost.example.com:8888/",
        "http://127.0.0.1@example.com/",
        "http://example.com/?next=http://127.0.0.1:8888/",
        "http://10.0.0.1:8888/",
        "ftp://127.0.0.1/",
    ],
)
def test_other_hosts_and_look_alikes_are_external(url: str) -> None:
    assert not harness.is_local_url(url)


@pytest.fixture
def notebook_dir() -> Iterator[Path]:
    with harness.scratch_dir("harness") as folder:
        yield folder


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_the_page_reaches_lab_while_the_test_thread_waits_on_a_kernel_cell(
    lab_page: Page, jupyter_lab: harness.LabServer, notebook_dir: Path
) -> None:
    # The page writes a file through Lab's REST API once this thread is inside a kernel
    # client's blocking call; the cell waits (deadline-bounded) for that file. A route that
    # held the request for this thread would hold it until the cell gave up.
    notebook = harness.write_notebook(notebook_dir / "reach.ipynb", ["x = 1"])
    target = notebook_dir / "reached.txt"
    harness.run_all(lab_page, jupyter_lab, notebook)
    harness.wait_cells_done(lab_page)
    client = harness.kernel_client(jupyter_lab, notebook)
    try:
        runner = harness.KernelRunner(client)
        lab_page.evaluate(
            """([path, token]) => { setTimeout(() => fetch('/api/contents/' + path, {
                method: 'PUT',
                headers: {Authorization: 'token ' + token, 'Content-Type': 'application/json'},
                body: JSON.stringify({type: 'file', format: 'text', content: 'reached'}),
            }), 0); }""",
            [target.relative_to(jupyter_lab.root).as_posix(), jupyter_lab.token],
        )
        runner.run(
            f"""
            import asyncio, os, time
            _t_end = time.monotonic() + 20
            while not os.path.exists({json.dumps(str(target))}):
                if time.monotonic() > _t_end:
                    raise TimeoutError("the page's request did not reach Lab while this cell ran")
                await asyncio.sleep(0.05)
            """
        )
    finally:
        client.stop_channels()
    assert target.read_text(encoding="utf-8") == "reached"
