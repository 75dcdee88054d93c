"""Static checks on the shipped notebooks (their execution is nbval's job in scripts/test.sh).

A notebook here is documentation *and* a test: it must be committed without outputs (so diffs
stay readable and no kernel paths or widget state leak into git; checked on what git tracks,
so a quick start that autosaved outputs into the working file does not fail it), carry real ``assert``s on
kernel-side state (so executing it can fail), explain itself in markdown, run on the standard
``python3`` kernel, and never contain anything that looks like a credential.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from _notebooks import clean_copy, strip_outputs, tracked_text
from IPython.core.inputtransformer2 import TransformerManager

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
EXPECTED = [
    "01-quickstart.ipynb",
    "02-tools-and-the-pool.ipynb",
    "03-plugins-as-cells.ipynb",
    "04-sessions-and-resume.ipynb",
    "05-real-models.ipynb",
    "06-the-agent-in-your-kernel.ipynb",
    "07-long-sessions.ipynb",
    "08-subagents-fork-replay.ipynb",
    "09-mcp.ipynb",
    "10-scale.ipynb",
    "11-co-author.ipynb",
    "12-fix-undo-why.ipynb",
]
# Shapes of real provider keys (OpenAI/DeepSeek "sk-...", Anthropic "sk-ant-..."): long runs
# after the prefix. Demo strings such as "sk-abc123" are far shorter.
_KEY_LIKE = re.compile(r"sk-(?:ant-)?[A-Za-z0-9_-]{20,}")
_NOTEBOOK_MENTION = re.compile(r"\b\d\d-[a-z0-9-]+\.ipynb\b")


def _paths() -> list[Path]:
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _python(source: str) -> ast.Module:
    """The cell as plain Python (IPython magics transformed away), parsed."""
    return ast.parse(TransformerManager().transform_cell(source))


def _cell_magic_body(source: str) -> str | None:
    """The body of a ``%%plugin`` cell (plain Python run as a plugin), else ``None``."""
    first, _, rest = source.partition("\n")
    return rest if first.startswith("%%plugin") else None


def test_the_tutorial_notebooks_are_present_and_nothing_else() -> None:
    assert [p.name for p in _paths()] == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_is_committed_without_outputs(name: str) -> None:
    # What git tracks, not the working file: running the quick start (JupyterLab autosaves
    # outputs into it) must not break the test command.
    nb = nbformat.reads(tracked_text(NOTEBOOKS / name), as_version=4)
    nbformat.validate(nb)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name} cell {index} has saved outputs: clear them"
            assert cell.execution_count is None, f"{name} cell {index} has an execution count"
    assert "widgets" not in nb.metadata, f"{name} carries saved widget state"


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_runs_on_the_standard_python3_kernel(name: str) -> None:
    assert _read(NOTEBOOKS / name).metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_cell_ids_are_unique(name: str) -> None:
    ids = [cell.get("id") for cell in _read(NOTEBOOKS / name).cells]
    assert None not in ids and len(set(ids)) == len(ids), ids


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_asserts_on_kernel_state_so_executing_it_is_a_test(name: str) -> None:
    asserts = 0
    for cell in _read(NOTEBOOKS / name).cells:
        if cell.cell_type != "code":
            continue
        body = _cell_magic_body(cell.source)
        tree = _python(body if body is not None else cell.source)
        asserts += sum(isinstance(node, ast.Assert) for node in ast.walk(tree))
    assert asserts >= 3, f"{name} has only {asserts} assert statement(s)"


@pytest.mark.parametrize("name", EXPECTED)
def test_every_code_cell_parses_as_ipython(name: str) -> None:
    for index, cell in enumerate(_read(NOTEBOOKS / name).cells):
        if cell.cell_type != "code":
            continue
        body = _cell_magic_body(cell.source)
        try:
            _python(body if body is not None else cell.source)
        except SyntaxError as exc:  # pragma: no cover - the assertion message is the point
            pytest.fail(f"{name} cell {index} does not parse: {exc}")


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_opens_with_a_title_and_explains_itself_in_markdown(name: str) -> None:
    cells = _read(NOTEBOOKS / name).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# "), name
    prose = [c for c in cells if c.cell_type == "markdown"]
    words = sum(len(c.source.split()) for c in prose)
    assert len(prose) >= 4 and words >= 250, f"{name}: {len(prose)} markdown cells, {words} words"


@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_contains_nothing_shaped_like_an_api_key(name: str) -> None:
    text = (NOTEBOOKS / name).read_text(encoding="utf-8")
    assert not _KEY_LIKE.search(text), f"{name} contains something shaped like an API key"


@pytest.mark.parametrize("name", EXPECTED)
def test_notebooks_mentioned_in_prose_exist(name: str) -> None:
    text = "\n".join(c.source for c in _read(NOTEBOOKS / name).cells if c.cell_type == "markdown")
    missing = sorted({m for m in _NOTEBOOK_MENTION.findall(text) if not (NOTEBOOKS / m).exists()})
    assert missing == [], f"{name} mentions missing notebooks {missing}"


def test_quickstart_needs_no_test_only_helpers_so_binder_can_run_it() -> None:
    # Binder installs only binder/requirements.txt: the quick start must stick to the package
    # and its runtime dependencies, with the offline model (no key, no network).
    source = "\n".join(c.source for c in _read(NOTEBOOKS / EXPECTED[0]).cells)
    assert "agentloop_nb.testing" not in source
    assert "%load_ext agentloop_nb" in source
    for provider in ("openai", "anthropic", "deepseek", "ollama", "vllm"):
        assert f"--provider {provider}" not in source


def test_real_model_cells_read_keys_from_the_environment_only() -> None:
    nb = _read(NOTEBOOKS / "05-real-models.ipynb")
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        # An explicit key in a cell would end up in the saved notebook and its outputs.
        assert not re.search(r"api_key\s*[=:]\s*['\"]", cell.source), f"cell {index}"
        if "def have_key" in cell.source:  # the helper cell names variables, never values
            continue
        # A cell that needs a key checks for it first, so it skips cleanly without one.
        for variable in re.findall(r"[A-Z]+_API_KEY", cell.source):
            assert f'have_key("{variable}")' in cell.source, (index, variable)


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _run_by_hand(path: Path) -> None:
    """What trying the quick start does to a notebook: outputs, counts and widget state."""
    nb = nbformat.read(path, as_version=4)
    for k, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.execution_count = k + 1
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nbformat.write(nb, str(path))


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_notebook_run_by_hand_is_checked_as_committed_and_copied_clean(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    _git(repo, "init", "-q")
    shipped = repo / "notebooks" / "01-quickstart.ipynb"
    shipped.write_text(tracked_text(NOTEBOOKS / "01-quickstart.ipynb"), encoding="utf-8")
    _git(repo, "add", ".")
    _run_by_hand(shipped)
    # The working file has outputs; the check reads what git would commit.
    assert any(c.get("outputs") for c in _read(shipped).cells)
    tracked = nbformat.reads(tracked_text(shipped, repo), as_version=4)
    assert all(not c.get("outputs") for c in tracked.cells)
    assert "widgets" not in tracked.metadata
    # The browser tests run a clean copy: the working file's sources, no outputs.
    copy = clean_copy(shipped, tmp_path)
    cleaned = _read(copy)
    assert [c.source for c in cleaned.cells] == [c.source for c in _read(shipped).cells]
    assert all(
        not c.get("outputs") and c.get("execution_count") is None
        for c in cleaned.cells
        if c.cell_type == "code"
    )
    assert "widgets" not in cleaned.metadata
    with pytest.raises(FileNotFoundError, match="does not track"):
        tracked_text(repo / "notebooks" / "untracked.ipynb", repo)
    assert strip_outputs(_read(shipped)).metadata.get("widgets") is None
