"""Static checks on the shipped notebooks (their execution is nbval's job in scripts/test.sh).

A notebook here is documentation *and* a test: it must be committed without outputs (so diffs
stay readable and no kernel paths or widget state leak into git), carry real ``assert``s on
kernel-side state (so executing it can fail), explain itself in markdown, run on the standard
``python3`` kernel, and never contain anything that looks like a credential.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
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
def test_notebook_is_valid_and_saved_without_outputs(name: str) -> None:
    nb = _read(NOTEBOOKS / name)
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
