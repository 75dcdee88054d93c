"""The notebook tools as a model uses them: every tool on a ``NotebookFile`` and on a fake
JupyterLab bridge, bad input, bounded outputs, secrets and "no notebook is connected".

Driven through a real agent (scripted model) in an in-process IPython shell with the
extension loaded, so results come from the tool pipeline and land in the session log."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _notebook_helpers import (
    FakeBridge,
    calls,
    content_text,
    make_agent,
    png_b64,
    run,
    write_notebook,
)

from agentloop_nb.jupyter import _state
from agentloop_nb.jupyter.notebook import (
    BridgeDocument,
    NotebookDocument,
    NotebookFile,
    notebook_tools,
)
from agentloop_nb.testing import text, tool_call

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["file", "bridge"])
def doc(request: Any, shell: Any, tmp_path: Path) -> tuple[NotebookDocument, Any]:
    """``(document, backing)``: a NotebookFile and its path, or a BridgeDocument and its fake
    front end; both hold the same sample notebook, attached to the kernel's provider."""
    st = _state.state()
    if request.param == "file":
        path = write_notebook(tmp_path / "work.ipynb")
        document: NotebookDocument = st.notebooks.attach(path)
        return document, path
    bridge = FakeBridge()
    st.notebooks.set_bridge(bridge)
    return st.notebooks.current(), bridge


def sources(backing: Any) -> list[str]:
    if isinstance(backing, FakeBridge):
        return [backing.source(i + 1) for i in range(len(backing.cells))]
    return [c.source for c in nbformat.read(str(backing), as_version=4).cells]


def raw_cells(backing: Any) -> list[dict[str, Any]]:
    if isinstance(backing, FakeBridge):
        return backing.cells
    return list(nbformat.read(str(backing), as_version=4).cells)


async def test_list_cells_gives_one_line_per_cell_with_state_and_outputs(doc: Any) -> None:
    agent = make_agent(calls(("list_cells", {})))
    notebook_tools(agent, edit="never")
    [result] = await run(agent)
    lines = content_text(result).splitlines()
    assert "5 cells; cells 1..5" in lines[0]
    assert lines[1] == "1. cell1 markdown ok: # Sales report"
    assert lines[2] == "2. cell2 code [1] ok: x = 1 (+1 lines) → stdout 1 line"
    assert lines[3] == "3. cell3 code [2] error: 1/0 → ZeroDivisionError: division by zero"
    assert lines[4].startswith("4. cell4 code [3] ok: plt.plot([1, 2]) → image/png")
    assert lines[5] == "5. cell5 code [4] ok: styled → region | units"


async def test_read_cell_shows_the_error_without_ansi_and_the_plot_as_an_image(doc: Any) -> None:
    agent = make_agent(calls(("read_cell", {"cell": 3}), ("read_cell", {"cell": "cell4"})))
    notebook_tools(agent, edit="never")
    error, plot = await run(agent)
    text3 = content_text(error)
    assert text3.startswith("cell 3 (id cell3, code, execution 2, error)")
    assert "source:\n1/0" in text3
    assert "error: ZeroDivisionError: division by zero" in text3
    assert "----> 1 1/0" in text3 and "\x1b" not in text3
    blocks = plot["content"]
    assert [b["type"] for b in blocks] == ["text", "image"]
    assert blocks[1]["media_type"] == "image/png" and blocks[1]["data"] == png_b64()
    assert "[image/png attached as image 1]" in blocks[0]["text"]


async def test_read_cell_shows_an_html_table_as_text_when_plain_text_is_an_address(
    doc: Any,
) -> None:
    agent = make_agent(calls(("read_cell", {"cell": 5})))
    notebook_tools(agent, edit="never")
    [result] = await run(agent)
    assert "value: region | units\nnorth | 3" in content_text(result)
    assert "0x7f00deadbeef" not in content_text(result)


