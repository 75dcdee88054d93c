"""``notebook_tools(agent)``: the agent reads the notebook and, with the user's approval, edits
and runs its cells.

Registers, on the agent's own scope (a plugin named ``notebook_tools`` on ``agent.ctx``, so a
second call replaces the first): ``list_cells``, ``read_cell`` and, unless ``edit="never"``,
``insert_cell``, ``replace_cell``, ``delete_cell`` and ``run_cell``. ``cell`` is a position
(1 = first) or a cell id everywhere.

- ``edit="ask"`` (default): every call of an editing tool (running a cell included) is an
  ``Ask``, whatever its arguments; the approval view shows the cell's unified diff and, for
  ``insert_cell``/``replace_cell``, an Edit button (the person changes the proposed source,
  then approves; the result tells the model what they changed). A denial is a ``DENIED``
  result and the turn goes on. ``"always"``: no question. ``"never"``: the editing tools are
  not offered at all.
- An edit of a cell the user changed since the agent last saw it is refused (a conflict that
  names the cell): nothing is merged. A cell the agent never saw is compared with its source
  at the time of the call.
- Every inserted or replaced cell carries ``metadata.agentloop = {agent, session, turn,
  call_id}``; every edit's ``tool/result`` ``meta["notebook"]`` holds the operation, the cell
  id and the old and new source, so the session log (replay, fork) shows it.
- Undo: with the kernel's memory (``ctx.kernel_memory``), ``run_cell`` snapshots what the
  cell's source may change before it runs, as ``run_python`` does, so ``%agent undo`` (and the
  view's Undo button on a finished ``run_cell``) restores the namespace.
- Secrets: the kernel tools' rule applies to everything these tools return and log.
- The document is asked for at every call (``document``, else the ``ctx.notebooks`` service
  of the kernel); with none, every tool returns the "no notebook is connected" error.
"""

from __future__ import annotations

import contextlib
import difflib
import json
from collections.abc import Awaitable, Callable, Mapping
from html import escape
from typing import Any, Literal

from ..._disposer import Disposer
from ...errors import InvalidValueError
from ...messages import ImageBlock, TextBlock
from ...tools import TOOL_ERROR, Ask, Tool, ToolExecution, ToolResult, error_result, tool
from ..kernel import mask, memory_of, secret_values, undo_action
from ._document import CELL_TYPES, Cell, DocumentError, NotebookDocument, RunResult
from ._outputs import MAX_IMAGES, bounded, one_line, summarize
from ._provider import NO_NOTEBOOK

__all__ = ["EDIT_TOOLS", "NotebookTools", "diff_html", "notebook_tools"]

EditMode = Literal["ask", "always", "never"]
_EDIT_MODES = ("ask", "always", "never")
_PLUGIN_NAME = "notebook_tools"
#: The tools that change the notebook or run its cells (asked for with ``edit="ask"``).
EDIT_TOOLS = ("insert_cell", "replace_cell", "delete_cell", "run_cell")
_MAX_PAGE = 200
_LINE_WIDTH = 72
DocumentSource = Callable[[], NotebookDocument]


