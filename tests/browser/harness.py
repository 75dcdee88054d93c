"""Real-browser harness: JupyterLab on loopback driven by Debian's Chromium through Playwright.

Contract for test authors (fixtures live in ``tests/browser/conftest.py``):

- ``jupyter_lab`` (session fixture) is a :class:`LabServer` serving the repository root on
  127.0.0.1 with a random token and isolated Jupyter config/data dirs. Notebook paths are
  relative to the repository root, e.g. ``"notebooks/01-quickstart.ipynb"``.
- ``lab_page`` (function fixture) is a fresh Playwright ``Page`` whose context aborts every
  request that is not to 127.0.0.1 / localhost / data: / blob: (:func:`confine_to_loopback`;
  loopback requests are never routed, so the page reaches Lab while the test thread waits on
  something else, e.g. a :class:`KernelRunner` cell). On teardown it saves a screenshot
  under ``artifacts/screenshots/`` (``<test>-passed.png`` or ``<test>-failed.png``) and shuts
  down every kernel the test started.
- :func:`run_all` opens a notebook, restarts its kernel and runs all cells through the menu, and
  returns when the first code cell's prompt reads ``[1]:``. Cells after it may still be running;
  use :func:`wait_cells_done` or assert on their outputs with Playwright's ``expect``.
- :func:`distinct_texts` / :func:`sample_text` prove live updates: they record a locator's text
  as it changes, which a saved notebook can never show for background-task updates.

Browser tests are plain (sync) functions using Playwright's sync API; do not put
``@pytest.mark.anyio`` tests in a browser module: while the module's sync Playwright is alive it
marks its loop as the thread's running loop, which breaks anyio tests (it is stopped when the
module ends, so the rest of the suite is unaffected).

Nothing here sleeps to synchronise: waiting is done by Playwright's condition polling
(``expect``/``wait_for``) or by polling the server's REST API against a deadline.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Locator, Page, Playwright, Route

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
CHROMIUM = Path(os.environ.get("AGENTLOOP_CHROMIUM", "/usr/bin/chromium"))

# The flags these machines need: no sandbox as root, and no background networking, which the
# closed network would refuse many times a second.
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)

# Stops the "get notified about Jupyter news?" toast that would cover screenshots.
LAB_SETTING_OVERRIDES: dict[str, Any] = {
    "@jupyterlab/apputils-extension:notification": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    # As Binder sets it: saved notebooks keep widget state, so views survive a kernel shutdown.
    "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
}
LIGHT_THEME = "JupyterLab Light"
DARK_THEME = "JupyterLab Dark"

# WCAG contrast, computed by the browser from the styles it applied. The text colour is
# composited (with its alpha and the element's opacity chain) over the effective background:
# every translucent background behind the element, down to the first opaque one (an ancestor's,
# else the page's white), composited in turn. Colours may be rgb()/rgba() or color(srgb ...)
# (what color-mix() computes to).
_COLOUR_JS = r"""
  const parse = (c) => {
    let m = c.match(/^rgba?\(([^)]+)\)/);
    if (m) {
      const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
      return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
    }
    m = c.match(/^color\(srgb ([^)]+)\)/);
    if (m) {
      const p = m[1].split(/[ /]+/).filter(Boolean).map(Number);
      return { r: p[0] * 255, g: p[1] * 255, b: p[2] * 255, a: p.length > 3 ? p[3] : 1 };
    }
    return null;
  };
  const over = (top, under) => ({
    r: top.r * top.a + under.r * (1 - top.a),
    g: top.g * top.a + under.g * (1 - top.a),
    b: top.b * top.a + under.b * (1 - top.a), a: 1 });
  const lum = ({ r, g, b }) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    const layers = [];
    for (let node = el; node; node = node.parentElement) {
      const c = parse(getComputedStyle(node).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
    }
    let bg = { r: 255, g: 255, b: 255, a: 1 };
    for (const layer of layers.reverse()) bg = over(layer, bg);
    return bg;
  };
  const measure = (el) => {
    const fg = parse(getComputedStyle(el).color) || { r: 0, g: 0, b: 0, a: 1 };
    let opacity = 1;
    for (let node = el; node; node = node.parentElement) opacity *= Number(getComputedStyle(node).opacity);
    const bg = background(el);
    const ink = over({ ...fg, a: fg.a * opacity }, bg);
    const [hi, lo] = [lum(ink), lum(bg)].sort((x, y) => y - x);
    return { ratio: (hi + 0.05) / (lo + 0.05), fg: getComputedStyle(el).color,
             bg: `rgb(${Math.round(bg.r)}, ${Math.round(bg.g)}, ${Math.round(bg.b)})` };
  };