async def test_insert_replace_delete_change_the_notebook_and_are_logged(doc: Any) -> None:
    _document, backing = doc
    agent = make_agent(
        calls(
            ("list_cells", {}),
            ("insert_cell", {"after": 1, "source": "y = 2"}),
            ("replace_cell", {"cell": 3, "source": "print(x + 1)"}),
            ("delete_cell", {"cell": "cell3"}),
        )
    )
    notebook_tools(agent, edit="always")
    _listed, inserted, replaced, deleted = await run(agent)
    assert not any(r["is_error"] for r in (inserted, replaced, deleted)), (
        inserted,
        replaced,
        deleted,
    )
    assert sources(backing) == [
        "# Sales report",
        "y = 2",
        "print(x + 1)",
        "plt.plot([1, 2])",
        "styled",
    ]
    cells = raw_cells(backing)
    stamp = cells[1]["metadata"]["agentloop"]
    assert stamp == {
        "agent": "nb",
        "session": agent.session.id,
        "turn": 1,
        "call_id": "c2",
    }
    assert cells[2]["metadata"]["agentloop"]["call_id"] == "c3"
    assert content_text(inserted).startswith("Inserted code cell 2 (id ")
    assert inserted["meta"]["notebook"]["op"] == "insert"
    assert inserted["meta"]["notebook"]["new_source"] == "y = 2"
    assert replaced["meta"]["notebook"] == {
        "op": "replace",
        "cell_id": "cell2",
        "old_source": "x = 1\nprint(x)",
        "new_source": "print(x + 1)",
        "position": 3,
    }
    assert deleted["meta"]["notebook"]["old_source"] == "1/0"
    assert content_text(deleted) == "Deleted cell 4 (id cell3); 5 cells remain."


async def test_unknown_position_stale_id_and_bad_insert_are_clear_errors(doc: Any) -> None:
    _document, backing = doc
    agent = make_agent(
        calls(
            ("read_cell", {"cell": 9}),
            ("read_cell", {"cell": "gone-id"}),
            ("insert_cell", {"after": 6, "source": "z"}),
            ("replace_cell", {"cell": 0, "source": "z"}),
            ("list_cells", {"start": 7}),
            ("run_cell", {"cell": 1}),
        )
    )
    notebook_tools(agent, edit="always")
    results = await run(agent)
    texts = [content_text(r) for r in results]
    assert all(r["is_error"] for r in results), texts
    assert texts[0] == "Error: there is no cell 9: valid positions are 1..5"
    assert "no cell has the id 'gone-id'" in texts[1] and "list_cells()" in texts[1]
    assert "valid values are 0..5" in texts[2]
    assert texts[3] == "Error: there is no cell 0: valid positions are 1..5"
    assert "valid positions are 1..5" in texts[4]
    assert "markdown cell; only code cells run" in texts[5]
    assert len(sources(backing)) == 5


async def test_an_edit_of_a_cell_changed_since_it_was_read_is_a_conflict(doc: Any) -> None:
    _document, backing = doc

    def user_types(_options: Any) -> Any:
        # Between the agent's read and its edit, the user changes cell 2 on their side.
        if isinstance(backing, FakeBridge):
            backing.cells[1]["source"] = "x = 100"
        else:
            nb = nbformat.read(str(backing), as_version=4)
            nb.cells[1].source = "x = 100"
            nbformat.write(nb, str(backing))
        return tool_call("c2", "replace_cell", {"cell": 2, "source": "x = 2"})

    agent = make_agent([tool_call("c1", "read_cell", {"cell": 2}), user_types, text("ok")])
    notebook_tools(agent, edit="always")
    _read, replaced = await run(agent)
    assert replaced["is_error"]
    assert "conflict: cell 2 (id cell2) changed since you read it" in content_text(replaced)
    assert sources(backing)[1] == "x = 100"


async def test_a_cell_the_user_is_typing_in_is_not_overwritten() -> None:
    bridge = FakeBridge()
    bridge.editing.add("cell2")
    document = BridgeDocument(bridge)
    with pytest.raises(Exception) as info:
        await document.replace("cell2", "new", "x = 1\nprint(x)", {})
    assert getattr(info.value, "code", None) == "conflict"
    assert bridge.source(2) == "x = 1\nprint(x)"


async def test_a_bridge_that_disconnects_gives_an_error_result_not_a_traceback(shell: Any) -> None:
    bridge = FakeBridge()
    _state.state().notebooks.set_bridge(bridge)

    def disconnect(_options: Any) -> Any:
        bridge.connected = False
        return tool_call("c2", "replace_cell", {"cell": 2, "source": "x"})

    agent = make_agent([tool_call("c1", "list_cells", {}), disconnect, text("ok")])
    notebook_tools(agent, edit="always")
    _listed, replaced = await run(agent)
    assert replaced["is_error"] and "no notebook is connected" in content_text(replaced)
    assert bridge.source(2) == "x = 1\nprint(x)"


