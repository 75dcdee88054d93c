"""How long ``list_cells`` takes on a 1,000-cell notebook (goal: at most 50 ms).

The notebook: 1,000 code cells of three lines, each with a stdout output of 20 lines, every
tenth with an error traceback and every twentieth with a PNG (0.8 MB on disk). Timed, through
the whole tool pipeline (``ctx.tools.execute``: admission, the body, settling), the default
page (50 cells) and the last page:

- on a ``NotebookFile``, unchanged between calls (the file is only stat'ed: its parse is
  kept while its inode, size and mtime stay the same), and saved again before every call
  (read and parsed each time, what a listing after the user's save costs);
- on a ``BridgeDocument`` over an in-process fake front end that answers the ``snapshot``
  request with the same cells decoded from JSON (what the comm delivers, without the
  websocket and the front end's own time).

Run: ``.venv/bin/python benchmarks/bench_notebook.py`` (a few seconds). Prints the best of
7 runs per row, wall and CPU time (the least disturbed by other load). Nothing here is asserted.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nbformat

from agentloop_nb.app import App
from agentloop_nb.jupyter.notebook import BridgeDocument, NotebookFile, notebook_tools
from agentloop_nb.loop import AgentOptions
from agentloop_nb.testing import ScriptedModel

CELLS = 1000
GOAL_MS = 50.0
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 2000).decode()


def build() -> list[Any]:
    v4 = nbformat.v4
    cells = []
    for i in range(CELLS):
        outputs = [
            v4.new_output("stream", name="stdout", text="".join(f"row {j}\n" for j in range(20)))
        ]
        if i % 10 == 0:
            outputs.append(
                v4.new_output(
                    "error",
                    ename="ValueError",
                    evalue=f"bad {i}",
                    traceback=["\x1b[31mTraceback\x1b[0m"] * 5,
                )
            )
        if i % 20 == 0:
            outputs.append(
                v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"})
            )
        cell = v4.new_code_cell(
            f"# step {i}\nvalue_{i} = {i} * 2\nprint(value_{i})",
            execution_count=i + 1,
            outputs=outputs,
        )
        cells.append(cell)
    return cells


class InProcessBridge:
    """Answers ``snapshot`` with the cells decoded from JSON, as the comm delivers them."""

    connected = True
    path = "bench.ipynb"

    def __init__(self, cells: list[Any]) -> None:
        wire = [
            {
                "id": c["id"],
                "cell_type": "code",
                "source": c["source"],
                "outputs": c["outputs"],
                "execution_count": c["execution_count"],
                "metadata": {},
                "state": "idle",
                "editing": False,
            }
            for c in cells
        ]
        self.message = json.dumps({"path": self.path, "cells": wire})

    async def request(
        self, op: str, args: dict[str, Any], *, timeout: float = 10.0
    ) -> dict[str, Any]:
        assert op == "snapshot"
        decoded: dict[str, Any] = json.loads(self.message)
        return decoded


async def best(fn: Any, runs: int = 7) -> tuple[float, float]:
    """``(wall ms, CPU ms)``, each the best of ``runs`` (CPU time is what a shared, loaded
    machine disturbs least)."""
    walls, cpus = [], []
    for _ in range(runs):
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        await fn()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return min(walls) * 1e3, min(cpus) * 1e3


async def main() -> None:
    cells = build()
    folder = Path(tempfile.mkdtemp())
    path = folder / "bench.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(path))
    documents = {
        "NotebookFile (unchanged)": NotebookFile(path),
        "NotebookFile (saved before each call)": NotebookFile(path),
        "BridgeDocument (in-process front end)": BridgeDocument(
            InProcessBridge(nbformat.read(str(path), 4).cells)
        ),
    }
    app = App()
    app.ctx.llm.register_adapter(["s"], ScriptedModel([]))
    print(f"{CELLS} cells, {path.stat().st_size / 1e6:.1f} MB on disk; goal <= {GOAL_MS:g} ms")
    print(f"{'document':40} {'page':>10} {'wall ms':>8} {'CPU ms':>8}")
    for label, document in documents.items():
        agent = app.agent_loop.create("bench", AgentOptions(provider="s", model="m"))
        notebook_tools(agent, edit="never", document=document, shell=SimpleNamespace(user_ns={}))
        for page, args in (("1..50", "{}"), ("951..1000", '{"start": 951}')):
            call = SimpleNamespace(id="b1", name="list_cells", arguments=args)

            touch = "saved" in label

            async def once(call: Any = call, agent: Any = agent, touch: bool = touch) -> None:
                if touch:  # a new mtime: the document must read and parse the file again
                    os.utime(path, ns=(time.time_ns(), time.time_ns()))
                result = await app.ctx.tools.execute(app.ctx.tools.new_execution(call, agent=agent))
                assert not result.is_error, result.content

            wall, cpu = await best(once)
            print(f"{label:40} {page:>10} {wall:8.1f} {cpu:8.1f}")
    await app.aclose()


if __name__ == "__main__":
    asyncio.run(main())