"""

# WCAG contrast ratio of an element's text against the background behind it.
CONTRAST_JS = "(el) => {" + _COLOUR_JS + "  return measure(el);\n}"

# Every visible text under the given roots (elements with a text node of their own, plus
# textareas and inputs), measured; disabled controls are exempt (WCAG 1.4.3), and so are
# elements whose own visibility hides them.
AUDIT_JS = (
    "(roots) => {"
    + _COLOUR_JS
    + r"""
  const out = [];
  for (const root of roots) {
    for (const el of [root, ...root.querySelectorAll('*')]) {
      if (el.closest('[disabled]') || el.closest('style,script')) continue;
      const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      const field = (el.tagName === 'TEXTAREA' || el.tagName === 'INPUT') && el.value;
      if (!own && !field) continue;
      const rect = el.getBoundingClientRect();
      const style = getComputedStyle(el);
      if (!rect.width || !rect.height || style.visibility === 'hidden') continue;
      const text = (field ? el.value : el.textContent).trim().replace(/\s+/g, ' ').slice(0, 50);
      out.push({ text, cls: String(el.className).slice(0, 80), tag: el.tagName, ...measure(el) });
    }
  }
  return out;
}"""
)

NOT_INSTALLED = "Chromium is not installed: run scripts/test.sh as root (apt-get install chromium)"


class LabStartError(RuntimeError):
    """JupyterLab exited or did not answer ``/api/status`` in time; the message has its log."""


@dataclass
class LabServer:
    """A running JupyterLab; ``root`` is the directory notebook paths are relative to."""

    port: int
    token: str
    root: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    home: Path
    _log_file: Any = field(repr=False, default=None)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def lab_url(self, notebook_path: str | Path) -> str:
        """URL that opens ``notebook_path`` in a freshly reset workspace."""
        rel = Path(notebook_path)
        if rel.is_absolute():
            rel = rel.relative_to(self.root)
        quoted = urllib.parse.quote(rel.as_posix())
        return f"{self.base_url}/lab/tree/{quoted}?reset&token={self.token}"

    def api(self, method: str, path: str, *, body: Any = None, timeout: float = 10.0) -> Any:
        """Call the server's REST API (``body``: sent as JSON); returns decoded JSON (``None``
        for an empty body).

        Raises ``urllib.error.URLError`` when the server does not answer.
        """
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Authorization": f"token {self.token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            f"{self.base_url}{path}", method=method, headers=headers, data=data
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def set_theme(self, theme: str) -> None:
        """Make ``theme`` JupyterLab's theme for pages opened from now on."""
        raw = json.dumps({"theme": theme})
        self.api(
            "PUT", "/lab/api/settings/@jupyterlab/apputils-extension:themes", body={"raw": raw}
        )

    def delete_sessions(self) -> None:
        """Shut down every session (and so its kernel): kernels outlive the browser page."""
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_lab(
    root: Path, workdir: Path, *, startup_timeout: float = 90.0, collaborative: bool = False
) -> LabServer:
    """Start JupyterLab for ``root`` with its Jupyter dirs under ``workdir``; wait until it answers.

    Real-time collaboration (jupyter-collaboration, when installed) is off unless
    ``collaborative``: the shared Lab of the other tests keeps plain documents.

    The server runs in its own process group so :func:`stop_lab` can end it and its kernels
    together. Raises :class:`LabStartError` (with the log tail) if it exits or stays silent.
    """
    config_dir = workdir / "config"
    data_dir = workdir / "data"
    (config_dir / "labconfig").mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    # A config dir of our own: no user settings or server config leak in, and the overrides
    # below reach JupyterLab without writing into the venv.
    (config_dir / "labconfig" / "default_setting_overrides.json").write_text(
        json.dumps(LAB_SETTING_OVERRIDES), encoding="utf-8"
    )
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(config_dir),
        JUPYTER_DATA_DIR=str(data_dir),
        IPYTHONDIR=str(workdir / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
    )
    port = free_port()
    token = secrets.token_hex(16)
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--port-retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.extension_manager=readonly",
        f"--YDocExtension.disable_rtc={not collaborative}",
        # Collaboration's state goes under workdir, not into the served repository.
        f"--SQLiteYStore.db_path={workdir / 'ystore.db'}",
        f"--YDocExtension.session_store_path={workdir / 'collaboration_sessions.json'}",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log_path = workdir / "jupyterlab.log"
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        cmd,
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lab = LabServer(port, token, root, process, log_path, workdir, log_file)
    deadline = time.monotonic() + startup_timeout
    while True:
        if process.poll() is not None:
            stop_lab(lab)
            raise LabStartError(
                f"JupyterLab exited with code {process.returncode}:\n{lab.log_tail()}"
            )
        try:
            lab.api("GET", "/api/status", timeout=2.0)
            return lab
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            stop_lab(lab)
            raise LabStartError(
                f"JupyterLab did not answer /api/status in {startup_timeout:.0f}s:\n"
                f"{lab.log_tail()}"
            )
        # Polling interval for a server we cannot get a readiness callback from.
        time.sleep(0.2)


