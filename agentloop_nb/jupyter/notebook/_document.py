"""The notebook as the agent sees it: :class:`Cell`, the :class:`NotebookDocument` interface,
its errors, and :class:`BridgeDocument` (the document over the JupyterLab extension's comm).

A document is addressed by cell **id** for edits (positions move when cells are inserted), and
every change of an existing cell names the source the caller last saw (``expected_source``):
a cell whose source is no longer that is not touched, the change fails with a ``conflict``
:class:`DocumentError`. Nothing is ever merged.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ...errors import AgentloopError

__all__ = [
    "CELL_TYPES",
    "BridgeDocument",
    "BridgeLike",
    "Cell",
    "DocumentError",
    "NotebookDocument",
    "RunResult",
    "cell_state",
]

CellType = Literal["code", "markdown", "raw"]
CELL_TYPES: tuple[str, ...] = ("code", "markdown", "raw")


class DocumentError(AgentloopError):
    """A document operation that did not happen: ``code`` (one of ``conflict``,
    ``not-found``, ``bad-request``, ``busy``, ``internal``, ``disconnected``, ``timeout``,
    ``no-notebook``) and a one-line ``message`` for the model and the user."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell: ``position`` (1 = first), ``id``, ``cell_type`` (code / markdown / raw),
    ``source``, ``outputs`` (nbformat v4 output dicts), ``execution_count``, ``state`` (ok /
    error / running / queued / never run), ``agentloop`` (the cell's ``metadata.agentloop``
    when an agent wrote it) and ``editing`` (the user is typing in it: edits are refused)."""

    position: int
    id: str
    cell_type: str
    source: str
    outputs: tuple[Mapping[str, Any], ...] = ()
    execution_count: int | None = None
    state: str = "never run"
    agentloop: Mapping[str, Any] | None = None
    editing: bool = False


@dataclass(frozen=True, slots=True)
class RunResult:
    """What :meth:`NotebookDocument.run` returns: the cell after the run (or as far as it
    got) and whether the execution finished before the timeout."""

    cell: Cell
    finished: bool = True


def cell_state(cell_type: str, outputs: Sequence[Mapping[str, Any]], count: Any, live: str) -> str:
    """The state shown for a cell: ``running``/``queued`` from the front end (``live``), else
    ``error`` when an output is an error, ``ok`` when it ran (a count or outputs), else
    ``never run`` (markdown and raw cells are ``ok``: there is nothing to run)."""
    if live in ("running", "queued"):
        return live
    if cell_type != "code":
        return "ok"
    if any(o.get("output_type") == "error" for o in outputs):
        return "error"
    return "ok" if count is not None or outputs else "never run"


class NotebookDocument(abc.ABC):
    """The notebook an agent reads and edits (see the module docstring for the rules).

    Every method raises :class:`DocumentError` for an operation that did not happen; none of
    them half-applies an edit."""

    #: The cells the latest :meth:`cells` call returned (what an approval's diff is drawn
    #: against: renderers are synchronous and cannot ask the document).
    last_cells: tuple[Cell, ...] = ()

    @property
    def path(self) -> str | None:
        """The notebook's path as the document knows it (``None`` when unknown)."""
        return None

    @abc.abstractmethod
    async def cells(self) -> list[Cell]:
        """Every cell, in order (positions 1..n)."""

    @abc.abstractmethod
    async def insert(
        self, after: int, source: str, cell_type: str, meta: Mapping[str, Any]
    ) -> Cell:
        """Insert a new cell after position ``after`` (``0`` = at the top); ``meta`` becomes
        its ``metadata.agentloop``. ``bad-request`` when ``after`` is out of range."""

    @abc.abstractmethod
    async def replace(
        self, cell_id: str, source: str, expected_source: str, meta: Mapping[str, Any]
    ) -> Cell:
        """Set cell ``cell_id``'s source (its outputs are kept, as an editor keeps them);
        ``conflict`` unless its source is still ``expected_source`` and nobody types in it,
        ``not-found`` when it is gone."""

    @abc.abstractmethod
    async def delete(self, cell_id: str, expected_source: str) -> None:
        """Delete cell ``cell_id``; same ``conflict``/``not-found`` rules as :meth:`replace`."""

    @abc.abstractmethod
    async def run(self, cell_id: str, timeout: float) -> RunResult:  # noqa: ASYNC109 - the contract's own deadline
        """Execute the cell as the user would; ``finished=False`` when it still runs after
        ``timeout`` seconds (it keeps running; read it later)."""

    def describe(self) -> str:
        """One line naming this document for messages (``the notebook x.ipynb``)."""
        return f"the notebook {self.path}" if self.path else "the notebook"


class BridgeLike(Protocol):
    """What :class:`BridgeDocument` needs of the comm transport (``NotebookBridge``)."""

    @property
    def connected(self) -> bool: ...

    @property
    def path(self) -> str | None: ...

    async def request(
        self,
        op: str,
        args: dict[str, Any],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109 - the contract's own deadline
    ) -> dict[str, Any]: ...


