"""The LLM layer: the ``ctx.llm`` service (:class:`LlmRuntime`), the ``StreamChunk`` union every
adapter yields, the :class:`BlockAssembler` that folds chunks into an ``AssistantMessage``, and
:class:`LlmError`. Provider adapters live in submodules (``openai``, ``anthropic``, ``offline``)
and are imported on demand, so importing this package opens no network client.
"""

from __future__ import annotations

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
    GenerateOptions,
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
from ._errors import LlmError
from ._runtime import Adapter, BoundLlmRuntime, LlmRuntime, LlmStreamPayload

__all__ = [
    "CHUNK_ADAPTER",
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
    "ReasoningDelta",
    "Stop",
    "StreamChunk",
    "TextDelta",
    "ToolCallDelta",
    "ToolCalls",
    "Usage",
    "UsageChunk",
    "assemble",
]
