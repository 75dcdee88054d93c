"""The notebook tools in a REAL kernel (nbclient): the kernel finds its notebook from
``JPY_SESSION_NAME`` as Jupyter Server sets it, the offline agent edits and runs cells of that
file, a run's variables land in the kernel, and a planted secret never reaches the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from _kernel_helpers import code_cell, execute, stdout_of
from _notebook_helpers import write_notebook

pytestmark = pytest.mark.kernel

CELL_TIMEOUT = 60


def run_cells(workdir: Path, *sources: str) -> list[str]:
    """Execute the cells in a fresh kernel (cwd ``workdir``); each cell's stdout. Any cell
    error fails the test."""
    return [stdout_of(c) for c in execute(workdir, [code_cell(s) for s in sources], CELL_TIMEOUT)]


def test_a_kernel_started_for_a_notebook_edits_and_runs_that_notebook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = write_notebook(tmp_path / "analysis.ipynb")
    # Jupyter Server names the notebook in the kernel's environment (relative to its root).
    monkeypatch.setenv("JPY_SESSION_NAME", "analysis.ipynb")
    out = run_cells(
        tmp_path,
        """
        %load_ext agentloop_nb
        import asyncio, json
        from agentloop_nb.llm.offline import OfflineModel
        _ = ctx.llm.register_adapter(["quick"], OfflineModel(token_delay=0))
        SERVICE_PASSWORD = "hunter2-not-for-models"
        %agent notebook
        %agent create a --notebook --edit always --provider quick --model m
        """,
        """
        async def say(prompt):
            a.followup(prompt)
            await asyncio.wait_for(a.when_idle(), 30)
            return a.session.derive_messages()[-1].text
        print(await say("cells"))
        print(await say("replace 2:\\nanswer = 6 * 7\\nprint(SERVICE_PASSWORD, answer)"))
        print(await say("run cell 2"))
        print(await say("cell 2"))
        assert answer == 42
        log = json.dumps([e.data for e in a.session.events], default=str)
        print("LEAK" if "hunter2" in log else "NO LEAK")
        """,
    )
    assert "notebook tools use: the notebook file analysis.ipynb (from JPY_SESSION_NAME)" in out[0]
    lines = out[1].splitlines()
    assert lines[0].startswith("I listed the notebook file analysis.ipynb: 5 cells")
    assert lines[1] == "Replaced the source of cell 2 (id cell2)."
    assert lines[2].startswith("Ran cell 2 (id cell2, code, execution")
    assert lines[3].startswith("I read cell 2 (id cell2, code, execution")
    assert lines[-1] == "NO LEAK"
    cell: Any = nbformat.read(str(target), as_version=4).cells[1]
    assert cell.source == "answer = 6 * 7\nprint(SERVICE_PASSWORD, answer)"
    assert cell.metadata["agentloop"]["agent"] == "a"
    # The file keeps what the cell printed (the notebook is the user's); the model saw it masked.
    assert cell.outputs[0]["text"] == "hunter2-not-for-models 42\n"
