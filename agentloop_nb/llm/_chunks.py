"""The ``StreamChunk`` union every adapter yields (``GenerateOptions``, what every adapter
receives, is in ``_options``: it loads with the first request).

Loaded with the first stream (or the first access to a name here through ``agentloop_nb.llm``
or the package root), not by ``import agentloop_nb`` nor ``App()``: a dozen pydantic classes
cost about 1.2 M instructions each to make even with ``defer_build``, which a program that only
lists, reads or replays sessions would pay for nothing. Whatever runs before the first stream
names these classes only under ``TYPE_CHECKING`` and imports them where a chunk is made.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..messages import ContentBlock


class _Frozen(BaseModel):
    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Usage(_Frozen):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    reasoning_tokens: int | None = None


BlockType = Literal["text", "reasoning", "tool-call"]


class BlockStart(_Frozen):
    type: Literal["block-start"] = "block-start"
    index: int
    block_type: BlockType


class TextDelta(_Frozen):
    type: Literal["text-delta"] = "text-delta"
    index: int
    text: str


class ReasoningDelta(_Frozen):
    type: Literal["reasoning-delta"] = "reasoning-delta"
    index: int
    text: str


class ToolCallDelta(_Frozen):
    """A piece of a tool call. ``id`` and ``name`` may repeat in every delta of the same call:
    the assembler keeps the first non-empty value and concatenates only ``arguments_delta``."""

    type: Literal["tool-call-delta"] = "tool-call-delta"
    index: int
    id: str
    name: str | None = None
    arguments_delta: str = ""


class BlockEnd(_Frozen):
    """Closes block ``index``. ``block`` is the complete block when the adapter knows it (it
    carries what deltas cannot, e.g. a reasoning signature); ``None`` lets the assembler build it."""

    type: Literal["block-end"] = "block-end"
    index: int
    block: ContentBlock | None = None


class UsageChunk(_Frozen):
    type: Literal["usage"] = "usage"
    usage: Usage


class Stop(_Frozen):
    kind: Literal["stop"] = "stop"


class ToolCalls(_Frozen):
    kind: Literal["tool-calls"] = "tool-calls"


class MaxTokens(_Frozen):
    kind: Literal["max-tokens"] = "max-tokens"


class Aborted(_Frozen):
    kind: Literal["aborted"] = "aborted"


ErrorCode = Literal[
    "RATE_LIMIT",
    "SERVER",
    "OVERLOADED",
    "TIMEOUT",
    "TRANSPORT",
    "AUTH",
    "BAD_REQUEST",
    "CONTEXT_WINDOW_EXCEEDED",
    "EMPTY_RESPONSE",
    "BAD_RESPONSE",
    "UNKNOWN",
    "NO_ADAPTER",
    "DUPLICATE_ADAPTER",
]


class ErrorFinish(_Frozen):
    kind: Literal["error"] = "error"
    message: str
    code: ErrorCode | str = "UNKNOWN"
    status: int | None = None
    retry_after: float | None = None


FinishReason = Annotated[
    Stop | ToolCalls | MaxTokens | Aborted | ErrorFinish, Field(discriminator="kind")
]


class Finish(_Frozen):
    type: Literal["finish"] = "finish"
    reason: FinishReason


StreamChunk = Annotated[
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageChunk | Finish,
    Field(discriminator="type"),
]

# Built on first validation, not at import (start-up cost).
CHUNK_ADAPTER: TypeAdapter[StreamChunk] = TypeAdapter(
    StreamChunk, config=ConfigDict(defer_build=True)
)

# The public path (``agentloop_nb.Usage``), as the package root's eager names report: reprs,
# docs and pickles name it whichever home loads it first.
Usage.__module__ = "agentloop_nb"
