"""``kernel_tools(agent)``: the agent works with the kernel it lives in.

Registers, on the agent's own scope (a plugin named ``kernel_tools`` on ``agent.ctx``, so a
second call replaces the first), the tools ``list_variables``, ``inspect_variable``,
``run_python`` (unless ``run="never"``), ``notebook_history`` and ``read_error``.

With the kernel's memory (``ctx.kernel_memory``, provided by ``%load_ext agentloop_nb``):
``run_python`` snapshots what its code may change before it runs (undo: ``%agent undo``,
``agent.undo()``, the view's Undo button, registered here as a call action on the approval
service) and logs what it bound (provenance); ``inspect_variable`` says where the value came
from; ``read_error(cell)`` returns a failed cell's autopsy. With ``run="ask"`` a
``tools/pre-execute`` listener answers ``Ask`` for every ``run_python`` call, so the approval
service (the view's Approve/Deny buttons) decides; a denied call never runs.

Secrets: a user variable whose name contains KEY, TOKEN, SECRET or PASSWORD is listed with its
type only, inspecting it is an error result, and the string values of such variables are masked
in everything these tools return (``run_python``'s output, ``notebook_history``'s cells).

Where ``run_python``'s code runs and how its output is kept out of other cells: see
``_run_code``.
"""

from __future__ import annotations

import json
import types
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from ..._disposer import Disposer
from ...errors import InvalidValueError, UsageError
from ...messages import ImageBlock, TextBlock
from ...tools import TOOL_ERROR, Ask, Tool, ToolExecution, ToolResult, error_result, tool
from ..fold import code_html as fold_code_html
from ._describe import (
    Describer,
    Describers,
    close_matches,
    describe,
    is_secret,
    mask,
    secret_values,
    shell_describers,
    short_summary,
    truncate,
)
from ._memory import KernelMemory
from ._run_code import RunOutcome, run_code

__all__ = [
    "KernelTools",
    "add_kernel_tools",
    "code_html",
    "describers_of",
    "mask",
    "memory_of",
    "secret_values",
    "undo_action",
    "user_variables",
]

RunMode = Literal["ask", "always", "never"]
_RUN_MODES = ("ask", "always", "never")
_PLUGIN_NAME = "kernel_tools"


def _shell() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise UsageError(
            "kernel_tools needs a running IPython kernel (use it from a notebook cell)"
        )
    return shell


def user_variables(shell: Any) -> dict[str, Any]:
    """The user's own variables: no ``_`` names, modules, IPython internals (``In``, ``Out``,
    ``exit``, ...) or this package's objects (``ctx``, agents, and the functions and classes
    imported from it such as ``tool``)."""
    hidden = getattr(shell, "user_ns_hidden", {})
    out = {}
    for name, value in shell.user_ns.items():
        if name.startswith("_") or (name in hidden and hidden[name] is value):
            continue
        if isinstance(value, types.ModuleType):
            continue
        if _ours(value):
            continue
        out[name] = value
    return out


def _ours(value: Any) -> bool:
    """Whether ``value`` belongs to this package or IPython: an instance of one of their
    types, or a function or class they define (``from agentloop_nb import tool``)."""
    modules = [getattr(type(value), "__module__", "") or ""]
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        modules.append(getattr(value, "__module__", "") or "")
    return any(m.split(".")[0] == "agentloop_nb" or m.startswith("IPython.") for m in modules)


def _typed_inputs(shell: Any) -> list[str]:
    """The cells' sources as the user typed them (``%%agent a`` rather than IPython's
    ``get_ipython().run_cell_magic(...)``): the history's raw inputs when they line up with
    ``In``, else ``In`` itself."""
    inputs = list(shell.user_ns.get("In") or [])
    raw = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    if isinstance(raw, list) and len(raw) == len(inputs):
        return [str(r) for r in raw]
    return inputs


def code_html(code: str) -> str:
    """``code`` as highlighted HTML for approval views (theme-following colours: see
    :func:`agentloop_nb.jupyter.fold.code_html`)."""
    return fold_code_html(code, "python")


def approval_detail_html(arguments: str) -> str | None:
    """What an approval view shows under a pending ``run_python`` call: its code, highlighted
    (``None`` for arguments that are not a JSON object with ``code``)."""
    try:
        code = json.loads(arguments).get("code")
    except (ValueError, AttributeError):
        return None
    return code_html(code) if isinstance(code, str) else None


