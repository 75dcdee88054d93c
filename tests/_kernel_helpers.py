"""Running notebook cells in a fresh kernel (nbclient), shared by the kernel tests."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient


def code_cell(source: str, *tags: str) -> Any:
    """A code cell of the dedented ``source``, with ``tags`` in its metadata."""
    cell = nbformat.v4.new_code_cell(textwrap.dedent(source).strip())
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def execute(workdir: Path, cells: list[Any], timeout: float) -> list[Any]:
    """Execute ``cells`` in a fresh ``python3`` kernel whose cwd is ``workdir`` (``timeout``
    seconds a cell); the executed cells. An unexpected cell error fails the test
    (``raises-exception`` tags allow one)."""
    nb = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    ).execute()
    return list(nb.cells)


def stdout_of(cell: Any) -> str:
    """What the cell printed to stdout."""
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")


@contextmanager
def running_kernel(cwd: Path, ready_timeout: float = 30) -> Iterator[tuple[Any, Any]]:
    """A fresh ``python3`` kernel whose cwd is ``cwd``: ``(manager, client)`` once it answers,
    shut down afterwards."""
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(cwd))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=ready_timeout)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run_code(
    kc: Any, code: str, timeout: float, on_output: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], str]:
    """Execute the dedented ``code``; the shell reply's content and the cell's stdout (each
    piece also handed to ``on_output``). The reply is the synchronisation: ``timeout`` bounds
    how long the kernel may take to answer."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
            if on_output is not None:
                on_output(msg["content"]["text"])

    reply = kc.execute_interactive(textwrap.dedent(code), timeout=timeout, output_hook=hook)
    return reply["content"], "".join(out)
