"""Binder launch: the `binder/` folder alone must be enough to run the quick-start notebook.

repo2docker reads only `binder/` when it exists (the root pyproject is *not* installed for us)
and runs `pip install -r binder/requirements.txt` from the repository root, so `-e .` there
resolves against the root. These tests rebuild that environment in a fresh venv the same way
and execute the quick-start notebook in that venv's kernel. They need PyPI (as CI has).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
BINDER = REPO / "binder"
QUICKSTART = Path("notebooks/01-quickstart.ipynb")
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


def _isolated_jupyter_env(venv_python: Path, home: Path) -> dict[str, str]:
    # Own Jupyter/IPython dirs so a user-level kernelspec cannot send the notebook to another
    # interpreter; the venv's bin first on PATH like an activated Binder image.
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"),
        IPYTHONDIR=str(home / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
        PATH=f"{venv_python.parent}{os.pathsep}{env.get('PATH', '')}",
    )
    env.pop("PYTHONPATH", None)
    return env


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
def test_quickstart_runs_in_a_venv_built_only_from_binder_requirements(tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    # From the repository root, as repo2docker does: that is what `-e .` resolves against.
    _pip_install(python, "-r", str(BINDER / "requirements.txt"), cwd=REPO)

    # Execute a copy of notebooks/ so the run leaves no session logs in the checkout; a last
    # cell proves the kernel was the Binder venv's and imported this checkout.
    workdir = tmp_path / "repo"
    shutil.copytree(REPO / "notebooks", workdir / "notebooks")
    notebook = workdir / QUICKSTART
    nb = nbformat.read(notebook, as_version=4)
    check = (
        "import sys, pathlib, agentloop_nb\n"
        f"assert sys.prefix == {str(tmp_path / 'venv')!r}, sys.prefix\n"
        "assert pathlib.Path(agentloop_nb.__file__).resolve().is_relative_to("
        f"{str(REPO)!r}), agentloop_nb.__file__\n"
        f"print({_MARK!r})"
    )
    nb.cells.append(nbformat.v4.new_code_cell(check))
    nbformat.write(nb, notebook)

    executed = tmp_path / "executed.ipynb"
    _run(
        [
            str(python.parent / "jupyter"),
            *("nbconvert", "--to", "notebook", "--execute", "--output", str(executed)),
            *("--ExecutePreprocessor.timeout=240", "--ExecutePreprocessor.kernel_name=python3"),
            str(notebook),
        ],
        cwd=notebook.parent,
        env=_isolated_jupyter_env(python, tmp_path / "jupyter-home"),
        timeout=300,
    )
    result = nbformat.read(executed, as_version=4)
    errors = [o for c in result.cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert errors == []
    last_output = "".join(o.get("text", "") for o in result.cells[-1].outputs)
    assert _MARK in last_output, json.dumps(result.cells[-1].outputs)[:2000]


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