def memory_of(agent: Any) -> KernelMemory | None:
    """The kernel memory ``agent`` sees (``ctx.kernel_memory``), or ``None`` without one."""
    try:
        memory = agent.ctx.kernel_memory
    except AttributeError:
        return None
    return memory if isinstance(memory, KernelMemory) else None


def describers_of(ctx: Any) -> Describers | None:
    """The describers registry ``ctx`` sees (``ctx.describers``), or ``None`` without one."""
    try:
        found = ctx.describers
    except AttributeError:
        return None
    return found if isinstance(found, Describers) else None


class _Tools:
    """The tool bodies over one shell, bounded by ``max_chars``; ``memory`` (undo snapshots,
    provenance, autopsies) when the extension provides one; ``ctx``: the context whose
    ``describers`` service ``inspect_variable`` consults (asked at each call, so a registry
    provided later counts)."""

    def __init__(
        self, shell: Any, max_chars: int, memory: KernelMemory | None = None, ctx: Any = None
    ) -> None:
        self.shell = shell
        self.max_chars = max_chars
        self.memory = memory
        self.ctx = ctx

    def list_variables(self) -> str:
        """List the variables of the user's notebook namespace: one line per name with its
        type and a short summary (length, shape, dtype), sorted by name."""
        names = user_variables(self.shell)
        if not names:
            return "The namespace has no user variables yet."
        lines = []
        for name in sorted(names):
            value = names[name]
            kind = type(value).__name__
            if is_secret(name):
                lines.append(f"{name}: {kind} (secret: value hidden)")
                continue
            summary = short_summary(value)
            lines.append(f"{name}: {kind}" + (f" — {summary}" if summary else ""))
        return truncate("\n".join(lines), self.max_chars)

    def inspect_variable(self, name: str) -> str | ToolResult:
        """Describe one variable of the user's namespace: DataFrames (shape, dtypes, head,
        describe), arrays (shape, dtype, statistics), containers, callables, anything else."""
        ns = user_variables(self.shell)
        if is_secret(name):
            return error_result(
                TOOL_ERROR,
                f"{name!r} looks like a secret (its name contains KEY, TOKEN, SECRET or "
                "PASSWORD); its value is not shown",
            )
        if name not in ns:
            near = close_matches(name, ns)
            hint = f"; did you mean: {', '.join(near)}?" if near else ""
            return error_result(TOOL_ERROR, f"no variable named {name!r}{hint}")
        describers = describers_of(self.ctx) if self.ctx is not None else None
        if describers is None:  # an App without the extension: the shell's registry
            describers = shell_describers(self.shell)
        text = f"{name} = " + describe(ns[name], self.max_chars, describers)
        origin = self.memory.origin(name) if self.memory is not None else None
        if origin:  # the end of the text: the summary is cut first when over budget
            tail = f"\norigin: {origin}"
            text = truncate(text, max(0, self.max_chars - len(tail))) + tail
        return truncate(mask(text, secret_values(ns)), self.max_chars)

    def read_error(self, cell: str = "") -> str | ToolResult:
        """The autopsy of a notebook cell that failed: its source, the exception chain, the
        traceback and the local variables of the failing frames, and for a misspelt name, key
        or attribute the closest existing ones. ``cell``: the cell id or execution count
        (e.g. "[5]"); empty for the most recent failure."""
        if self.memory is None:
            return error_result(
                TOOL_ERROR,
                "no error autopsies in this kernel: load the extension (%load_ext agentloop_nb)",
            )
        autopsy = self.memory.autopsy(cell or None)
        if autopsy is None:
            kept = self.memory.autopsies.describe_kept()
            what = f"cell {cell!r}" if cell else "any cell"
            return error_result(
                TOOL_ERROR,
                f"no failure is kept for {what} (kept: {kept}); a cell's autopsy is dropped "
                "when that cell next succeeds",
            )
        return autopsy.render(self.max_chars)

    def notebook_history(self, n: int = 10) -> str:
        """The last n executed notebook cells (In) with their text outputs (Out), truncated.
        A cell still running (e.g. one awaiting the agent) is the last one listed."""
        if n < 1:
            return "Nothing asked for (n must be at least 1)."
        ns = self.shell.user_ns
        inputs = _typed_inputs(self.shell)
        outputs = ns.get("Out") or {}
        first = max(1, len(inputs) - n)
        per_cell = max(80, self.max_chars // max(1, min(n, len(inputs))))
        parts = []
        for i in range(first, len(inputs)):
            part = f"[{i}] In:\n{truncate(str(inputs[i]).rstrip(), per_cell)}"
            if i in outputs:
                out = truncate(_plain(outputs[i]), per_cell)
                part += f"\n[{i}] Out:\n{out}"
            parts.append(part)
        if not parts:
            return "No cells have been executed yet."
        secrets = secret_values(ns)
        parts = [mask(p, secrets) for p in parts]
        while len(parts) > 1 and sum(len(p) + 2 for p in parts) > self.max_chars:
            parts.pop(0)  # over budget: the oldest cells go first
        return truncate("\n\n".join(parts), self.max_chars)

    async def run_python(self, code: str, execution: ToolExecution) -> ToolResult:
        """Run Python code in the user's notebook namespace as a cell would (the last
        expression's value is shown). Returns stdout, stderr, the value, the names created or
        rebound and any images. Variables it creates stay available to the notebook."""
        if execution.signal.aborted:
            return error_result(TOOL_ERROR, "aborted before the code ran")
        memory = self.memory
        run = None
        if memory is not None:
            run = memory.begin_run(
                code,
                agent=execution.agent,
                call_id=str(execution.call_id),
                turn=int(getattr(execution, "turn", 0) or 0),
            )
        try:
            outcome = run_code(self.shell, code)
        finally:
            if run is not None and memory is not None:
                memory.end_run(run)
        if outcome.interrupted and execution.agent is not None:
            # The stop button: the code stopped, and so does the turn (cause: user).
            execution.agent.cancel("user")
        secrets = secret_values(self.shell.user_ns)
        text = mask(self._report(outcome), secrets)
        meta: dict[str, Any] = {"names": outcome.names}
        if run is not None and run.snapshot.unrestorable():
            meta["not_restorable"] = run.snapshot.unrestorable()
        if outcome.error is not None:
            result = error_result(TOOL_ERROR, text, meta=meta)
            return result.model_copy(update={"content": text})
        if not outcome.images:
            return ToolResult(content=text, meta=meta)
        # Images make the content a list of blocks: the text, then one image block each.
        images = [ImageBlock(media_type="image/png", data=png) for png in outcome.images]
        return ToolResult(content=(TextBlock(text=text), *images), meta=meta)

    def _report(self, o: RunOutcome) -> str:
        budget = self.max_chars
        parts: list[str] = []
        if o.error is not None:
            parts.append(f"error:\n{truncate(o.error, budget // 2)}")
        if o.value is not None:
            parts.append(f"value: {truncate(o.value, budget // 3)}")
        if o.stdout:
            parts.append(f"stdout:\n{truncate(o.stdout.rstrip(), budget // 3)}")
        if o.stderr:
            parts.append(f"stderr:\n{truncate(o.stderr.rstrip(), budget // 4)}")
        for d in o.displays:
            parts.append(f"display: {truncate(d, budget // 6)}")
        if o.images:
            parts.append(f"images: {len(o.images)} image/png")
        if o.names:
            parts.append(f"names: {', '.join(o.names)}")
        if not parts:
            parts.append("ok (no output)")
        return truncate("\n".join(parts), budget)


def _plain(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:
        return f"(repr failed: {type(exc).__name__})"


def undo_action(
    memory: KernelMemory,
) -> tuple[Callable[[Any, str], str], Callable[[Any, str], bool]]:
    """``(run, available)`` of the views' "Undo" button on a finished ``run_python`` call:
    undo that run and the agent's later ones; offered while the run is remembered."""

    def run(agent: Any, call_id: str) -> str:
        return str(memory.undo(agent, through=call_id))

    return run, memory.can_undo


def _definitions(tools: _Tools, run: RunMode) -> list[Tool]:
    defs = [
        tool(concurrency_safe=True)(tools.list_variables),
        tool(concurrency_safe=True)(tools.inspect_variable),
        tool(concurrency_safe=True)(tools.notebook_history),
        tool(concurrency_safe=True)(tools.read_error),
    ]
    if run != "never":
        defs.append(tool(tools.run_python))
    return defs


async def _ask_for_code(payload: ToolExecution, next_: Callable[[], Awaitable[Any]]) -> Any:
    if payload.name == "run_python":
        return Ask(reason="run Python code in your kernel")
    return await next_()


def add_kernel_tools(agent: Any, *, run: RunMode = "ask", max_chars: int = 4000) -> Disposer:
    """Register the kernel tools on ``agent``'s scope (what ``kernel_tools(agent)`` does);
    calling again replaces them.

    Raises ``ValueError`` for an unknown ``run`` mode or a ``max_chars`` below 200, and
    ``RuntimeError`` outside an IPython kernel."""
    if run not in _RUN_MODES:
        raise InvalidValueError(f"run must be one of {', '.join(_RUN_MODES)}; got {run!r}")
    if not isinstance(max_chars, int) or max_chars < 200:
        raise InvalidValueError(f"max_chars must be an integer >= 200, got {max_chars!r}")
    memory = memory_of(agent)
    bodies = _Tools(_shell(), max_chars, memory, agent.ctx)

    def apply(ctx: Any, _config: Any) -> None:
        for definition in _definitions(bodies, run):
            ctx.tools.register(definition)
        approval = getattr(ctx, "approval", None)
        if run == "ask":
            ctx.on("tools/pre-execute", _ask_for_code)
            register = getattr(approval, "register_detail", None)
            if register is not None:  # a widget approval shows the code it asks about
                ctx.effect(lambda: register("run_python", approval_detail_html))
        add_action = getattr(approval, "register_action", None)
        if run != "never" and memory is not None and add_action is not None:
            ctx.effect(lambda: add_action("run_python", "Undo", *undo_action(memory)))

    fiber = agent.ctx.plugin(apply, name=_PLUGIN_NAME)
    return Disposer(fiber.dispose)


class KernelTools:
    """``kernel_tools(agent, *, run="ask", max_chars=4000) -> Disposer`` (the module
    docstring says what it registers); ``kernel_tools.describe(type, fn)`` registers a
    describer ``fn(obj, max_chars) -> str`` used by ``inspect_variable`` for instances of
    ``type`` (an object's own ``_repr_llm_()`` still wins).

    ``KernelTools(describers)``: ``describers()`` answers the registry ``describe`` acts on
    without ``ctx=`` (``None``: there is none). The notebook layer's ``kernel_tools`` is built
    by the kernel state and answers the loaded extension's (``KernelState.describers``)."""

    def __init__(self, describers: Callable[[], Describers | None]) -> None:
        self._describers = describers

    def __call__(self, agent: Any, *, run: RunMode = "ask", max_chars: int = 4000) -> Disposer:
        """Register the kernel tools on ``agent``'s scope; calling again replaces them.

        Raises ``ValueError`` for an unknown ``run`` mode or a ``max_chars`` below 200, and
        ``RuntimeError`` outside an IPython kernel."""
        return add_kernel_tools(agent, run=run, max_chars=max_chars)

    def describe(self, cls: type, fn: Describer, *, ctx: Any = None) -> Disposer:
        """Describe instances of ``cls`` with ``fn(obj, max_chars) -> str`` (bounded by
        ``max_chars`` whatever it returns), in the IPython shell's registry (the kernel's:
        with or without the extension loaded, kept across ``%reload_ext``), or with ``ctx=``
        in the ``describers`` service that context sees (for an App outside IPython:
        ``app.ctx.provide("describers", Describers())`` first). The disposer unregisters it.

        Raises ``TypeError`` for a non-class or a non-callable, ``RuntimeError`` when there is
        no registry (outside IPython, without ``ctx=``)."""
        Describers.check(cls, fn)
        registry = describers_of(ctx) if ctx is not None else self._describers()
        if registry is None:
            where = (
                f"{ctx!r} provides no 'describers' service"
                if ctx is not None
                else "no IPython shell is running"
            )
            raise UsageError(
                f"kernel_tools.describe: {where}; call it in IPython or Jupyter, or pass ctx= "
                "a context that provides one: app.ctx.provide('describers', Describers())"
            )
        return registry.register(cls, fn)
