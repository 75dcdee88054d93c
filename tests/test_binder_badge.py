"""``scripts/binder_badge.sh`` points the README's Binder badge at the repository's origin."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAUNCH = "https://mybinder.org/v2/gh/{}/HEAD?urlpath=lab/tree/notebooks/01-quickstart.ipynb"


def _clone(tmp: Path, origin: str | None) -> Path:
    """A git work tree holding the README, binder/README.md and the script."""
    for rel in ("README.md", "binder/README.md", "scripts/binder_badge.sh"):
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp / rel)
    subprocess.run(["git", "init", "-q", str(tmp)], check=True)
    if origin is not None:
        subprocess.run(["git", "-C", str(tmp), "remote", "add", "origin", origin], check=True)
    return tmp


def _run(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/binder_badge.sh", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


@pytest.mark.parametrize(
    "origin",
    [
        "https://github.com/acme/agents.git",
        "git@github.com:acme/agents.git",
        "ssh://git@github.com/acme/agents",
    ],
)
def test_the_badge_follows_the_github_origin(tmp_path: Path, origin: str) -> None:
    tree = _clone(tmp_path, origin)
    result = _run(tree)
    assert result.returncode == 0, result.stderr
    readme = (tree / "README.md").read_text()
    badge = [line for line in readme.splitlines() if line.startswith("[![Binder]")]
    assert badge == [
        f"[![Binder](https://mybinder.org/badge_logo.svg)]({LAUNCH.format('acme/agents')})"
    ]
    assert f"    {LAUNCH.format('acme/agents')}" in (tree / "binder/README.md").read_text()
    assert _run(tree).returncode == 0 and (tree / "README.md").read_text() == readme  # idempotent


def test_an_explicit_slug_wins_and_a_non_github_origin_is_refused(tmp_path: Path) -> None:
    tree = _clone(tmp_path, "https://gitlab.com/acme/agents.git")
    refused = _run(tree)
    assert refused.returncode == 2 and "not a GitHub repository" in refused.stderr
    assert _run(tree, "someone/fork").returncode == 0
    assert LAUNCH.format("someone/fork") in (tree / "README.md").read_text()


def test_the_committed_readme_explains_its_badge() -> None:
    readme = (REPO / "README.md").read_text()
    (badge,) = [line for line in readme.splitlines() if line.startswith("[![Binder]")]
    if "OWNER" in badge:  # a placeholder is only allowed next to the step that replaces it
        assert "scripts/binder_badge.sh" in readme.split("\n## ", 1)[0]
