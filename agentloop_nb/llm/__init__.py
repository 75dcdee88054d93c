"""The LLM layer: the ``ctx.llm`` service (:class:`LlmRuntime`), the ``StreamChunk`` union every
adapter yields, the :class:`BlockAssembler` that folds chunks into an ``AssistantMessage``,
:class:`LlmError`, and the prepared-call records of the loop's request path
(:class:`PreparedCall`, :class:`RetryPolicy`, :class:`RequestFacts`). Provider adapters live in
submodules (``openai``, ``anthropic``, ``offline``) and are imported on demand, so importing
this package opens no network client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports
from ._errors import LlmError
from ._prepare import DEFAULT_RETRY_CODES, PreparedCall, RequestFacts, RetryPolicy
from ._runtime import Adapter, BoundLlmRuntime, LlmRuntime

if TYPE_CHECKING:
    from ._assembler import BlockAssembler, assemble
    from ._chunks import (
        CHUNK_ADAPTER,
        Aborted,
        BlockEnd,
        BlockStart,
        BlockType,
        ErrorCode,
        ErrorFinish,
        Finish,
        FinishReason,
        MaxTokens,
        ReasoningDelta,
        Stop,
        StreamChunk,
        TextDelta,
        ToolCallDelta,
        ToolCalls,
        Usage,
        UsageChunk,
    )
    from ._options import GenerateOptions, LlmStreamPayload

# What a model request needs and a program that never streams does not (start-up cost): the
# stream-chunk models (a dozen pydantic classes) and the assembler that folds them load with
# the first stream, or the first access here; ``GenerateOptions`` (a dataclass: its methods
# are compiled when the class is made) and the ``llm/stream`` payload with the first request.
_EXPORTS = LazyExports(
    __name__,
    {
        "._chunks": (
            "CHUNK_ADAPTER",
            "Aborted",
            "BlockEnd",
            "BlockStart",
            "BlockType",
            "ErrorCode",
            "ErrorFinish",
            "Finish",
            "FinishReason",
            "MaxTokens",
            "ReasoningDelta",
            "Stop",
            "StreamChunk",
            "TextDelta",
            "ToolCallDelta",
            "ToolCalls",
            "Usage",
            "UsageChunk",
        ),
        "._assembler": ("BlockAssembler", "assemble"),
        "._options": ("GenerateOptions", "LlmStreamPayload"),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()


__all__ = [
    "CHUNK_ADAPTER",
    "DEFAULT_RETRY_CODES",
    "Aborted",
    "Adapter",
    "BlockAssembler",
    "BlockEnd",
    "BlockStart",
    "BlockType",
    "BoundLlmRuntime",
    "ErrorCode",
    "ErrorFinish",
    "Finish",
    "FinishReason",
    "GenerateOptions",
    "LlmError",
    "LlmRuntime",
    "LlmStreamPayload",
    "MaxTokens",
    "PreparedCall",
    "ReasoningDelta",
    "RequestFacts",
    "RetryPolicy",
    "Stop",
    "StreamChunk",
    "TextDelta",
    "ToolCallDelta",
    "ToolCalls",
    "Usage",
    "UsageChunk",
    "assemble",
]