async def test_run_cell_on_a_file_runs_in_this_kernel_and_writes_the_outputs(
    shell: Any, tmp_path: Path
) -> None:
    path = write_notebook(tmp_path / "work.ipynb")
    _state.state().notebooks.attach(path)
    agent = make_agent(
        calls(
            (
                "replace_cell",
                {"cell": 2, "source": "ran_value = 41 + 1\nprint('hello')\nran_value"},
            ),
            ("run_cell", {"cell": 2}),
            ("run_cell", {"cell": 3}),
        )
    )
    notebook_tools(agent, edit="always")
    _replaced, ran, failed = await run(agent)
    assert shell.user_ns["ran_value"] == 42
    text2 = content_text(ran)
    assert text2.startswith("Ran cell 2 (id cell2, code, execution")
    assert "stdout:\nhello" in text2 and "value: 42" in text2
    cell = nbformat.read(str(path), as_version=4).cells[1]
    assert [o["output_type"] for o in cell.outputs] == ["stream", "execute_result"]
    assert cell.outputs[1]["data"]["text/plain"] == "42"
    assert not failed["is_error"]  # the tool worked; the cell's own error is its output
    assert "error: ZeroDivisionError: division by zero" in content_text(failed)
    err = nbformat.read(str(path), as_version=4).cells[2].outputs[-1]
    assert (err["output_type"], err["ename"]) == ("error", "ZeroDivisionError")


async def test_run_cell_through_the_bridge_reports_a_cell_still_running(shell: Any) -> None:
    bridge = FakeBridge()
    _state.state().notebooks.set_bridge(bridge)
    agent = make_agent(calls(("run_cell", {"cell": 2, "timeout": 5}), ("run_cell", {"cell": 2})))
    notebook_tools(agent, edit="always")
    bridge.hang = True  # the front end answers "finished: false" at the timeout
    first, second = await run(agent)
    assert "still running after 5 s" in content_text(first)
    assert "read_cell(2) later" in content_text(first)
    assert first["meta"]["notebook"]["finished"] is False
    assert "still running after 60 s" in content_text(second)
    assert [op for op, _ in bridge.requests if op == "run"] == ["run", "run"]
    assert bridge.requests[-1][1] == {"id": "cell2", "timeout": 60.0}


async def test_huge_outputs_are_bounded_and_at_most_three_images_attached(
    shell: Any, tmp_path: Path
) -> None:
    v4 = nbformat.v4
    lines = "".join(f"line {i}\n" for i in range(100_000))
    images = [v4.new_output("display_data", data={"image/png": png_b64()}) for _ in range(5)]
    big = v4.new_output("display_data", data={"image/png": png_b64(size=(900, 900), noise=True)})
    cells = [
        v4.new_code_cell(
            "for i in range(100000): print('line', i)",
            outputs=[v4.new_output("stream", name="stdout", text=lines)],
        ),
        v4.new_code_cell("show()", outputs=images),
        v4.new_code_cell("big()", outputs=[big]),
    ]
    path = write_notebook(tmp_path / "big.ipynb", cells)
    _state.state().notebooks.attach(path)
    agent = make_agent(
        calls(("read_cell", {"cell": 1}), ("read_cell", {"cell": 2}), ("read_cell", {"cell": 3}))
    )
    notebook_tools(agent, edit="never", max_output_chars=2000)
    streamed, many, large = await run(agent)
    text1 = content_text(streamed)
    assert len(text1) <= 2000
    assert "line 0" in text1 and "line 99999" in text1 and "lines dropped" in text1
    assert [b["type"] for b in many["content"]].count("image") == 3
    assert content_text(many).count("not attached, 3 images per call at most") == 2
    assert len(big["data"]["image/png"]) * 3 // 4 > 1_000_000  # the source is over 1 MB
    [_t, image] = large["content"]
    import base64

    assert len(base64.b64decode(image["data"])) <= 1_000_000
    assert "downscaled to" in content_text(large)


async def test_a_thousand_cell_notebook_is_listed_in_bounded_pages(
    shell: Any, tmp_path: Path
) -> None:
    cells = [nbformat.v4.new_code_cell(f"value_{i} = {i}  # " + "x" * 200) for i in range(1000)]
    path = write_notebook(tmp_path / "long.ipynb", cells)
    _state.state().notebooks.attach(path)
    agent = make_agent(calls(("list_cells", {}), ("list_cells", {"start": 990, "count": 50})))
    notebook_tools(agent, edit="never", max_output_chars=4000)
    first, last = await run(agent)
    text1 = content_text(first)
    assert len(text1) <= 4000 and "1000 cells" in text1
    assert text1.splitlines()[1].startswith("1. ")
    assert text1.splitlines()[-1].startswith("… ") and "list_cells(start=" in text1
    text2 = content_text(last)
    assert text2.splitlines()[-1].startswith("1000. ") and "more" not in text2.splitlines()[-1]


