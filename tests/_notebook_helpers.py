"""Shared pieces of the notebook tool tests: a sample notebook (on disk and as a fake
JupyterLab bridge) and a small in-process fake of the bridge's ``request()`` contract
(``docs/notebook-bridge.md``)."""

from __future__ import annotations

import base64
import copy
import io
import uuid
from pathlib import Path
from typing import Any

import nbformat

import agentloop_nb.jupyter as J
from agentloop_nb.loop import AgentOptions
from agentloop_nb.testing import ScriptedModel, text, tool_call

ANSI_TRACEBACK = [
    "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
    "\x1b[0;31mZeroDivisionError\x1b[0m                         Traceback (most recent call last)",
    "Cell \x1b[0;32mIn[3], line 1\x1b[0m\n\x1b[0;32m----> 1\x1b[0m \x1b[38;5;241m1\x1b[39m\x1b[38;5;241m/\x1b[39m\x1b[38;5;241m0\x1b[39m",
    "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero",
]


def png_bytes(size: tuple[int, int] = (8, 6), noise: bool = False) -> bytes:
    """A real PNG (Pillow); ``noise`` makes it incompressible (for the 1 MB limit)."""
    import os

    from PIL import Image

    if noise:
        image = Image.frombytes("RGB", size, os.urandom(size[0] * size[1] * 3))
    else:
        image = Image.new("RGB", size, (200, 30, 30))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def png_b64(**kw: Any) -> str:
    return base64.b64encode(png_bytes(**kw)).decode("ascii")


def sample_cells() -> list[dict[str, Any]]:
    """Five cells: markdown, a print, an error, a plot, an HTML table (nbformat dicts)."""
    v4 = nbformat.v4
    cells = [
        v4.new_markdown_cell("# Sales report"),
        v4.new_code_cell(
            "x = 1\nprint(x)",
            execution_count=1,
            outputs=[v4.new_output("stream", name="stdout", text="1\n")],
        ),
        v4.new_code_cell(
            "1/0",
            execution_count=2,
            outputs=[
                v4.new_output(
                    "error",
                    ename="ZeroDivisionError",
                    evalue="division by zero",
                    traceback=ANSI_TRACEBACK,
                )
            ],
        ),
        v4.new_code_cell(
            "plt.plot([1, 2])",
            execution_count=3,
            outputs=[
                v4.new_output(
                    "display_data",
                    data={
                        "image/png": png_b64(),
                        "text/plain": "<Figure size 640x480 with 1 Axes>",
                    },
                )
            ],
        ),
        v4.new_code_cell(
            "styled",
            execution_count=4,
            outputs=[
                v4.new_output(
                    "execute_result",
                    execution_count=4,
                    data={
                        "text/plain": "<pandas.io.formats.style.Styler object at 0x7f00deadbeef>",
                        "text/html": "<table><tr><th>region</th><th>units</th></tr>"
                        "<tr><td>north</td><td>3</td></tr></table>",
                    },
                )
            ],
        ),
    ]
    for i, cell in enumerate(cells):
        cell["id"] = f"cell{i + 1}"
    return cells


def write_notebook(path: Path, cells: list[dict[str, Any]] | None = None) -> Path:
    nb = nbformat.v4.new_notebook(cells=sample_cells() if cells is None else cells)
    nbformat.write(nb, str(path))
    return path