def stop_lab(lab: LabServer, *, grace: float = 10.0) -> None:
    """End the server's process group (server and kernels): SIGTERM, then SIGKILL after ``grace``."""
    if lab.process.poll() is None:
        try:
            os.killpg(lab.process.pid, signal.SIGTERM)
            lab.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(lab.process.pid, signal.SIGKILL)
            lab.process.wait(timeout=grace)
        except ProcessLookupError:
            pass
    if lab._log_file is not None:
        lab._log_file.close()
        lab._log_file = None


def require(reason: str | None) -> None:
    """Skip with ``reason`` (it names the fix), or fail under ``AGENTLOOP_REQUIRE_BROWSER=1``
    (set by ``scripts/test.sh``), so CI cannot go green with the browser chain broken."""
    if reason is None:
        return
    import pytest

    if os.environ.get("AGENTLOOP_REQUIRE_BROWSER") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def labextension_unavailable_reason() -> str | None:
    """Why Lab would not load the ``agentloop-nb`` extension from this venv, or ``None``.

    The browser tests use the extension exactly as ``pip install`` leaves it: built into the
    wheel's shared data, under ``<venv>/share/jupyter/labextensions/agentloop-nb``.
    """
    installed = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "agentloop-nb"
    if not (installed / "package.json").is_file():
        return (
            f"the agentloop-nb JupyterLab extension is not installed in {sys.prefix}: "
            "run scripts/test.sh (pip install -e '.[test]' builds and installs it)"
        )
    return None


def kernel_client(lab: LabServer, notebook_path: str | Path) -> Any:
    """A started ``BlockingKernelClient`` on the kernel of the open notebook ``notebook_path``
    (a second client beside the page's: what it executes shares the notebook's namespace, its
    outputs do not show in the page). The caller stops its channels."""
    from jupyter_client.blocking.client import BlockingKernelClient

    rel = Path(notebook_path)
    if rel.is_absolute():
        rel = rel.relative_to(lab.root)
    sessions = [s for s in lab.api("GET", "/api/sessions") if s["path"] == rel.as_posix()]
    if not sessions:
        raise AssertionError(f"no session for {rel}: open the notebook first")
    kernel_id = sessions[0]["kernel"]["id"]
    found = sorted(lab.home.rglob(f"kernel-{kernel_id}.json"))
    if not found:
        raise AssertionError(f"no connection file for kernel {kernel_id} under {lab.home}")
    client = BlockingKernelClient(connection_file=str(found[0]))
    client.load_connection_file()
    client.start_channels()
    client.wait_for_ready(timeout=30)
    return client


