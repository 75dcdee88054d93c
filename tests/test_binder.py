"""Binder launch: the `binder/` folder alone must be enough to run every notebook.

repo2docker reads only `binder/` when it exists (the root pyproject is *not* installed for us)
and runs `pip install -r binder/requirements.txt` from the repository root, so `-e .` there
resolves against the root. These tests rebuild that environment in a venv the same way and
execute every notebook under `notebooks/` in that venv's kernel (the quick start installs the
same file, so this is its check too). They need PyPI (as CI has) the first time: the venv is
cached under `.cache/binder-venv/` keyed by the requirements, `pyproject.toml`, the Python
version and the checkout's path, and rebuilt from scratch when any of them changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
BINDER = REPO / "binder"
QUICKSTART = Path("notebooks/01-quickstart.ipynb")
NOTEBOOKS = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
CACHE = REPO / ".cache" / "binder-venv"
# Cold installs from PyPI on a 2-core machine; the per-test default of 60 s is for unit tests.
pytestmark = pytest.mark.timeout(600)

_MARK = "binder-kernel-ok"


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float) -> str:
    """Run ``cmd``; on a non-zero exit fail with the tail of its output. Returns stdout+stderr."""
    result = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-60:])
        pytest.fail(f"{' '.join(cmd)} exited {result.returncode}:\n{tail}", pytrace=False)
    return result.stdout


def _venv(path: Path) -> Path:
    """A fresh venv at ``path`` (same Python as the tests: Binder's runtime.txt pins 3.11)."""
    _run([sys.executable, "-m", "venv", str(path)], cwd=path.parent, timeout=120)
    return path / "bin" / "python"


def _pip_install(python: Path, *args: str, cwd: Path) -> None:
    _run(
        [str(python), "-m", "pip", "install", "--progress-bar", "off", "-q", *args],
        cwd=cwd,
        timeout=480,
    )


def _binder_user_env(venv_python: Path, home: Path) -> dict[str, str]:
    # A Binder-like user: its own HOME (so ~/.jupyter, ~/.local and ~/.ipython are fresh and a
    # user-level kernelspec cannot send the notebook to another interpreter) and the venv's
    # bin first on PATH, like the activated image.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("JUPYTER") and k not in ("IPYTHONDIR", "PYTHONPATH")
    }
    env.update(HOME=str(home), PATH=f"{venv_python.parent}{os.pathsep}{env.get('PATH', '')}")
    return env


@dataclass(frozen=True)
class BinderEnv:
    python: Path
    env: dict[str, str]
    workdir: Path  # a copy of the notebooks, laid out as in the repository


def _cached_binder_venv() -> Path:
    """The venv built only from binder/requirements.txt (cached; see the module docstring)."""
    key = hashlib.sha256()
    for part in (BINDER / "requirements.txt", REPO / "pyproject.toml"):
        key.update(part.read_bytes())
    key.update(f"{sys.version}|{REPO}".encode())
    venv = CACHE / key.hexdigest()[:16]
    done = venv / "agentloop-binder-ok"
    if done.exists():
        return venv / "bin" / "python"
    shutil.rmtree(CACHE, ignore_errors=True)  # older keys: never reused
    CACHE.mkdir(parents=True)
    python = _venv(venv)
    # From the repository root, as repo2docker does: that is what `-e .` resolves against.
    _pip_install(python, "-r", str(BINDER / "requirements.txt"), cwd=REPO)
    done.write_text("built from binder/requirements.txt\n", encoding="utf-8")
    return python


@pytest.fixture(scope="module")
def binder_env(tmp_path_factory: pytest.TempPathFactory) -> BinderEnv:
    """A venv built only from binder/requirements.txt, with binder/postBuild applied."""
    root = tmp_path_factory.mktemp("binder")
    python = _cached_binder_venv()
    home = root / "home"
    home.mkdir()
    env = _binder_user_env(python, home)
    if (BINDER / "postBuild").exists():
        _run([str(BINDER / "postBuild")], cwd=REPO, env=env, timeout=120)
    # Run against a copy of notebooks/ so executions leave no session logs in the checkout.
    workdir = root / "repo"
    shutil.copytree(REPO / "notebooks", workdir / "notebooks")
    return BinderEnv(python, env, workdir)


def test_binder_runtime_pins_python_311() -> None:
    assert (BINDER / "runtime.txt").read_text(encoding="utf-8").strip() == "python-3.11"


