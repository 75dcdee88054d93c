"""The OpenAI Chat Completions stream mapping (:class:`OpenAIStreamParser`, ``usage_from_openai``;
see ``openai``'s module docstring). Its own module: it makes the stream-chunk models, which load
with the first stream, not when ``App()`` builds its adapters (``openai`` re-exports both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._json import dumps_arguments
from ._chunks import (
    BlockEnd,
    ErrorFinish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from ._stream_state import StreamState


class _Call:
    __slots__ = ("block", "id", "named")

    def __init__(self, block: int, call_id: str) -> None:
        self.block = block
        self.id = call_id
        self.named = False


def usage_from_openai(u: Mapping[str, Any]) -> Usage:
    """A ``Usage`` from an OpenAI(-compatible) usage object."""
    prompt_details = u.get("prompt_tokens_details") or {}
    completion_details = u.get("completion_tokens_details") or {}
    cached = prompt_details.get("cached_tokens")
    if cached is None:
        cached = u.get("prompt_cache_hit_tokens")  # DeepSeek's name for it
    reasoning = completion_details.get("reasoning_tokens")
    return Usage(
        input_tokens=int(u.get("prompt_tokens") or 0),
        output_tokens=int(u.get("completion_tokens") or 0),
        cache_read_tokens=int(cached) if cached is not None else None,
        reasoning_tokens=int(reasoning) if reasoning is not None else None,
    )


class OpenAIStreamParser(StreamState):
    """Maps Chat Completions chunks to ``StreamChunk`` s (an ``EventParser`` for
    :func:`._sse.stream_sse`; see the module docstring)."""

    reason_field = "finish_reason"
    max_tokens_reason = "length"
    terminator = "a finish_reason or [DONE]"

    def __init__(self, provider: str = "openai") -> None:
        super().__init__(provider)
        self._text: int | None = None
        self._reasoning: int | None = None
        self._calls: dict[int, _Call] = {}
        self._open_calls: list[int] = []
        self._usage: Usage | None = None

    def _end_text_and_reasoning(self, out: list[StreamChunk]) -> None:
        if self._text is not None:
            out.append(BlockEnd(index=self._text))
            self._text = None
        if self._reasoning is not None:
            out.append(BlockEnd(index=self._reasoning))
            self._reasoning = None

    def feed(self, event: str, data: str) -> list[StreamChunk]:
        if not data:
            return []
        self._events += 1
        if data == "[DONE]" or data.strip() == "[DONE]":
            return self._finish()
        obj = self._decode(data, "the event stream")
        if obj.get("error") or event == "error":
            raise self._stream_failure(obj)
        out: list[StreamChunk] = []
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._usage = usage_from_openai(usage)
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, out)
            reason = choice.get("finish_reason")
            if reason:
                self._reason = str(reason)
        return out

    def _delta(self, delta: dict[str, Any], out: list[StreamChunk]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            if self._reasoning is None:
                self._end_text_and_reasoning(out)
                self._reasoning = self._open_block(out, "reasoning")
            out.append(ReasoningDelta(index=self._reasoning, text=reasoning))
        for key in ("content", "refusal"):
            text = delta.get(key)
            if isinstance(text, str) and text:
                if self._text is None:
                    self._end_text_and_reasoning(out)
                    self._text = self._open_block(out, "text")
                self._has_text = True
                out.append(TextDelta(index=self._text, text=text))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, call in enumerate(calls):
                if isinstance(call, dict):
                    self._tool_delta(position, call, out)

    def _tool_delta(self, position: int, call: dict[str, Any], out: list[StreamChunk]) -> None:
        raw_index = call.get("index")
        call_id = call.get("id")
        if isinstance(raw_index, int):
            key = raw_index
        elif call_id and all(c.id != call_id for c in self._calls.values()):
            key = len(self._calls)  # a server that omits ``index``: a new id is a new call
        else:
            key = max(self._calls, default=position)
        state = self._calls.get(key)
        if state is None:
            self._end_text_and_reasoning(out)
            block = self._open_block(out, "tool-call")
            state = _Call(block, str(call_id) if call_id else f"call_{self._events}_{key}")
            self._calls[key] = state
            self._open_calls.append(key)
            self._has_tools = True
        fn = call.get("function") or {}
        name = fn.get("name") if isinstance(fn, dict) else None
        args: Any = fn.get("arguments") if isinstance(fn, dict) else None
        if args is not None and not isinstance(args, str):
            args = dumps_arguments(args)  # some servers send the arguments object itself
        send_name = name if (name and not state.named) else None
        if send_name:
            state.named = True
        if send_name or args:
            out.append(
                ToolCallDelta(
                    index=state.block, id=state.id, name=send_name, arguments_delta=args or ""
                )
            )

    # -- the end of the stream (see ``StreamState``) --------------------------------------------

    def _close_open_blocks(self, out: list[StreamChunk]) -> None:
        self._end_text_and_reasoning(out)
        for key in self._open_calls:
            out.append(BlockEnd(index=self._calls[key].block))
        self._open_calls.clear()

    def _final_usage(self) -> Usage | None:
        return self._usage

    def _provider_finish(self, reason: str | None) -> FinishReason | None:
        if reason == "content_filter":
            return ErrorFinish(
                code="BAD_REQUEST",
                message=f"{self.provider}: the provider's content filter blocked the response "
                "(finish_reason 'content_filter'); rephrase the request",
            )
        return None


__all__ = ["OpenAIStreamParser", "usage_from_openai"]
