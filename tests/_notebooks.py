"""The shipped notebooks as git tracks them, and clean copies for tests that run them.

Trying the quick start (JupyterLab autosaves outputs and widget state into ``notebooks/01``)
must not break the test command: the "committed without outputs" check reads the version git
would commit (the index), and the browser tests run a copy with outputs stripped, never the
working file a person may have run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parents[1]


def tracked_text(path: Path, root: Path = REPO_ROOT) -> str:
    """The text of ``path`` as staged in git's index (what a commit would hold); the working
    file when ``root`` is not a git checkout (an unpacked source archive) or git is missing.
    Raises ``FileNotFoundError`` when git does not track ``path``."""
    git = shutil.which("git")
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    if git is None or not (root / ".git").exists():
        return path.read_text(encoding="utf-8")
    done = subprocess.run(
        [git, "-C", str(root), "show", f":{rel}"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        check=False,
    )
    if done.returncode != 0:
        raise FileNotFoundError(f"git does not track {rel}: {done.stderr.strip()}")
    return done.stdout


def strip_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` without outputs, execution counts or saved widget state (changed in place)."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata.pop("widgets", None)
    return nb


def clean_copy(notebook: Path, folder: Path) -> Path:
    """Write ``notebook`` (the working file: a developer's edits count) into ``folder`` with
    its outputs stripped; returns the copy's path."""
    nb = strip_outputs(nbformat.read(notebook, as_version=4))
    target = folder / notebook.name
    nbformat.write(nb, str(target))
    return target


__all__ = ["REPO_ROOT", "clean_copy", "strip_outputs", "tracked_text"]