def test_binder_requirements_install_this_repo_editable_with_jupyterlab() -> None:
    lines = [
        line.strip()
        for line in (BINDER / "requirements.txt").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert "-e ." in lines, lines
    assert any(line.lower().startswith("jupyterlab") for line in lines), lines


@pytest.mark.kernel
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_notebook_runs_in_a_venv_built_only_from_binder_requirements(
    binder_env: BinderEnv, tmp_path: Path, name: str
) -> None:
    notebook = binder_env.workdir / "notebooks" / name
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:  # a copy someone ran by hand: execute it from clean
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    # A last cell proves the kernel was the Binder venv's and imported this checkout.
    check = (
        "import sys, pathlib, agentloop_nb\n"
        f"assert sys.prefix == {str(binder_env.python.parent.parent)!r}, sys.prefix\n"
        "assert pathlib.Path(agentloop_nb.__file__).resolve().is_relative_to("
        f"{str(REPO)!r}), agentloop_nb.__file__\n"
        f"print({_MARK!r})"
    )
    nb.cells.append(nbformat.v4.new_code_cell(check))
    checked = notebook.with_name(f"{notebook.stem}-checked.ipynb")
    nbformat.write(nb, checked)

    executed = tmp_path / "executed.ipynb"
    _run(
        [
            str(binder_env.python.parent / "jupyter"),
            *("nbconvert", "--to", "notebook", "--execute", "--output", str(executed)),
            *("--ExecutePreprocessor.timeout=240", "--ExecutePreprocessor.kernel_name=python3"),
            str(checked),
        ],
        cwd=notebook.parent,
        env=binder_env.env,
        timeout=300,
    )
    result = nbformat.read(executed, as_version=4)
    # A cell tagged raises-exception shows a failure on purpose (nbval's convention,
    # and nbconvert runs on past it); any other error output is a broken notebook.
    errors = [
        o
        for c in result.cells
        if "raises-exception" not in c.get("metadata", {}).get("tags", [])
        for o in c.get("outputs", [])
        if o["output_type"] == "error"
    ]
    assert errors == []
    last_output = "".join(o.get("text", "") for o in result.cells[-1].outputs)
    assert _MARK in last_output, json.dumps(result.cells[-1].outputs)[:2000]


def test_binder_lab_lands_on_the_quickstart_notebook(binder_env: BinderEnv) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = secrets.token_hex(8)
    cmd = [
        str(binder_env.python.parent / "jupyter"),
        *("lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--port-retries=0"),
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={binder_env.workdir}",
    ]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = binder_env.workdir / "lab.log"
    with log.open("wb") as log_file:
        server = subprocess.Popen(
            cmd,
            cwd=binder_env.workdir,
            env=binder_env.env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            location = _root_redirect(f"http://127.0.0.1:{port}/?token={token}", server)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    assert location is not None, log.read_text(errors="replace")[-3000:]
    assert urllib.parse.urlsplit(location).path == f"/lab/tree/{QUICKSTART.as_posix()}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _root_redirect(url: str, server: subprocess.Popen[bytes], timeout: float = 90) -> str | None:
    """Where the server redirects ``url`` to, polling until it answers (None if it never does)."""
    opener = urllib.request.build_opener(_NoRedirect)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        try:
            opener.open(url, timeout=5)
        except urllib.error.HTTPError as exc:
            if exc.code in (301, 302, 303, 307, 308):
                return exc.headers["Location"]
            raise
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            # Not listening yet: a server start has no readiness callback to wait on.
            time.sleep(0.2)
            continue
        return None  # answered without a redirect
    return None


def test_repo2docker_builds_from_binder_folder_with_python_311(tmp_path: Path) -> None:
    # A Docker-free lint: `--no-build --debug` prints the Dockerfile repo2docker would build.
    python = _venv(tmp_path / "r2d")
    _pip_install(python, "jupyter-repo2docker", cwd=tmp_path)
    out = _run(
        [str(python.parent / "jupyter-repo2docker"), "--no-build", "--debug", str(REPO)],
        cwd=tmp_path,
        timeout=120,
    )
    assert "python=3.11" in out
    install = out.find('pip install --no-cache-dir -r "binder/requirements.txt"')
    copy_repo = out.find("src/ ${REPO_DIR}/")
    # `-e .` needs the whole repo in place before the install runs.
    assert 0 <= copy_repo < install, out[-3000:]
