"""``NotebookFile(path)``: the notebook document over an ``.ipynb`` file (no JupyterLab).

Used headless (nbclient, nbval, a script) and whenever no front end bridge is connected.
Every operation reads the file afresh, so the user's own saves are never overwritten by a
stale copy; an edit is a read-modify-write that

- touches only the cell it names, and only while that cell's source is still the one the
  caller expects (else ``conflict``; a cell that is gone is ``not-found``);
- is written atomically (a temporary file in the same folder, flushed, then ``os.replace``),
  so a reader never sees half a notebook;
- is refused (``conflict``) when the file changed on disk between its read and its write.

``run`` executes the cell in this kernel, like the kernel tools' ``run_python`` (on the main
thread, output captured, see ``jupyter.kernel.run_code``), and writes its outputs to the file.
It is synchronous: the timeout cannot stop it, so it always returns ``finished=True``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from ...errors import InvalidValueError
from ..kernel import RunOutcome, run_code
from ._document import CELL_TYPES, Cell, DocumentError, NotebookDocument, RunResult, cell_state

__all__ = ["NotebookFile", "outcome_outputs"]


def _nbformat() -> Any:
    """nbformat, imported on first use: with its schema validator it is about 130k objects
    that every full collection of the kernel's cyclic GC would otherwise walk, in a kernel
    that may never touch a notebook file (see "Design decisions" in docs/architecture.md)."""
    import nbformat

    return nbformat


class NotebookFile(NotebookDocument):
    """The notebook document of the ``.ipynb`` at ``path`` (see the module docstring).

    ``shell`` is the IPython shell ``run`` executes in (default: the running one).
    Raises ``ValueError`` for a path that is not an existing ``.ipynb`` file."""

    def __init__(self, path: str | os.PathLike[str], *, shell: Any = None) -> None:
        p = Path(path).expanduser()
        if p.suffix != ".ipynb":
            raise InvalidValueError(f"{str(path)!r} is not a notebook (an .ipynb file)")
        if not p.is_file():
            raise InvalidValueError(
                f"no notebook at {str(path)!r} (create it first, e.g. with nbformat)"
            )
        self.file = p.resolve()
        self._shell = shell
        self._cache: tuple[tuple[int, int, int], tuple[Cell, ...]] | None = None

    @property
    def path(self) -> str:
        return str(self.file)

    def __repr__(self) -> str:
        return f"<NotebookFile {self.path!r}>"

    def describe(self) -> str:
        return f"the notebook file {self.file.name}"

    # -- reading ------------------------------------------------------------------------------

    def _read(self) -> tuple[Any, str]:
        """``(notebook, fingerprint)`` of the file as it is now."""
        try:
            data = self.file.read_bytes()
        except OSError as exc:
            raise DocumentError(
                "not-found", f"cannot read {self.file.name}: {exc.strerror}"
            ) from None
        try:
            nb = _nbformat().reads(data.decode("utf-8"), as_version=4)
        except Exception as exc:
            raise DocumentError(
                "internal", f"{self.file.name} is not a readable notebook ({type(exc).__name__})"
            ) from None
        for i, cell in enumerate(nb.cells):
            if not cell.get("id"):  # nbformat < 4.5 has no ids: a stable one from its place
                cell["id"] = _fallback_id(i, cell.get("source", ""))
        return nb, hashlib.sha256(data).hexdigest()

    async def cells(self) -> list[Cell]:
        # Reading is the hot path (every list_cells): plain JSON (orjson), no schema validation
        # and no NotebookNode wrapping, which cost ~20x more on a large notebook; and nothing at
        # all while the file's identity (inode, size, mtime in ns) is the one last parsed.
        # Edits never use this: they re-read and compare content hashes (_read, _write).
        try:
            stat = self.file.stat()
            key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if self._cache is not None and self._cache[0] == key:
                self.last_cells = self._cache[1]
                return list(self._cache[1])
            data = self.file.read_bytes()
        except OSError as exc:
            raise DocumentError(
                "not-found", f"cannot read {self.file.name}: {exc.strerror}"
            ) from None
        try:
            raw = orjson.loads(data)
        except ValueError:
            raw = None
        if (
            not isinstance(raw, dict)
            or raw.get("nbformat") != 4
            or not isinstance(raw.get("cells"), list)
        ):
            nb, _ = self._read()  # another version, or damaged: nbformat converts or explains
            raw = nb
        out = []
        for i, cell in enumerate(raw["cells"]):
            if not isinstance(cell, dict):
                raise DocumentError("internal", f"{self.file.name}: cell {i + 1} is not an object")
            if not cell.get("id"):
                cell["id"] = _fallback_id(i, cell.get("source", ""))
            out.append(_cell(cell, i + 1))
        self._cache = (key, tuple(out))
        self.last_cells = self._cache[1]
        return out

    # -- edits --------------------------------------------------------------------------------

    def _edit(self, change: Callable[[Any], int | None]) -> Cell | None:
        """Read, apply ``change(nb)`` (returns the index of the cell to report, or ``None``),
        write atomically unless the file changed meanwhile; returns that cell."""
        nb, fingerprint = self._read()
        index = change(nb)
        nb.nbformat, nb.nbformat_minor = 4, max(5, int(nb.get("nbformat_minor", 5)))
        self._write(nb, fingerprint)
        return None if index is None else _cell(nb.cells[index], index + 1)

    def _write(self, nb: Any, fingerprint: str) -> None:
        text = _nbformat().writes(nb)
        folder = self.file.parent
        fd, tmp = tempfile.mkstemp(prefix=f".{self.file.name}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                if not text.endswith("\n"):
                    f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.chmod(tmp, self.file.stat().st_mode & 0o777)
                now = hashlib.sha256(self.file.read_bytes()).hexdigest()
            except OSError:
                now = ""
            if now != fingerprint:
                raise DocumentError(
                    "conflict",
                    f"{self.file.name} changed on disk during the edit; read the cells again "
                    "and retry",
                )
            os.replace(tmp, self.file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _find(self, nb: Any, cell_id: str, expected_source: str | None) -> int:
        for i, cell in enumerate(nb.cells):
            if cell.get("id") == cell_id:
                if expected_source is not None and cell.get("source", "") != expected_source:
                    raise DocumentError(
                        "conflict",
                        f"cell {i + 1} (id {cell_id}) changed since it was read; read it again "
                        "and retry",
                    )
                return i
        raise DocumentError("not-found", f"no cell with id {cell_id!r} (it was deleted?)")

    async def insert(
        self, after: int, source: str, cell_type: str, meta: Mapping[str, Any]
    ) -> Cell:
        if cell_type not in CELL_TYPES:
            raise DocumentError("bad-request", f"cell_type must be one of {', '.join(CELL_TYPES)}")

        def change(nb: Any) -> int:
            if not 0 <= after <= len(nb.cells):
                raise DocumentError(
                    "bad-request",
                    f"cannot insert after {after}: the notebook has {len(nb.cells)} cells",
                )
            v4 = _nbformat().v4
            maker = {
                "code": v4.new_code_cell,
                "markdown": v4.new_markdown_cell,
                "raw": v4.new_raw_cell,
            }[cell_type]
            cell = maker(source)
            cell.metadata["agentloop"] = dict(meta)
            nb.cells.insert(after, cell)
            return after

        cell = self._edit(change)
        assert cell is not None
        return cell

    async def replace(
        self, cell_id: str, source: str, expected_source: str, meta: Mapping[str, Any]
    ) -> Cell:
        def change(nb: Any) -> int:
            i = self._find(nb, cell_id, expected_source)
            nb.cells[i]["source"] = source
            nb.cells[i].setdefault("metadata", {})["agentloop"] = dict(meta)
            return i

        cell = self._edit(change)
        assert cell is not None
        return cell

    async def delete(self, cell_id: str, expected_source: str) -> None:
        def change(nb: Any) -> None:
            del nb.cells[self._find(nb, cell_id, expected_source)]

        self._edit(change)

    async def run(self, cell_id: str, timeout: float) -> RunResult:  # noqa: ASYNC109 - the contract's own deadline
        nb, _ = self._read()
        cell = nb.cells[self._find(nb, cell_id, None)]
        if cell.get("cell_type") != "code":
            raise DocumentError(
                "bad-request", f"cell {cell_id!r} is {cell.get('cell_type')}; only code cells run"
            )
        source = cell.get("source", "")
        shell = self._shell if self._shell is not None else _running_shell()
        outcome = run_code(shell, source)
        count = getattr(shell, "execution_count", None)
        outputs = outcome_outputs(outcome, count if isinstance(count, int) else None)

        def change(nb: Any) -> int:
            i = self._find(nb, cell_id, source)  # the source that ran must still be there
            nb.cells[i]["outputs"] = outputs
            nb.cells[i]["execution_count"] = count if isinstance(count, int) else None
            return i

        written = self._edit(change)
        assert written is not None
        return RunResult(written, finished=True)


def _running_shell() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise DocumentError("internal", "running a cell needs an IPython kernel")
    return shell


def outcome_outputs(outcome: RunOutcome, count: int | None) -> list[Any]:
    """nbformat v4 outputs for what one run produced (streams, displays, images, the value,
    the error), in the order a notebook shows them."""
    v4 = _nbformat().v4
    outputs: list[Any] = []
    if outcome.stdout:
        outputs.append(v4.new_output("stream", name="stdout", text=outcome.stdout))
    if outcome.stderr:
        outputs.append(v4.new_output("stream", name="stderr", text=outcome.stderr))
    for text in outcome.displays:
        outputs.append(v4.new_output("display_data", data={"text/plain": text}))
    for png in outcome.images:
        outputs.append(v4.new_output("display_data", data={"image/png": png}))
    if outcome.value is not None:
        outputs.append(
            v4.new_output(
                "execute_result", data={"text/plain": outcome.value}, execution_count=count
            )
        )
    if outcome.error is not None:
        outputs.append(
            v4.new_output(
                "error",
                ename=outcome.ename or "Error",
                evalue=outcome.evalue or "",
                traceback=outcome.error.splitlines(),
            )
        )
    return outputs


def _fallback_id(index: int, source: Any) -> str:
    text = "".join(source) if isinstance(source, list) else str(source)
    return "c" + hashlib.sha1(f"{index}:{text}".encode()).hexdigest()[:10]


def _cell(raw: Any, position: int) -> Cell:
    cell_type = str(raw.get("cell_type", "code"))
    source = raw.get("source", "")
    source = "".join(source) if isinstance(source, list) else str(source)
    outputs = tuple(raw.get("outputs", ()) or ()) if cell_type == "code" else ()
    count = raw.get("execution_count") if cell_type == "code" else None
    metadata = raw.get("metadata") or {}
    agentloop = metadata.get("agentloop")
    return Cell(
        position=position,
        id=str(raw.get("id")),
        cell_type=cell_type,
        source=source,
        outputs=outputs,
        execution_count=count if isinstance(count, int) else None,
        state=cell_state(cell_type, outputs, count, "idle"),
        agentloop=agentloop if isinstance(agentloop, Mapping) else None,
    )