class FakeBridgeError(Exception):
    """Shaped like ``NotebookBridge``'s ``BridgeError``: a ``code`` and a ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class FakeBridge:
    """An in-process front end answering ``request(op, args)`` per the wire contract.

    ``cells`` are nbformat-like dicts; ``editing`` holds ids the "user" types in; ``run``
    outputs ``ran: <source>`` on stdout unless ``hang`` (then ``finished: false``).
    ``requests`` records every (op, args)."""

    def __init__(self, cells: list[dict[str, Any]] | None = None, path: str = "work.ipynb") -> None:
        self.cells = [copy.deepcopy(dict(c)) for c in (sample_cells() if cells is None else cells)]
        self.path = path
        self.connected = True
        self.editing: set[str] = set()
        self.hang = False
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def _wire(self, cell: dict[str, Any]) -> dict[str, Any]:
        source = cell.get("source", "")
        return {
            "id": cell["id"],
            "cell_type": cell["cell_type"],
            "source": "".join(source) if isinstance(source, list) else source,
            "outputs": copy.deepcopy(list(cell.get("outputs", []))),
            "execution_count": cell.get("execution_count"),
            "metadata": {"agentloop": cell.get("metadata", {}).get("agentloop")}
            if cell.get("metadata", {}).get("agentloop")
            else {},
            "state": "idle",
            "editing": cell["id"] in self.editing,
        }

    def _index(self, cell_id: str, expected: str | None = None) -> int:
        for i, cell in enumerate(self.cells):
            if cell["id"] == cell_id:
                if expected is not None and (
                    cell.get("source", "") != expected or cell_id in self.editing
                ):
                    raise FakeBridgeError("conflict", f"cell {cell_id} changed or is being edited")
                return i
        raise FakeBridgeError("not-found", f"no cell {cell_id}")

    async def request(
        self,
        op: str,
        args: dict[str, Any],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109 - the bridge contract
    ) -> dict[str, Any]:
        if not self.connected:
            raise FakeBridgeError("disconnected", "no page")
        self.requests.append((op, copy.deepcopy(args)))
        if op == "snapshot":
            return {"path": self.path, "cells": [self._wire(c) for c in self.cells]}
        if op == "insert":
            index = args["index"]
            if not 0 <= index <= len(self.cells):
                raise FakeBridgeError("bad-request", "index out of range")
            cell = {
                "id": uuid.uuid4().hex[:8],
                "cell_type": args["cell_type"],
                "source": args["source"],
                "outputs": [],
                "execution_count": None,
                "metadata": dict(args.get("metadata", {})),
            }
            self.cells.insert(index, cell)
            return {"cell": self._wire(cell)}
        if op == "replace":
            i = self._index(args["id"], args["expected_source"])
            self.cells[i]["source"] = args["source"]
            self.cells[i].setdefault("metadata", {}).update(args.get("metadata", {}))
            return {"cell": self._wire(self.cells[i])}
        if op == "delete":
            del self.cells[self._index(args["id"], args["expected_source"])]
            return {}
        if op == "run":
            i = self._index(args["id"])
            if self.hang:
                return {
                    "cell": {**self._wire(self.cells[i]), "state": "running"},
                    "finished": False,
                }
            cell = self.cells[i]
            cell["outputs"] = [
                {"output_type": "stream", "name": "stdout", "text": f"ran: {cell['source']}\n"}
            ]
            cell["execution_count"] = (cell.get("execution_count") or 0) + 1
            return {"cell": self._wire(cell), "finished": True}
        raise FakeBridgeError("bad-request", f"unknown op {op}")

    def source(self, position: int) -> str:
        src = self.cells[position - 1].get("source", "")
        return "".join(src) if isinstance(src, list) else src


def make_agent(script: list[Any], name: str = "nb") -> Any:
    app = J.app()
    adapter = f"scripted-{len(app.ctx.llm.providers())}"
    app.ctx.llm.register_adapter([adapter], ScriptedModel(script))
    return app.agent_loop.create(name, AgentOptions(provider=adapter, model="m"))


async def run(agent: Any, prompt: str = "go") -> list[dict[str, Any]]:
    """Send ``prompt``, wait for the turn; the tool results of the whole session."""
    agent.followup(prompt)
    await agent.when_idle()
    return [dict(e.data) for e in agent.session.events if e.type == "tool/result"]


def calls(*specs: tuple[str, dict[str, Any]]) -> list[Any]:
    return [tool_call(f"c{i}", n, a) for i, (n, a) in enumerate(specs, 1)] + [text("done")]


def content_text(result: dict[str, Any]) -> str:
    content = result["content"]
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")