class KernelRunner:
    """Runs code in a notebook's kernel through a second client (see :func:`kernel_client`):
    what it defines shares the notebook's namespace, its output stays out of the page."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def run(self, code: str, *, timeout: float = 120) -> str:
        """Execute ``code`` (dedented) and return its stdout; a raised error fails the test
        with the kernel's traceback."""
        out: list[str] = []
        errors: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                errors.append("\n".join(msg["content"]["traceback"]))

        self.client.execute_interactive(
            textwrap.dedent(code),
            output_hook=hook,
            timeout=timeout,
            allow_stdin=False,
            store_history=False,  # the notebook's own execution counts stay as the page shows
        )
        if errors:
            raise AssertionError(errors[0])
        return "".join(out)

    def last_json(self, code: str, *, timeout: float = 120) -> Any:
        """Run ``code`` and parse the last line it printed as JSON."""
        return json.loads(self.run(code, timeout=timeout).strip().splitlines()[-1])


def browser_unavailable_reason() -> str | None:
    """Why the browser tests cannot run here, or ``None`` when they can."""
    if not CHROMIUM.exists():
        return NOT_INSTALLED
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: run scripts/test.sh (pip install -e '.[test]')"
    return None


def launch_chromium(playwright: Playwright) -> Browser:
    """Debian's Chromium through Playwright (never ``playwright install``: no CDN here)."""
    return playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=list(CHROMIUM_ARGS)
    )


# Every URL that is not loopback http(s)/ws(s) or in-page (data:, blob:, about:). Playwright
# matches a route's pattern in its driver process, so only these requests are intercepted.
EXTERNAL_URL = re.compile(
    r"^(?!(?:https?|wss?)://(?:127\.0\.0\.1|localhost|\[::1\])(?::\d+)?(?:[/?#]|$)"
    r"|(?:data|blob|about):)",
    re.IGNORECASE,
)


def is_local_url(url: str) -> bool:
    """True for loopback http(s)/ws(s) URLs and in-page data:/blob:/about: URLs."""
    return EXTERNAL_URL.match(url) is None


def confine_to_loopback(context: BrowserContext) -> None:
    """Abort every request of ``context``'s pages that is not to loopback (:data:`EXTERNAL_URL`).

    Only those requests are routed, never the page's own traffic to Lab. Playwright holds a
    routed request until its handler ran, and the sync API runs handlers only while the test
    thread is inside a Playwright call: with every request routed, a page reloaded while the
    test waited on a kernel client (a driver's cell) could not fetch ``/api/sessions``, so it
    opened no kernel connection, and its bridge stayed disconnected, until that cell ended.
    """
    context.route(EXTERNAL_URL, _abort)


def _abort(route: Route) -> None:
    route.abort()


# ---------------------------------------------------------------------------------------------
# Notebook driving
# ---------------------------------------------------------------------------------------------


def code_cells(page: Page) -> Locator:
    return page.locator(".jp-Notebook .jp-CodeCell")


def current_code_cells(page: Page) -> Locator:
    """The code cells of the notebook on screen (other open notebooks stay in the DOM, hidden)."""
    return page.locator(".jp-NotebookPanel:visible .jp-CodeCell")


def cell(page: Page, index: int) -> Locator:
    """The ``index``-th cell of the notebook (markdown cells count too)."""
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def cell_output(page: Page, index: int) -> Locator:
    """The output area of the ``index``-th cell."""
    return cell(page, index).locator(".jp-OutputArea")