async def test_secrets_are_masked_in_what_the_tools_return_and_log(
    shell: Any, tmp_path: Path
) -> None:
    secret = "sk-live-very-secret-0042"
    shell.user_ns["OPENAI_API_KEY"] = secret
    v4 = nbformat.v4
    cells = [
        v4.new_code_cell(
            f'OPENAI_API_KEY = "{secret}"\nprint(OPENAI_API_KEY)',
            outputs=[v4.new_output("stream", name="stdout", text=secret + "\n")],
        ),
        v4.new_code_cell(
            "raise ValueError(OPENAI_API_KEY)",
            outputs=[
                v4.new_output(
                    "error", ename="ValueError", evalue=secret, traceback=[f"ValueError: {secret}"]
                )
            ],
        ),
    ]
    path = write_notebook(tmp_path / "secret.ipynb", cells)
    _state.state().notebooks.attach(path)
    agent = make_agent(
        calls(
            ("list_cells", {}),
            ("read_cell", {"cell": 1}),
            ("read_cell", {"cell": 2}),
            ("replace_cell", {"cell": 1, "source": "print('rotated')"}),
        )
    )
    notebook_tools(agent, edit="always")
    results = await run(agent)
    assert all("[secret]" in content_text(r) for r in results[:3])
    log = json.dumps([e.data for e in agent.session.events], default=str)
    assert secret not in log
    assert results[3]["meta"]["notebook"]["old_source"].startswith('OPENAI_API_KEY = "[secret]"')


async def test_every_tool_without_a_notebook_says_none_is_connected(shell: Any) -> None:
    agent = make_agent(
        calls(
            ("list_cells", {}),
            ("read_cell", {"cell": 1}),
            ("insert_cell", {"after": 0, "source": "x"}),
            ("replace_cell", {"cell": 1, "source": "x"}),
            ("delete_cell", {"cell": 1}),
            ("run_cell", {"cell": 1}),
        )
    )
    notebook_tools(agent, edit="always")
    results = await run(agent)
    assert len(results) == 6
    for r in results:
        assert r["is_error"]
        assert content_text(r).startswith(
            "Error: no notebook is connected: open this notebook in JupyterLab"
        )
        assert "%agent notebook PATH" in content_text(r)


async def test_the_provider_prefers_a_connected_bridge_then_the_attached_file_then_the_session(
    shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentloop_nb.jupyter.notebook import DocumentError, NotebookProvider

    session_nb = write_notebook(tmp_path / "session.ipynb")
    attached_nb = write_notebook(tmp_path / "attached.ipynb")
    provider = NotebookProvider(shell, env={"JPY_SESSION_NAME": str(session_nb)})
    assert isinstance(provider.current(), NotebookFile) and provider.current().path == str(
        session_nb
    )
    provider.attach(attached_nb)
    assert provider.current().path == str(attached_nb)
    bridge = FakeBridge()
    provider.set_bridge(bridge)
    assert isinstance(provider.current(), BridgeDocument)
    bridge.connected = False
    assert provider.current().path == str(attached_nb)
    provider.detach()
    monkeypatch.chdir(tmp_path)
    relative = NotebookProvider(shell, env={"JPY_SESSION_NAME": "some/dir/session.ipynb"})
    assert relative.current().path == str(session_nb)  # found by name in the kernel's folder
    with pytest.raises(DocumentError) as info:
        NotebookProvider(shell, env={}).current()
    assert info.value.code == "no-notebook"


async def test_a_file_changed_on_disk_during_an_edit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentloop_nb.jupyter.notebook import DocumentError

    path = write_notebook(tmp_path / "work.ipynb")
    document = NotebookFile(path)
    real_writes = nbformat.writes

    def writes_while_the_user_saves(nb: Any, *a: Any, **kw: Any) -> str:
        other = nbformat.read(str(path), as_version=4)
        other.cells[0].source = "# the user's title"
        path.write_text(real_writes(other), encoding="utf-8")
        return real_writes(nb, *a, **kw)

    monkeypatch.setattr(nbformat, "writes", writes_while_the_user_saves)  # what the file uses
    with pytest.raises(DocumentError) as info:
        await document.replace("cell2", "x = 2", "x = 1\nprint(x)", {})
    assert info.value.code == "conflict" and "changed on disk" in info.value.message
    monkeypatch.undo()
    on_disk = nbformat.read(str(path), as_version=4)
    assert on_disk.cells[0].source == "# the user's title"
    assert on_disk.cells[1].source == "x = 1\nprint(x)"
    assert sorted(os.listdir(tmp_path)) == ["work.ipynb"]  # no temp file left


async def test_notebook_tools_refuse_bad_settings(shell: Any) -> None:
    agent = make_agent([])
    with pytest.raises(ValueError, match="edit must be one of ask, always, never"):
        notebook_tools(agent, edit="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_output_chars must be an integer >= 200"):
        notebook_tools(agent, max_output_chars=10)
    with pytest.raises(ValueError, match="is not a notebook"):
        NotebookFile(Path("notes.txt"))