class _Bodies:
    """The tool bodies of one agent over one document source."""

    def __init__(self, source: DocumentSource, shell: Any, max_chars: int) -> None:
        self.source = source
        self.shell = shell
        self.max_chars = max_chars
        # What the agent was shown of each cell (id -> source): the base of its edits.
        self.seen: dict[str, str] = {}

    # -- helpers ------------------------------------------------------------------------------

    def secrets(self) -> list[str]:
        ns = getattr(self.shell, "user_ns", None)
        return secret_values(ns) if isinstance(ns, Mapping) else []

    async def _cells(self) -> tuple[NotebookDocument, list[Cell]]:
        document = self.source()
        return document, await document.cells()

    def _resolve(self, cells: list[Cell], cell: int | str) -> Cell:
        return resolve(cells, cell)

    def _meta(self, execution: ToolExecution) -> dict[str, Any]:
        agent = execution.agent
        session = getattr(getattr(agent, "session", None), "id", "") or ""
        name = (
            session.split("-session-")[0]
            if "-session-" in session
            else str(getattr(agent, "id", ""))
        )
        return {
            "agent": name,
            "session": session,
            "turn": execution.turn,
            "call_id": execution.call_id,
        }

    def _log(
        self, op: str, cell_id: str, old: str | None, new: str | None, **extra: Any
    ) -> dict[str, Any]:
        secrets = self.secrets()
        entry: dict[str, Any] = {"op": op, "cell_id": cell_id}
        if old is not None:
            entry["old_source"] = mask(old, secrets)
        if new is not None:
            entry["new_source"] = mask(new, secrets)
        entry.update(extra)
        return {"notebook": entry}

    def _header(self, cell: Cell) -> str:
        count = "" if cell.execution_count is None else f", execution {cell.execution_count}"
        mark = ""
        if cell.agentloop:
            mark = f", written by agent {cell.agentloop.get('agent', '?')} (turn {cell.agentloop.get('turn', '?')})"
        return f"cell {cell.position} (id {cell.id}, {cell.cell_type}{count}, {cell.state}{mark})"

    def _cell_result(
        self, cell: Cell, intro: str, meta: dict[str, Any] | None = None
    ) -> ToolResult:
        """``intro``, the cell's source and its outputs (images as blocks), bounded."""
        secrets = self.secrets()
        source = bounded(mask(cell.source, secrets), max(200, self.max_chars // 2))
        summary = summarize(
            cell.outputs,
            max_chars=max(200, self.max_chars // 2),
            secrets=secrets,
            images_left=MAX_IMAGES,
        )
        parts = [intro, f"source:\n{source}" if source else "source: (empty)"]
        if cell.cell_type == "code":
            parts.append(f"outputs:\n{summary.text}" if summary.text else "outputs: none")
        text = bounded("\n".join(parts), self.max_chars)
        if not summary.images:
            return ToolResult(content=text, meta=meta)
        images = [ImageBlock(media_type=m, data=d) for m, d in summary.images]
        return ToolResult(content=(TextBlock(text=text), *images), meta=meta)

    def _stale(self, cell: Cell) -> ToolResult | None:
        """A conflict result when the agent saw another source of ``cell`` than it has now."""
        seen = self.seen.get(cell.id)
        if seen is None or seen == cell.source:
            return None
        return _error(
            "conflict",
            f"conflict: cell {cell.position} (id {cell.id}) changed since you read it; "
            f"read_cell({cell.position}) and retry with its current source in mind",
        )

    def _edited_note(self, execution: ToolExecution, source: str) -> str:
        proposed = (execution.edited_from or {}).get("source")
        if not isinstance(proposed, str) or proposed == source:
            return ""
        diff = "\n".join(
            difflib.unified_diff(
                proposed.splitlines(),
                source.splitlines(),
                "your proposal",
                "the user's version",
                lineterm="",
            )
        )
        note = bounded(mask(diff, self.secrets()), max(200, self.max_chars // 3))
        return (
            f"\nThe user edited your source before approving; the cell holds their version:\n{note}"
        )

    # -- the tools ----------------------------------------------------------------------------

    async def list_cells(self, start: int = 1, count: int = 50) -> str | ToolResult:
        """List the notebook's cells, one line each: position (1 = first), id, type,
        execution count, state (ok / error / running / queued / never run), the first source
        line and a short output summary. Paged: start is the first position listed, count how
        many (at most 200)."""
        try:
            document, cells = await self._cells()
        except DocumentError as exc:
            return _document_error(exc)
        n = len(cells)
        if n == 0:
            return f"{document.describe()} has no cells."
        if not isinstance(count, int) or count < 1:
            return _error("bad-request", f"count must be a positive integer, got {count!r}")
        if not 1 <= start <= n:
            return _error(
                "bad-request", f"start {start} is outside the notebook: valid positions are 1..{n}"
            )
        count = min(count, _MAX_PAGE)
        secrets = self.secrets()
        end = min(n, start + count - 1)
        lines = [f"{document.describe()}: {n} cells; cells {start}..{end}:"]
        used = len(lines[0])
        shown = start - 1
        for cell in cells[start - 1 : end]:
            line = self._line(cell, secrets)
            if used + len(line) + 1 > self.max_chars - 80 and shown >= start:
                break
            lines.append(line)
            used += len(line) + 1
            shown = cell.position
            self.seen[cell.id] = cell.source
        if shown < n:
            lines.append(f"… {n - shown} more: list_cells(start={shown + 1})")
        return "\n".join(lines)

    def _line(self, cell: Cell, secrets: list[str]) -> str:
        first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
        first = mask(first.strip(), secrets)
        if len(first) > _LINE_WIDTH:
            first = first[: _LINE_WIDTH - 1] + "…"
        more = cell.source.count("\n")
        count = "" if cell.execution_count is None else f" [{cell.execution_count}]"
        outputs = one_line(cell.outputs, secrets) if cell.outputs else ""
        agent = f" (agent {cell.agentloop.get('agent', '?')})" if cell.agentloop else ""
        text = f"{first}" + (f" (+{more} lines)" if more else "") if first else "(empty)"
        tail = f" → {outputs}" if outputs else ""
        return (
            f"{cell.position}. {cell.id} {cell.cell_type}{count} {cell.state}{agent}: {text}{tail}"
        )

    async def read_cell(self, cell: int | str) -> ToolResult:
        """Read one cell (a position, 1 = first, or a cell id): its source and outputs —
        stream text (head and tail), errors (name, message, last frames), up to 3 images,
        rich outputs as text."""
        try:
            _document, cells = await self._cells()
            target = self._resolve(cells, cell)
        except DocumentError as exc:
            return _document_error(exc)
        self.seen[target.id] = target.source
        return self._cell_result(target, self._header(target))

    async def insert_cell(
        self, after: int, source: str, execution: ToolExecution, cell_type: str = "code"
    ) -> ToolResult:
        """Insert a new cell after position `after` (0 = at the top) with this source;
        cell_type is code, markdown or raw. It is not run (use run_cell)."""
        if cell_type not in CELL_TYPES:
            return _error(
                "bad-request",
                f"cell_type must be one of {', '.join(CELL_TYPES)}, got {cell_type!r}",
            )
        try:
            document, cells = await self._cells()
            if isinstance(after, bool) or not 0 <= after <= len(cells):
                raise DocumentError(
                    "bad-request",
                    f"cannot insert after {after!r}: valid values are 0..{len(cells)} (0 = at the top)",
                )
            cell = await document.insert(after, source, cell_type, self._meta(execution))
        except DocumentError as exc:
            return _document_error(exc)
        self.seen[cell.id] = cell.source
        meta = self._log(
            "insert", cell.id, None, source, position=cell.position, cell_type=cell_type
        )
        text = (
            f"Inserted {cell.cell_type} cell {cell.position} (id {cell.id})."
            + self._edited_note(execution, source)
        )
        return ToolResult(content=text, meta=meta)

    async def replace_cell(
        self, cell: int | str, source: str, execution: ToolExecution
    ) -> ToolResult:
        """Replace the source of a cell (a position or an id) with this source. Its outputs
        stay until it runs again (use run_cell). Refused when the user changed the cell since
        you read it."""
        try:
            document, cells = await self._cells()
            target = self._resolve(cells, cell)
            stale = self._stale(target)
            if stale is not None:
                return stale
            updated = await document.replace(
                target.id, source, target.source, self._meta(execution)
            )
        except DocumentError as exc:
            return _document_error(exc)
        self.seen[updated.id] = updated.source
        meta = self._log("replace", target.id, target.source, source, position=target.position)
        text = (
            f"Replaced the source of cell {target.position} (id {target.id})."
            + self._edited_note(execution, source)
        )
        return ToolResult(content=text, meta=meta)

    async def delete_cell(self, cell: int | str) -> ToolResult:
        """Delete a cell (a position or an id). Refused when the user changed it since you
        read it."""
        try:
            document, cells = await self._cells()
            target = self._resolve(cells, cell)
            stale = self._stale(target)
            if stale is not None:
                return stale
            await document.delete(target.id, target.source)
        except DocumentError as exc:
            return _document_error(exc)
        self.seen.pop(target.id, None)
        meta = self._log("delete", target.id, target.source, None, position=target.position)
        return ToolResult(
            content=f"Deleted cell {target.position} (id {target.id}); {len(cells) - 1} cells remain.",
            meta=meta,
        )

    async def run_cell(
        self,
        cell: int | str,
        execution: ToolExecution,
        timeout: float = 60,  # noqa: ASYNC109 - the contract's own deadline
    ) -> ToolResult:
        """Run a code cell (a position or an id) as the user would; returns its outputs like
        read_cell. A cell still running after `timeout` seconds (1..600) is reported as
        still running: read it later."""
        if isinstance(timeout, bool) or not 1 <= timeout <= 600:
            return _error(
                "bad-request", f"timeout must be between 1 and 600 seconds, got {timeout!r}"
            )
        try:
            document, cells = await self._cells()
            target = self._resolve(cells, cell)
            if target.cell_type != "code":
                raise DocumentError(
                    "bad-request",
                    f"cell {target.position} is a {target.cell_type} cell; only code cells run",
                )
            outcome = await self._run_undoable(document, target, float(timeout), execution)
        except DocumentError as exc:
            return _document_error(exc)
        ran = outcome.cell
        self.seen[ran.id] = ran.source
        meta = self._log(
            "run", ran.id, None, None, position=ran.position, finished=outcome.finished
        )
        if not outcome.finished:
            intro = f"Cell {ran.position} (id {ran.id}) is still running after {timeout:g} s; read_cell({ran.position}) later. So far:"
        else:
            intro = f"Ran {self._header(ran)}."
        return self._cell_result(ran, intro, meta)

    async def _run_undoable(
        self,
        document: NotebookDocument,
        target: Cell,
        timeout: float,  # noqa: ASYNC109 - the document's run deadline
        execution: ToolExecution,
    ) -> RunResult:
        """Run ``target``, snapshotting what its source may change first (the kernel memory's
        undo journal, as ``run_python`` does), so ``%agent undo`` covers it. A run still going
        at the timeout is settled then: what it changes later counts as "changed since"."""
        memory = memory_of(execution.agent)
        if memory is None:
            return await document.run(target.id, timeout)
        run = memory.begin_run(
            target.source,
            agent=execution.agent,
            call_id=str(execution.call_id),
            turn=int(getattr(execution, "turn", 0) or 0),
            tool="run_cell",
        )
        try:
            return await document.run(target.id, timeout)
        finally:
            memory.end_run(run)


def resolve(cells: list[Cell], cell: Any) -> Cell:
    """The cell ``cell`` names (a position, 1 = first, a numeric string, or an id). Raises
    ``DocumentError`` naming the valid range, or saying the id is stale."""
    n = len(cells)
    span = f"valid positions are 1..{n}" if n else "the notebook has no cells"
    if isinstance(cell, bool):
        raise DocumentError("bad-request", f"cell must be a position or an id, got {cell!r}")
    if isinstance(cell, str) and cell.strip().isdigit():
        cell = int(cell.strip())
    if isinstance(cell, int):
        if 1 <= cell <= n:
            return cells[cell - 1]
        raise DocumentError("bad-request", f"there is no cell {cell}: {span}")
    if isinstance(cell, str):
        for c in cells:
            if c.id == cell:
                return c
        raise DocumentError(
            "not-found",
            f"no cell has the id {cell!r} (deleted, or an id from an older listing); "
            f"list_cells() shows the current ids ({span})",
        )
    raise DocumentError(
        "bad-request", f"cell must be a position or an id, got {type(cell).__name__}"
    )


def _error(code: str, message: str) -> ToolResult:
    return error_result(TOOL_ERROR, message, meta={"notebook_error": code})


def _document_error(exc: DocumentError) -> ToolResult:
    if exc.code == "conflict":
        return _error(exc.code, f"conflict: {exc.message}")
    return _error(exc.code, exc.message)


# -- approvals --------------------------------------------------------------------------------

_DIFF_STYLE = (
    "font-family:var(--jp-code-font-family,monospace);font-size:var(--jp-code-font-size,12px);"
    "white-space:pre-wrap;margin:4px 0;padding:4px;border:1px solid var(--jp-border-color2,#8884);"
    "color:var(--jp-content-font-color1,inherit)"
)
# Translucent backgrounds: readable on light and dark themes alike (the text keeps the theme's
# own colour).
_LINE_STYLE = {
    "+": "background:rgba(46,160,67,0.22)",
    "-": "background:rgba(248,81,73,0.22)",
    "@": "opacity:0.7",
}


def diff_html(old: str, new: str, title: str) -> str:
    """A unified diff of a cell's ``old`` and ``new`` source as HTML (theme-neutral
    colours), under ``title``."""
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", lineterm="")
    )
    # Unchanged (a run): the source as context lines. Else drop the ---/+++ header, which
    # says nothing the title does not.
    lines = lines[2:] if lines else [f" {ln}" for ln in new.splitlines()] or [" (empty)"]
    rows = []
    for line in lines:
        style = _LINE_STYLE.get(line[:1], "")
        rows.append(f'<div style="{style}">{escape(line) or "&nbsp;"}</div>')
    return (
        f'<div class="agentloop-cell-diff"><div style="font-weight:bold">{escape(title)}</div>'
        f'<div style="{_DIFF_STYLE}">{"".join(rows)}</div></div>'
    )


class _Approvals:
    """What an approval shows for the editing tools: the diff against the document's latest
    snapshot (``last_cells``, refreshed when the question is asked). Kept on the document, not
    here: the approval service holds one renderer per tool name, which may be another agent's
    over the same notebook."""

    def __init__(self, bodies: _Bodies) -> None:
        self.bodies = bodies

    async def ask(self, payload: ToolExecution, next_: Callable[[], Awaitable[Any]]) -> Any:
        if payload.name not in EDIT_TOOLS:
            return await next_()
        with contextlib.suppress(DocumentError):  # no notebook: the body will say so
            await self.bodies.source().cells()  # refreshes the document's last_cells
        # Every editing call asks, whatever its arguments: a call that will fail asks too
        # (the body re-checks against the notebook as it is when it runs).
        return Ask(reason=self.reason(payload.name, payload.args or {}))

    def reason(self, name: str, args: Mapping[str, Any]) -> str:
        if name == "insert_cell":
            return f"insert a cell after position {args.get('after')!r} of the notebook"
        verb = {"replace_cell": "replace", "delete_cell": "delete", "run_cell": "run"}[name]
        return f"{verb} cell {args.get('cell')!r} of the notebook"

    def detail(self, name: str) -> Callable[[str], str | None]:
        def render(arguments: str) -> str | None:
            try:
                args = json.loads(arguments)
            except ValueError:
                return None
            if not isinstance(args, dict):
                return None
            return self.render(name, args)

        return render

    def render(self, name: str, args: Mapping[str, Any]) -> str:
        try:
            cells = list(self.bodies.source().last_cells)
        except DocumentError:
            cells = []
        secrets = self.bodies.secrets()
        raw = args.get("source")
        new = raw if isinstance(raw, str) else ""
        if name == "insert_cell":
            return diff_html(
                "",
                mask(new, secrets),
                f"new {args.get('cell_type', 'code')} cell after position {args.get('after')}",
            )
        try:
            target = resolve(cells, args.get("cell"))
        except DocumentError as exc:
            return f'<div class="agentloop-cell-diff">{escape(exc.message)} — approving changes nothing.</div>'
        old = mask(target.source, secrets)
        title = f"cell {target.position} (id {target.id})"
        if name == "replace_cell":
            return diff_html(old, mask(new, secrets), f"replace {title}")
        if name == "delete_cell":
            return diff_html(old, "", f"delete {title}")
        return diff_html(old, old, f"run {title}")


# -- registration -----------------------------------------------------------------------------


def _definitions(bodies: _Bodies, edit: EditMode) -> list[Tool]:
    defs = [
        tool(concurrency_safe=True)(bodies.list_cells),
        tool(concurrency_safe=True)(bodies.read_cell),
    ]
    if edit != "never":
        defs += [
            tool(bodies.insert_cell),
            tool(bodies.replace_cell),
            tool(bodies.delete_cell),
            tool(bodies.run_cell),
        ]
    return defs


def _source_for(agent: Any, document: NotebookDocument | DocumentSource | None) -> DocumentSource:
    if isinstance(document, NotebookDocument):
        fixed = document
        return lambda: fixed
    if document is not None:
        return document

    def from_service() -> NotebookDocument:
        try:
            provider = getattr(agent.ctx, "notebooks", None)
        except Exception:  # a context raises its own error for a missing service
            provider = None
        if provider is None:
            raise DocumentError("no-notebook", NO_NOTEBOOK)
        current: NotebookDocument = provider.current()
        return current

    return from_service


class NotebookTools:
    """``notebook_tools(agent, *, edit="ask", max_output_chars=4000, document=None,
    shell=None) -> Disposer`` (the module docstring says what it registers)."""

    def __call__(
        self,
        agent: Any,
        *,
        edit: EditMode = "ask",
        max_output_chars: int = 4000,
        document: NotebookDocument | DocumentSource | None = None,
        shell: Any = None,
    ) -> Disposer:
        """Register the notebook tools on ``agent``'s scope; calling again replaces them.

        ``document`` fixes the document (or a callable giving it at each call); by default
        the kernel's ``ctx.notebooks`` provider chooses. ``shell`` is the namespace the
        secrets rule reads (default: the running IPython shell). Raises ``ValueError`` for
        an unknown ``edit`` mode or a ``max_output_chars`` below 200."""
        if edit not in _EDIT_MODES:
            raise InvalidValueError(f"edit must be one of {', '.join(_EDIT_MODES)}; got {edit!r}")
        if not isinstance(max_output_chars, int) or max_output_chars < 200:
            raise InvalidValueError(
                f"max_output_chars must be an integer >= 200, got {max_output_chars!r}"
            )
        if shell is None:
            from IPython import get_ipython

            shell = get_ipython()
        bodies = _Bodies(_source_for(agent, document), shell, max_output_chars)
        approvals = _Approvals(bodies)

        memory = memory_of(agent)

        def apply(ctx: Any, _config: Any) -> None:
            for definition in _definitions(bodies, edit):
                ctx.tools.register(definition)
            add_action = getattr(getattr(ctx, "approval", None), "register_action", None)
            if edit != "never" and memory is not None and add_action is not None:
                ctx.effect(lambda: add_action("run_cell", "Undo", *undo_action(memory)))
            if edit != "ask":
                return
            ctx.on("tools/pre-execute", approvals.ask)
            register = getattr(getattr(ctx, "approval", None), "register_detail", None)
            if register is None:
                return
            for name in EDIT_TOOLS:
                editable = "source" if name in ("insert_cell", "replace_cell") else None
                detail = approvals.detail(name)
                ctx.effect(lambda n=name, d=detail, e=editable: register(n, d, editable=e))

        fiber = agent.ctx.plugin(apply, name=_PLUGIN_NAME)
        return Disposer(fiber.dispose)


notebook_tools = NotebookTools()