def menu_command(page: Page, menu: str, label: str | re.Pattern[str]) -> None:
    """Click ``menu`` in the menu bar, then its first item whose label matches ``label`` (a
    substring, or a pattern when another item's label contains it)."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{re.escape(menu)}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=label).first.click()


def click_button(page: Page | Locator, text: str, *, timeout: float = 10_000) -> None:
    """Click the button whose accessible name is ``text`` (waits for it to be enabled)."""
    page.get_by_role("button", name=text, exact=True).first.click(timeout=timeout)


def open_notebook(page: Page, lab: LabServer, notebook_path: str | Path) -> None:
    """Open ``notebook_path`` and wait until its cells are rendered and the kernel is known."""
    page.goto(lab.lab_url(notebook_path))
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    # A kernel picker appears when the notebook's kernelspec is unknown; take the default.
    dialog = page.locator(".jp-Dialog")
    if dialog.count() and dialog.get_by_text("Select Kernel").count():
        dialog.locator(".jp-mod-accept").click()


def wait_kernel_idle(page: Page, *, timeout: float = 60_000) -> None:
    """Wait until the status bar shows the kernel of the notebook on screen as ``Idle``:
    started, and this page connected to it (JupyterLab's display status reads
    ``Initializing`` / ``Connecting`` / ``Starting`` until then; the toolbar's execution
    indicator cannot tell, it reads idle before it has heard of a kernel).

    Restarting (or running) a kernel that is still starting races in Jupyter Server's kernel
    websocket: the page's socket is answered 500 and reconnects, and in that state a comm
    reply from the page was seen to reach the kernel only 30 s later, or a Run All click was
    dropped. Acting on an idle kernel is the path users take.
    """
    page.locator(
        "#jp-main-statusbar .jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$")
    ).first.wait_for(timeout=timeout)


#: A first prompt once Run All was taken: queued (``[*]:``) or run (``[n]:``).
_QUEUED_OR_RAN = re.compile(r"^\[(\*|\d+)\]:$")


def run_all(
    page: Page,
    lab: LabServer,
    notebook_path: str | Path,
    *,
    attempts: int = 3,
    timeout: float = 60_000,
    in_place: bool = False,
) -> None:
    """Open the notebook, then Kernel → "Restart Kernel and Run All Cells…" and confirm.

    Returns once the first code cell's prompt reads ``[1]:`` (later cells may still run).
    Retries the menu command up to ``attempts`` times (the first click can land while the
    kernel is still connecting); raises ``AssertionError`` if the prompt never appears.

    ``in_place=True`` runs ``notebook_path`` where it already is on screen (opened inside Lab,
    e.g. from the file browser, on a fresh kernel): no navigation and no restart, Run → "Run
    All Cells"; it returns once every cell has run. Without a restart a second Run All would
    queue every cell again, so an attempt is repeated only while the click was not taken (the
    first prompt neither ``[*]:`` nor numbered).
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    if not in_place:
        open_notebook(page, lab, notebook_path)
    wait_kernel_idle(page)
    cells = current_code_cells(page)
    first_prompt = cells.first.locator(".jp-InputPrompt")
    per_attempt = timeout / attempts
    for _attempt in range(attempts):
        try:
            cells.first.click()
            if in_place:
                menu_command(page, "Run", re.compile(r"^Run All Cells$"))
                expect(first_prompt).to_have_text(_QUEUED_OR_RAN, timeout=per_attempt)
            else:
                menu_command(page, "Kernel", "Restart Kernel and Run All Cells")
                page.locator(".jp-Dialog .jp-mod-accept").click(timeout=per_attempt)
                expect(first_prompt).to_have_text("[1]:", timeout=per_attempt)
        except (PlaywrightTimeout, AssertionError):
            # Close a half-open menu or dialog before trying again.
            page.keyboard.press("Escape")
            continue
        if in_place:
            expect(first_prompt).to_have_text("[1]:", timeout=timeout)
            wait_cells_done(page, timeout=timeout)
        return
    raise AssertionError(
        f"Run All never reached prompt [1]: in {notebook_path} after {attempts} attempts; "
        f"prompt reads {first_prompt.inner_text()!r}. Server log:\n{lab.log_tail()}"
    )


