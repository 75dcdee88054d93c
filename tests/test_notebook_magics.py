"""``%agent create NAME --notebook``, ``%agent notebook PATH`` and the offline model's notebook
phrases (``cells``, ``cell N``, ``insert after N: CODE``, ``replace N: CODE``, ``delete N``,
``run cell N``), in an in-process shell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from _notebook_helpers import write_notebook

import agentloop_nb.jupyter as J
from agentloop_nb.llm.offline import OfflineModel

pytestmark = pytest.mark.anyio


def magic(shell: Any, capsys: pytest.CaptureFixture[str], line: str) -> tuple[str, str]:
    shell.run_line_magic("agent", line)
    out = capsys.readouterr()
    return out.out.strip(), out.err.strip()


async def test_agent_notebook_attaches_a_file_and_says_which_one_the_tools_use(
    shell: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, _ = magic(shell, capsys, "notebook")
    assert out.startswith("notebook tools use: no notebook is connected")
    path = write_notebook(tmp_path / "work.ipynb")
    out, _ = magic(shell, capsys, f"notebook {path}")
    assert out == f"notebook tools use {path}"
    assert J.notebook().path == str(path)
    out, _ = magic(shell, capsys, "notebook")
    assert "(attached)" in out and str(path) in out
    _, err = magic(shell, capsys, f"notebook {tmp_path / 'missing.ipynb'}")
    assert err.startswith("UsageError: %agent notebook: no notebook at")
    out, _ = magic(shell, capsys, "notebook --detach")
    assert out == f"detached {path}"


async def test_create_with_notebook_gives_kernel_and_notebook_tools(
    shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out, err = magic(shell, capsys, "create a --notebook --edit never")
    assert err == ""
    assert "with kernel tools (run_python: ask) and notebook tools (edits: never)" in out
    agent = shell.user_ns["a"]
    names = {d.name for d in agent.ctx.tools.definitions(agent)}
    assert {"list_cells", "read_cell", "run_python"} <= names and "replace_cell" not in names
    _, err = magic(shell, capsys, "create b --edit always")
    assert err == "UsageError: %agent create: --edit needs --notebook"
    assert "b" not in shell.user_ns


async def test_the_offline_model_drives_every_notebook_tool(
    shell: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_notebook(tmp_path / "work.ipynb")
    J.app().ctx.llm.register_adapter(["quick"], OfflineModel(token_delay=0))
    magic(shell, capsys, f"notebook {path}")
    magic(shell, capsys, "create a --notebook --edit always --provider quick --model m")
    agent = shell.user_ns["a"]

    async def say(prompt: str) -> str:
        agent.followup(prompt)
        await agent.when_idle()
        return str(agent.session.derive_messages()[-1].text)

    assert (await say("cells")).startswith("I listed the notebook file work.ipynb: 5 cells")
    answer = await say("cell 3")
    assert answer.startswith("I read cell 3 (id cell3, code, execution 2, error)")
    assert answer.endswith("it shows the error ZeroDivisionError: division by zero.")
    assert (await say("insert after 1: y = 2")).startswith("Inserted code cell 2 (id ")
    assert (await say("replace 3:\nx = 5\nprint(x)")) == "Replaced the source of cell 3 (id cell2)."
    assert (await say("delete 4")) == "Deleted cell 4 (id cell3); 5 cells remain."
    answer = await say("run cell 3")
    assert answer.startswith("Ran cell 3 (id cell2, code, execution")
    assert shell.user_ns["x"] == 5
    assert (await say("cell 9")) == (
        "The notebook tool read_cell failed: there is no cell 9: valid positions are 1..5."
    )
    cells = nbformat.read(str(path), as_version=4).cells
    assert [c.source for c in cells] == [
        "# Sales report",
        "y = 2",
        "x = 5\nprint(x)",
        "plt.plot([1, 2])",
        "styled",
    ]
    assert cells[2].outputs[0]["text"] == "5\n"


async def test_the_offline_model_says_which_plugin_a_notebook_phrase_needs(
    shell: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    J.app().ctx.llm.register_adapter(["quick"], OfflineModel(token_delay=0))
    magic(shell, capsys, "create a --provider quick --model m")
    agent = shell.user_ns["a"]
    agent.followup("cells")
    await agent.when_idle()
    answer = agent.session.derive_messages()[-1].text
    assert answer.startswith(
        "I would call 'list_cells', but it is not offered: use notebook_tools."
    )
