"""Tools: ``@tool`` definitions from type hints, the ``ToolRuntime`` service (``ctx.tools``),
the execution pipeline and its decisions.

See ``ToolRuntime`` for the pipeline phases and ``tool`` for how a function becomes a tool.
The modules follow one call: ``_registry`` (what can be called), ``_admit`` (may it run),
``_dispatch`` (the body; ``_bodies`` for where bodies run, ``_results`` for the result caps),
``_settle`` (post-processing, results).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports
from ._runtime import ExecutionMode, Guard, ToolRuntime

if TYPE_CHECKING:
    from ._decisions import (
        ABORTED,
        ABORTED_BEFORE_DISPATCH,
        BLOCKED,
        CALL_CANCELLED,
        CANCELLED,
        DENIED,
        INVALID_ARGS,
        TOOL_ERROR,
        TOOL_TIMEOUT,
        UNKNOWN_TOOL,
        PostExecutePayload,
        ToolDefinition,
        ToolErrorInfo,
        ToolExecution,
        ToolResult,
        ToolResultPayload,
        ToolSettledPayload,
        aborted_before_dispatch,
        error_result,
    )
    from ._define import ConcurrencySafe, FinalizeContent, Tool, ToolExecute, tool
    from ._results import MAX_RESULT_CHARS, MAX_RESULT_DEPTH, MAX_RESULT_ITEMS
    from ._verdicts import (
        Accept,
        Allow,
        ApproveEdited,
        Ask,
        Block,
        Deny,
        PostExecuteDecision,
        PreExecuteDecision,
    )

# Only ``ToolRuntime`` (``ctx.tools``, which ``App()`` builds) loads with the package. What a
# tool definition needs (``tool``, ``Tool``, where bodies run) loads with the first definition;
# the execution record, ``ToolResult`` (a pydantic model) and the result caps with the first
# definition or call; the decisions (six pydantic classes) with the pipeline's first call. Or
# each with its first access here (start-up cost).
_EXPORTS = LazyExports(
    __name__,
    {
        "._decisions": (
            "ABORTED",
            "ABORTED_BEFORE_DISPATCH",
            "BLOCKED",
            "CALL_CANCELLED",
            "CANCELLED",
            "DENIED",
            "INVALID_ARGS",
            "TOOL_ERROR",
            "TOOL_TIMEOUT",
            "UNKNOWN_TOOL",
            "PostExecutePayload",
            "ToolDefinition",
            "ToolErrorInfo",
            "ToolExecution",
            "ToolResult",
            "ToolResultPayload",
            "ToolSettledPayload",
            "aborted_before_dispatch",
            "error_result",
        ),
        "._define": ("ConcurrencySafe", "FinalizeContent", "Tool", "ToolExecute", "tool"),
        "._results": ("MAX_RESULT_CHARS", "MAX_RESULT_DEPTH", "MAX_RESULT_ITEMS"),
        "._verdicts": (
            "Accept",
            "Allow",
            "ApproveEdited",
            "Ask",
            "Block",
            "Deny",
            "PostExecuteDecision",
            "PreExecuteDecision",
        ),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()


__all__ = [
    "ABORTED",
    "ABORTED_BEFORE_DISPATCH",
    "BLOCKED",
    "CALL_CANCELLED",
    "CANCELLED",
    "DENIED",
    "INVALID_ARGS",
    "MAX_RESULT_CHARS",
    "MAX_RESULT_DEPTH",
    "MAX_RESULT_ITEMS",
    "TOOL_ERROR",
    "TOOL_TIMEOUT",
    "UNKNOWN_TOOL",
    "Accept",
    "Allow",
    "ApproveEdited",
    "Ask",
    "Block",
    "ConcurrencySafe",
    "Deny",
    "ExecutionMode",
    "FinalizeContent",
    "Guard",
    "PostExecuteDecision",
    "PostExecutePayload",
    "PreExecuteDecision",
    "Tool",
    "ToolDefinition",
    "ToolErrorInfo",
    "ToolExecute",
    "ToolExecution",
    "ToolResult",
    "ToolResultPayload",
    "ToolRuntime",
    "ToolSettledPayload",
    "aborted_before_dispatch",
    "error_result",
    "tool",
]