def contrast(locator: Locator) -> float:
    """WCAG contrast ratio of the element's text against the background behind it."""
    result = locator.evaluate(CONTRAST_JS)
    return float(result["ratio"])


def text_contrasts(roots: Locator) -> list[dict[str, Any]]:
    """Every visible text under the elements of ``roots``, each as ``{"text", "cls", "tag",
    "ratio", "fg", "bg"}`` (see :data:`AUDIT_JS`)."""
    result: list[dict[str, Any]] = roots.evaluate_all(AUDIT_JS)
    return result


def save_notebook(page: Page) -> None:
    """Save the open notebook (Ctrl+S) and wait until Lab no longer marks it dirty."""
    page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => !document.querySelector('.jp-DocumentWidget .lm-TabBar-tab.jp-mod-dirty, "
        ".lm-TabBar-tab.jp-mod-current.jp-mod-dirty')",
        timeout=30_000,
    )


def wait_cells_done(page: Page, *, timeout: float = 60_000) -> None:
    """Wait until every code cell has a numbered prompt (none queued ``[*]`` or never run)."""
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
            return prompts.length > 0 && prompts.every(p => /^\\[\\d+\\]:$/.test(p.textContent.trim()));
        }""",
        timeout=timeout,
    )


def error_outputs(page: Page) -> list[str]:
    """Texts of the error tracebacks currently shown in the notebook."""
    return page.locator(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    ).all_inner_texts()


def distinct_texts(locator: Locator, count: int, *, timeout: float = 30_000) -> list[str]:
    """Record ``count`` successive distinct texts of ``locator`` as it changes.

    Waits for the element first. Synchronises on Playwright's polling (``not_to_have_text``),
    not on sleeps; raises ``AssertionError`` if the text stops changing before ``count``
    values were seen within ``timeout`` ms in total.
    """
    from playwright.sync_api import expect

    deadline = time.monotonic() + timeout / 1000
    locator.wait_for(timeout=timeout)
    # textContent, like the `expect` below: innerText is "" for an element Lab's windowing has
    # not rendered (a cell scrolled out of view while Run All moves down the notebook).
    seen = [locator.text_content() or ""]
    while len(seen) < count:
        remaining_ms = max(1.0, (deadline - time.monotonic()) * 1000)
        try:
            expect(locator).not_to_have_text(seen[-1], timeout=remaining_ms)
        except AssertionError as exc:
            raise AssertionError(
                f"text stopped changing after {len(seen)} of {count} values: {seen}"
            ) from exc
        seen.append(locator.text_content() or "")
    return seen


def sample_text(page: Page, locator: Locator, n: int, interval: float) -> list[str]:
    """Read ``locator``'s text ``n`` times, ``interval`` seconds apart (a time series, e.g. to
    show that streamed text only grows). Sampling at a cadence is the point here, so this uses
    the page clock's ``wait_for_timeout`` rather than a condition."""
    samples = []
    for i in range(n):
        if i:
            page.wait_for_timeout(interval * 1000)
        samples.append(locator.inner_text())
    return samples


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as ``artifacts/screenshots/<name>.png``; returns its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
    path = SCREENSHOTS / f"{safe}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A directory under ``artifacts/`` (inside the Lab root, so Lab can open notebooks there),
    removed afterwards."""
    base = ARTIFACTS / "browser-notebooks"
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{prefix}-{secrets.token_hex(4)}"
    path.mkdir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def clean_notebook(notebook_path: str | Path) -> Iterator[Path]:
    """A copy of the repository's ``notebook_path`` with its outputs stripped, in a scratch
    directory (removed afterwards). Tests run this, never the working file: a person who tried
    the quick start has outputs and widget state autosaved into it."""
    from _notebooks import clean_copy

    with scratch_dir(Path(notebook_path).stem) as folder:
        yield clean_copy(REPO_ROOT / notebook_path, folder)


def write_notebook(path: Path, sources: list[str]) -> Path:
    """Write a Python 3 notebook with one code cell per source string."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    nbformat.write(nb, str(path))
    return path
