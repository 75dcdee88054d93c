"""Sub-agents: a ``delegate(task, instructions=None)`` tool that runs a task on a child agent.

Apply :class:`SubagentsPlugin` once (``app.ctx.plugin(SubagentsPlugin)``); it provides the
``subagents`` service. ``ctx.subagents.enable(agent, max_children=4, max_depth=2)`` registers a
parallel-safe ``delegate`` tool on that agent only (its disposer removes it). Each call:

- creates a child through ``agent.ctx.agents.create`` (so the parent's scope owns it) on a new
  session ``<parent session>-sub-<hex>`` whose header meta carries ``parent_session_id``,
  ``parent_call_id`` and ``subagent_depth``; the child uses the parent's options unless
  ``enable(..., options=...)`` (alias ``agent_options=``) names others; ``instructions``
  become a system prompt section of the child (``subagent:instructions``); the child gets
  ``delegate`` too, with the same limits one level deeper;
- runs one turn on ``task`` and returns the child's final assistant text as the tool result
  (``meta``: the child's ``session_id`` and turn-end ``reason``);
- disposes the child afterwards. Its session stays stored (with persistence on) and can be
  resumed on its own like any session.

Failures are error results, never exceptions: a child turn that ends ``error`` or ``rejected``
→ ``SUBAGENT_FAILED`` (naming the child's error); one that is cancelled → ``ABORTED``; more
than ``max_children`` children of one parent running at once → ``SUBAGENT_LIMIT``; a call from
an agent already at ``max_depth`` → ``SUBAGENT_DEPTH``.

Cancellation: when the parent's turn is aborted (``agent.cancel()``, or disposal) each running
child is cancelled with cause ``parent`` and the call waits for it to settle before the child is
disposed; so disposing the parent disposes its children, through its scope, before it ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import anyio

from ..context import Disposer
from ..errors import InvalidTypeError, InvalidValueError
from ..events import ASSISTANT_MESSAGE, TURN_END, TURN_START
from ..signals import AbortError
from ..tools import Tool, ToolExecution, ToolResult, error_result

if TYPE_CHECKING:
    from ..context import Context
    from ..loop import AgentOptions

__all__ = [
    "SUBAGENT_DEPTH",
    "SUBAGENT_FAILED",
    "SUBAGENT_LIMIT",
    "SubagentsPlugin",
]

SUBAGENT_FAILED = "SUBAGENT_FAILED"
SUBAGENT_LIMIT = "SUBAGENT_LIMIT"
SUBAGENT_DEPTH = "SUBAGENT_DEPTH"
_DEPTH_KEY = "subagent_depth"
_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the sub-agent should do and report."},
        "instructions": {
            "type": ["string", "null"],
            "description": "Optional system instructions for the sub-agent.",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}
_DESCRIPTION = (
    "Delegate a self-contained task to a sub-agent with a fresh context. It sees only `task` "
    "(and `instructions`), works on its own with the same tools, and its final answer is "
    "returned. Several delegate calls in one reply run in parallel."
)


@dataclass(frozen=True, slots=True)
class _Limits:
    max_children: int
    max_depth: int
    options: AgentOptions | None


class SubagentsPlugin:
    """Provides ``ctx.subagents``; see the module docstring for what ``delegate`` does."""

    name = "subagents"

    def __init__(self, ctx: Context, config: Any = None) -> None:
        self.ctx = ctx
        ctx.provide("subagents", self)

    def enable(
        self,
        agent: Any,
        *,
        max_children: int = 4,
        max_depth: int = 2,
        options: AgentOptions | None = None,
        agent_options: AgentOptions | None = None,
    ) -> Disposer:
        """Register ``delegate`` on ``agent`` (scoped to it; removed by the returned disposer,
        the agent's disposal or this plugin's). ``max_children``: children of one parent
        running at once; ``max_depth``: how many levels of sub-agents may exist below a
        top-level agent; ``options`` (alias ``agent_options``): the children's, default the
        parent's. Raises ``ValueError`` for a limit below 1, ``TypeError`` for both
        ``options=`` and ``agent_options=``."""
        if options is not None and agent_options is not None:
            raise InvalidTypeError(
                "subagents.enable() got both options= and agent_options=, which are one "
                "parameter under two names; pass options= only"
            )
        for label, value in (("max_children", max_children), ("max_depth", max_depth)):
            if type(value) is not int or value < 1:
                raise InvalidValueError(
                    f"subagents.enable: {label} must be an integer >= 1, got {value!r}"
                )
        limits = _Limits(max_children, max_depth, options or agent_options)
        remove = _register(agent.ctx, agent, limits)
        # Owned twice: by the agent's scope (registered there) and by this plugin's scope, so
        # unloading the plugin takes ``delegate`` away again.
        return self.ctx.effect(lambda: remove)


def _register(agent_ctx: Any, agent: Any, limits: _Limits) -> Disposer:
    delegate = _Delegate(agent, limits)
    tool = Tool("delegate", _DESCRIPTION, _PARAMETERS, delegate.execute, concurrency_safe=True)
    disposer: Disposer = agent_ctx.tools.register(tool)
    return disposer


def _depth(agent: Any) -> int:
    meta = agent.session.header.meta
    value = meta.get(_DEPTH_KEY, 0) if isinstance(meta, Mapping) else 0
    return value if type(value) is int and value >= 0 else 0


class _Delegate:
    """The ``delegate`` tool of one agent: its limits and its running children count."""

    __slots__ = ("agent", "limits", "running")

    def __init__(self, agent: Any, limits: _Limits) -> None:
        self.agent = agent
        self.limits = limits
        self.running = 0

    async def execute(self, args: dict[str, Any], execution: ToolExecution) -> ToolResult:
        task = args.get("task")
        instructions = args.get("instructions")
        if not isinstance(task, str) or not task.strip():
            return error_result("INVALID_ARGS", "delegate: task must be a non-empty string")
        if instructions is not None and not isinstance(instructions, str):
            return error_result("INVALID_ARGS", "delegate: instructions must be a string")
        limits, depth = self.limits, _depth(self.agent)
        if depth >= limits.max_depth:
            return error_result(
                SUBAGENT_DEPTH,
                f"delegate: this agent is at sub-agent depth {depth} (max_depth="
                f"{limits.max_depth}) and cannot create sub-agents; do the task yourself",
            )
        if self.running >= limits.max_children:
            return error_result(
                SUBAGENT_LIMIT,
                f"delegate: {self.running} sub-agents of this agent are already running "
                f"(max_children={limits.max_children}); wait for their results and retry",
            )
        self.running += 1
        try:
            return await self._run_child(task, instructions, execution, depth + 1)
        finally:
            self.running -= 1

    async def _run_child(
        self, task: str, instructions: str | None, execution: ToolExecution, depth: int
    ) -> ToolResult:
        parent = self.agent
        session_id = f"{parent.session.id}-sub-{uuid4().hex[:12]}"
        meta = {
            "parent_session_id": parent.session.id,
            "parent_call_id": execution.call_id,
            _DEPTH_KEY: depth,
            "cwd": parent.session.header.cwd,
        }
        limits = self.limits

        def setup(child_ctx: Any) -> None:
            if instructions:
                child_ctx.system_prompt.section("subagent:instructions", instructions)
            _register(child_ctx, child_ctx.agent, limits)

        try:
            handle = await parent.ctx.agents.create(
                session_id=session_id,
                options=limits.options or parent.options,
                meta=meta,
                setup=setup,
                signal=execution.signal,
            )
        except AbortError:
            return error_result("ABORTED", "delegate: cancelled before the sub-agent started")
        except Exception as exc:
            return error_result(SUBAGENT_FAILED, f"delegate: cannot start a sub-agent: {exc}")
        child = handle.agent
        off = execution.signal.add_callback(lambda _reason: child.cancel("parent"))
        try:
            child.followup(task)
            await child.when_idle()
        finally:
            off()
            # Runs even when this body is cancelled (the parent's abort, the App closing): the
            # child is stopped with cause "parent" (a no-op once it is idle), settles and is
            # disposed before the call ends.
            child.cancel("parent")
            with anyio.CancelScope(shield=True):
                await child.when_idle()
                await handle.dispose()
        return _outcome(child.session)


def _outcome(session: Any) -> ToolResult:
    """The tool result for a child's finished turn: its final text, or an error result."""
    events = session.events
    reason: Mapping[str, Any] = next(
        (e.data.get("reason") or {} for e in reversed(events) if e.type == TURN_END),
        {"kind": "completed"},
    )
    final = ""
    for event in reversed(events):
        if event.type == TURN_START:
            break
        if event.type == ASSISTANT_MESSAGE:
            final = _text(event.data.get("message"))
            break
    meta = {"session_id": session.id, "reason": dict(reason)}
    kind = reason.get("kind")
    if kind in ("completed", "max-tokens"):
        return ToolResult(content=final, meta=meta)
    if kind in ("aborted", "disposed"):
        cause = reason.get("cause") or {}
        why = cause.get("kind", kind) if isinstance(cause, Mapping) else kind
        return error_result("ABORTED", f"delegate: the sub-agent was cancelled ({why})", meta=meta)
    message = reason.get("message") or kind
    code = reason.get("code")
    detail = str(message) if not code or str(code) in str(message) else f"{message} ({code})"
    return error_result(SUBAGENT_FAILED, f"delegate: the sub-agent failed: {detail}", meta=meta)


def _text(message: Any) -> str:
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list | tuple):
        return ""
    return "".join(
        str(block.get("text", ""))
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text"
    )
