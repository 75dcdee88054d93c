"""The Anthropic Messages stream mapping (:class:`AnthropicStreamParser`; see ``anthropic``'s
module docstring). Its own module: it makes the stream-chunk models, which load with the first
stream, not when ``App()`` builds its adapters (``anthropic`` re-exports it)."""

from __future__ import annotations

from typing import Any

from .._json import dumps_arguments
from ..messages import ReasoningBlock
from ._chunks import (
    BlockEnd,
    BlockType,
    ErrorFinish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from ._http import truncate
from ._stream_state import StreamState


class _Block:
    __slots__ = ("call_id", "got_json", "index", "kind", "signature", "start_input", "text")

    def __init__(self, kind: BlockType) -> None:
        self.kind = kind
        self.index: int | None = None  # our block index; None until a lazy text block has content
        self.text: list[str] = []
        self.signature: str | None = None
        self.call_id = ""
        self.got_json = False
        self.start_input: Any = None


class AnthropicStreamParser(StreamState):
    """Maps Messages API events to ``StreamChunk`` s (an ``EventParser`` for
    :func:`._sse.stream_sse`; see the module docstring)."""

    reason_field = "stop_reason"
    max_tokens_reason = "max_tokens"
    terminator = "message_stop"

    def __init__(self, provider: str = "anthropic") -> None:
        super().__init__(provider)
        self._blocks: dict[int, _Block | None] = {}
        self._open: list[_Block] = []
        self._input = 0
        self._output = 0
        self._cache_read: int | None = None
        self._cache_write: int | None = None
        self._stop_details: Any = None

    def _start(self, block: _Block, out: list[StreamChunk]) -> None:
        block.index = self._open_block(out, block.kind)
        self._open.append(block)

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if usage.get("input_tokens") is not None:
            self._input = int(usage["input_tokens"])
        if usage.get("output_tokens") is not None:
            self._output = int(usage["output_tokens"])
        if usage.get("cache_read_input_tokens") is not None:
            self._cache_read = int(usage["cache_read_input_tokens"])
        if usage.get("cache_creation_input_tokens") is not None:
            self._cache_write = int(usage["cache_creation_input_tokens"])

    def feed(self, event: str, data: str) -> list[StreamChunk]:
        if not data.strip():
            return []
        self._events += 1
        obj = self._decode(data, f"the {event!r} event")
        kind = obj.get("type") or event
        out: list[StreamChunk] = []
        if kind == "content_block_delta":
            self._delta(obj, out)
        elif kind == "content_block_start":
            self._block_start(obj, out)
        elif kind == "content_block_stop":
            self._block_stop(self._blocks.get(obj.get("index", -1)), out)
        elif kind == "message_start":
            message = obj.get("message")
            if isinstance(message, dict):
                self._usage(message.get("usage"))
        elif kind == "message_delta":
            delta = obj.get("delta") or {}
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self._reason = str(delta["stop_reason"])
                self._stop_details = delta.get("stop_details")
            self._usage(obj.get("usage"))
        elif kind == "message_stop":
            return self._finish()
        elif kind == "error":
            raise self._stream_failure(obj)
        # "ping" and event types this adapter does not know are ignored on purpose.
        return out

    def _block_start(self, obj: dict[str, Any], out: list[StreamChunk]) -> None:
        index = obj.get("index", -1)
        cb = obj.get("content_block") or {}
        ctype = cb.get("type") if isinstance(cb, dict) else None
        if ctype == "text":
            block = _Block("text")
            self._blocks[index] = block
            if cb.get("text"):
                self._text(block, cb["text"], out)
        elif ctype == "thinking":
            block = _Block("reasoning")
            self._blocks[index] = block
            self._start(block, out)
            if cb.get("thinking"):
                block.text.append(cb["thinking"])
                out.append(ReasoningDelta(index=block.index, text=cb["thinking"]))
            block.signature = cb.get("signature") or None
        elif ctype == "tool_use":
            block = _Block("tool-call")
            block.call_id = str(cb.get("id") or f"toolu_{self._events}")
            block.start_input = cb.get("input")
            self._blocks[index] = block
            self._start(block, out)
            self._has_tools = True
            out.append(
                ToolCallDelta(index=block.index, id=block.call_id, name=str(cb.get("name") or ""))
            )
        else:
            self._blocks[index] = None

    def _text(self, block: _Block, text: str, out: list[StreamChunk]) -> None:
        if block.index is None:
            self._start(block, out)
        self._has_text = True
        out.append(TextDelta(index=block.index, text=text))

    def _delta(self, obj: dict[str, Any], out: list[StreamChunk]) -> None:
        block = self._blocks.get(obj.get("index", -1))
        delta = obj.get("delta")
        if block is None or not isinstance(delta, dict):
            return
        dtype = delta.get("type")
        if dtype == "text_delta":
            text = delta.get("text")
            if text:
                self._text(block, text, out)
        elif dtype == "thinking_delta":
            text = delta.get("thinking")
            if text and block.index is not None:
                block.text.append(text)
                out.append(ReasoningDelta(index=block.index, text=text))
        elif dtype == "signature_delta":
            block.signature = (block.signature or "") + str(delta.get("signature") or "")
        elif dtype == "input_json_delta":
            partial = delta.get("partial_json")
            if partial and block.index is not None:
                block.got_json = True
                out.append(
                    ToolCallDelta(index=block.index, id=block.call_id, arguments_delta=partial)
                )

    def _block_stop(self, block: _Block | None, out: list[StreamChunk]) -> None:
        if block is None or block.index is None or block not in self._open:
            return
        self._open.remove(block)
        if block.kind == "reasoning":
            full = ReasoningBlock(text="".join(block.text), signature=block.signature)
            out.append(BlockEnd(index=block.index, block=full))
            return
        if block.kind == "tool-call" and not block.got_json and block.start_input:
            # A proxy that sends the whole input at block start and no deltas.
            out.append(
                ToolCallDelta(
                    index=block.index,
                    id=block.call_id,
                    arguments_delta=dumps_arguments(block.start_input),
                )
            )
        out.append(BlockEnd(index=block.index))

    # -- the end of the stream (see ``StreamState``) --------------------------------------------

    def _close_open_blocks(self, out: list[StreamChunk]) -> None:
        for block in list(self._open):
            self._block_stop(block, out)

    def _final_usage(self) -> Usage | None:
        return Usage(
            input_tokens=self._input,
            output_tokens=self._output,
            cache_read_tokens=self._cache_read,
            cache_write_tokens=self._cache_write,
        )

    def _provider_finish(self, reason: str | None) -> FinishReason | None:
        if reason == "refusal":
            details = self._stop_details if isinstance(self._stop_details, dict) else {}
            why = "; ".join(
                f"{k}: {details[k]}" for k in ("category", "explanation") if details.get(k)
            )
            return ErrorFinish(
                code="BAD_REQUEST",
                message=f"{self.provider}: the model refused the request (stop_reason 'refusal')"
                + (f": {truncate(why)}" if why else "")
                + "; rephrase it",
            )
        if reason == "model_context_window_exceeded":
            return ErrorFinish(
                code="CONTEXT_WINDOW_EXCEEDED",
                message=f"{self.provider}: the response hit the model's context window "
                "(stop_reason 'model_context_window_exceeded'); shorten or compact the conversation",
            )
        return None


__all__ = ["AnthropicStreamParser"]