class BridgeDocument(NotebookDocument):
    """The notebook open in JupyterLab, through the extension's comm (``bridge.request``; the
    wire contract is ``docs/notebook-bridge.md``). Edits land in the notebook's shared model,
    so they are undoable and saved like the user's own.

    The bridge raises its own error (``BridgeError``) with a ``code`` and a ``message``; any
    exception carrying both is passed on as a :class:`DocumentError` with that code, anything
    else as ``internal``. A response that does not have the contract's shape is ``internal``
    too (the front end is not trusted to be well-formed)."""

    def __init__(self, bridge: BridgeLike, *, request_timeout: float = 10.0) -> None:
        self.bridge = bridge
        self.request_timeout = request_timeout
        self._ids: dict[str, int] = {}  # cell id -> position in the last snapshot

    @property
    def path(self) -> str | None:
        return self.bridge.path

    def __repr__(self) -> str:
        return f"<BridgeDocument {self.path!r} connected={self.bridge.connected}>"

    async def _call(
        self,
        op: str,
        args: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109 - the contract's own deadline
    ) -> dict[str, Any]:
        if not self.bridge.connected:
            raise DocumentError("disconnected", "the notebook's JupyterLab page is not connected")
        try:
            result = await self.bridge.request(op, args, timeout=timeout or self.request_timeout)
        except DocumentError:
            raise
        except Exception as exc:
            code = getattr(exc, "code", None)
            message = getattr(exc, "message", None)
            if isinstance(code, str) and isinstance(message, str):
                raise DocumentError(code, message) from None
            raise DocumentError("internal", f"{op} failed: {type(exc).__name__}: {exc}") from None
        if not isinstance(result, dict):
            raise DocumentError(
                "internal", f"the front end answered {op} with {type(result).__name__}"
            )
        return result

    async def cells(self) -> list[Cell]:
        result = await self._call("snapshot", {})
        raw = result.get("cells")
        if not isinstance(raw, list):
            raise DocumentError("internal", "the front end's snapshot has no cell list")
        cells = [wire_cell(c, i + 1) for i, c in enumerate(raw)]
        self._ids = {c.id: c.position for c in cells}
        self.last_cells = tuple(cells)
        return cells

    def _position(self, cell_id: str) -> int:
        return self._ids.get(cell_id, 0)

    async def insert(
        self, after: int, source: str, cell_type: str, meta: Mapping[str, Any]
    ) -> Cell:
        args = {
            "index": after,
            "source": source,
            "cell_type": cell_type,
            "metadata": {"agentloop": dict(meta)},
        }
        result = await self._call("insert", args)
        return wire_cell(result.get("cell"), after + 1)

    async def replace(
        self, cell_id: str, source: str, expected_source: str, meta: Mapping[str, Any]
    ) -> Cell:
        args = {
            "id": cell_id,
            "expected_source": expected_source,
            "source": source,
            "metadata": {"agentloop": dict(meta)},
        }
        result = await self._call("replace", args)
        return wire_cell(result.get("cell"), self._position(cell_id))

    async def delete(self, cell_id: str, expected_source: str) -> None:
        await self._call("delete", {"id": cell_id, "expected_source": expected_source})

    async def run(self, cell_id: str, timeout: float) -> RunResult:  # noqa: ASYNC109 - the contract's own deadline
        # The request waits a little longer than the run, so the front end's own "finished:
        # false" answer arrives before the request times out.
        result = await self._call("run", {"id": cell_id, "timeout": timeout}, timeout + 5.0)
        cell = wire_cell(result.get("cell"), self._position(cell_id))
        return RunResult(cell, finished=result.get("finished") is True)


def wire_cell(raw: Any, position: int) -> Cell:
    """A :class:`Cell` from the contract's cell dict. Raises :class:`DocumentError`
    (``internal``) for a dict without the required fields."""
    if not isinstance(raw, Mapping):
        raise DocumentError("internal", "the front end sent a cell that is not an object")
    cell_id, cell_type, source = raw.get("id"), raw.get("cell_type"), raw.get("source")
    if not isinstance(cell_id, str) or cell_type not in CELL_TYPES or not isinstance(source, str):
        raise DocumentError("internal", "the front end sent a cell without id, cell_type or source")
    outputs = raw.get("outputs") or []
    outputs = (
        tuple(o for o in outputs if isinstance(o, Mapping)) if isinstance(outputs, list) else ()
    )
    count = raw.get("execution_count")
    count = count if isinstance(count, int) and not isinstance(count, bool) else None
    metadata = raw.get("metadata")
    agentloop = metadata.get("agentloop") if isinstance(metadata, Mapping) else None
    live = raw.get("state")
    return Cell(
        position=position,
        id=cell_id,
        cell_type=cell_type,
        source=source,
        outputs=outputs,
        execution_count=count,
        state=cell_state(cell_type, outputs, count, live if isinstance(live, str) else "idle"),
        agentloop=agentloop if isinstance(agentloop, Mapping) else None,
        editing=raw.get("editing") is True,
    )
