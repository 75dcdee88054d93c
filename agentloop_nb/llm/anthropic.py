"""``AnthropicAdapter``: the Anthropic Messages API, streaming, with thinking blocks.

Configuration: ``base_url`` is the host root (``/v1/messages`` is appended; a base ending in
``/v1`` gets only ``/messages``) and ``api_key`` given explicitly win; otherwise
``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` are read *at request time*. A missing key ends
the stream with an ``AUTH`` error naming the variable. The key travels in ``x-api-key`` and
never appears in a repr, an error message or a yielded chunk.

Request mapping (``GenerateOptions`` → JSON body):

- ``max_tokens`` (required by the API) defaults to ``default_max_tokens`` (4096);
  ``defaults(config)`` reports that default to ``ctx.llm.prepare_call`` (raised by the thinking
  budget when a reasoning effort is set, see below), together with ``default_reasoning_effort``
  when one is configured, so the loop logs the value actually sent;
- ``system`` → ``system``; ``tools`` → ``{name, description, input_schema}``; ``stop`` →
  ``stop_sequences``; ``temperature``; always ``stream: true``;
- ``reasoning_effort`` → extended thinking (``thinking: {type: enabled, budget_tokens}``:
  ``minimal``/``low`` 1024, ``medium`` 4096, ``high`` 16384; ``none``/``off`` disables it).
  ``max_tokens`` is raised above the budget when unset, thinking is skipped when an explicit
  ``max_tokens`` is too small for the minimum budget, and ``temperature`` is not sent with
  thinking (the API only allows the default there);
- user text/images → ``text`` / base64 ``image`` blocks (empty text is dropped: the API
  rejects it);
- assistant reasoning with a signature → ``thinking`` blocks (sent back unchanged, as the API
  requires); reasoning without a signature (e.g. produced by another provider) is dropped;
  text → ``text``; tool calls → ``tool_use`` whose ``input`` is the parsed JSON of the raw
  arguments — arguments that are not a JSON object are sent as ``{}`` (the loop has already
  answered such a call with an ``INVALID_ARGS`` tool result, which tells the model);
- tool results → ``tool_result`` blocks (``tool_use_id``, ``content``, ``is_error`` when set)
  in a user message; consecutive same-role messages are merged (the API wants alternation)
  and within a user message ``tool_result`` blocks come first.

Stream mapping: ``message_start`` usage (``input_tokens``, ``cache_read_input_tokens`` →
``cache_read_tokens``, ``cache_creation_input_tokens`` → ``cache_write_tokens``);
``content_block_start`` text/thinking/tool_use open a block (a text block is announced only at
its first non-empty delta, so an empty text block yields nothing); other block types
(``redacted_thinking``, server tools, ``compaction``, ``fallback``, …) are ignored with their
deltas — ``messages.py`` has no slot for their opaque payloads; ``text_delta``,
``thinking_delta``, ``signature_delta``, ``input_json_delta`` (empty ``partial_json`` skipped);
``content_block_stop`` → block-end (a thinking block-end carries the complete
``ReasoningBlock`` with its signature); ``message_delta`` gives ``stop_reason`` and the final
``output_tokens``; ``message_stop`` ends the stream; ``ping`` and unknown events are ignored.

Finish mapping: ``end_turn``/``stop_sequence``/``pause_turn`` → ``Stop`` (``ToolCalls`` when
the message has tool calls); ``tool_use`` → ``ToolCalls``; ``max_tokens`` → ``MaxTokens``;
``refusal`` → an error finish with code ``BAD_REQUEST`` quoting the refusal's category and
explanation (a policy refusal is not retryable, and ending it as ``Stop`` would look like an
empty answer); ``model_context_window_exceeded`` → ``CONTEXT_WINDOW_EXCEEDED``; a ``Stop``
with no text and no tool calls → ``EMPTY_RESPONSE``. An ``event: error`` after HTTP 200 is an
error finish (``overloaded_error`` → ``OVERLOADED``, ``rate_limit_error`` → ``RATE_LIMIT``,
``api_error`` → ``SERVER``, …). A stream that ends before ``message_delta``/``message_stop`` is
``TRANSPORT`` (truncated); undecodable JSON is ``BAD_RESPONSE``. HTTP and transport failures:
see :mod:`agentloop_nb.llm._http`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._json import dumps_arguments
from ..messages import (
    AssistantMessage,
    ImageBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
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
from ._sse import SseAdapter, tool_definition
from ._stream_state import StreamState

if TYPE_CHECKING:
    import httpx

    from ._options import GenerateOptions

#: Thinking budgets for ``GenerateOptions.reasoning_effort``.
THINKING_BUDGETS = {"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384}
_MIN_THINKING_BUDGET = 1024


class AnthropicAdapter(SseAdapter):
    """Streams a Messages API response (see the module docstring); ``stream`` and ``aclose``
    keep the contract of :class:`SseAdapter`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        name: str = "anthropic",
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        base_url_env: str | None = "ANTHROPIC_BASE_URL",
        default_base_url: str = "https://api.anthropic.com",
        headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
        anthropic_version: str = "2023-06-01",
        default_max_tokens: int = 4096,
        default_reasoning_effort: str | None = None,
        require_key: bool = True,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            name=name,
            base_url=base_url,
            api_key=api_key,
            api_key_env=api_key_env,
            base_url_env=base_url_env,
            default_base_url=default_base_url,
            headers=headers,
            timeout=timeout,
            require_key=require_key,
            client=client,
        )
        self.anthropic_version = anthropic_version
        self.default_max_tokens = default_max_tokens
        self.default_reasoning_effort = default_reasoning_effort

    def defaults(self, config: Any) -> dict[str, Any]:
        """The request-config fields this adapter fills when ``config`` leaves them unset:
        ``reasoning_effort`` (when ``default_reasoning_effort`` is configured) and
        ``max_tokens`` — the API requires one: ``default_max_tokens``, plus the thinking budget
        when a reasoning effort applies (what :meth:`build_body` sends for an unset value)."""
        out: dict[str, Any] = {}
        effort = getattr(config, "reasoning_effort", None)
        if effort is None and self.default_reasoning_effort is not None:
            effort = out["reasoning_effort"] = self.default_reasoning_effort
        if getattr(config, "max_tokens", None) is None:
            budget = _thinking_budget(effort)
            out["max_tokens"] = self.default_max_tokens + (budget or 0)
        return out

    @property
    def messages_url(self) -> str:
        """The endpoint: the host root (``base_url``) plus ``/v1/messages`` (``/messages``
        when it already ends in ``/v1``)."""
        base = self.base_url
        return base + ("/messages" if base.endswith("/v1") else "/v1/messages")

    def build_body(self, options: GenerateOptions) -> dict[str, Any]:
        """The JSON body sent for ``options`` (see the module docstring)."""
        max_tokens = (
            options.max_tokens if options.max_tokens is not None else self.default_max_tokens
        )
        body: dict[str, Any] = {
            "model": options.model,
            "max_tokens": max_tokens,
            "messages": to_anthropic_messages(options.messages),
            "stream": True,
        }
        if options.system:
            body["system"] = options.system
        if options.tools:
            body["tools"] = [to_anthropic_tool(t) for t in options.tools]
        if options.stop:
            body["stop_sequences"] = list(options.stop)
        budget = _thinking_budget(options.reasoning_effort)
        if budget is not None:
            if options.max_tokens is None:
                body["max_tokens"] = max(max_tokens, budget + self.default_max_tokens)
            elif max_tokens <= _MIN_THINKING_BUDGET:
                budget = None
            elif max_tokens <= budget:
                budget = max_tokens - 1
        if budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        elif options.temperature is not None:
            body["temperature"] = options.temperature
        return body

    def _endpoint(self) -> str:
        return self.messages_url

    def _fixed_headers(self) -> dict[str, str]:
        return {"anthropic-version": self.anthropic_version}

    def _auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def _parser(self) -> AnthropicStreamParser:
        return AnthropicStreamParser(self.name)


def _thinking_budget(effort: str | None) -> int | None:
    if effort is None or effort.lower() in ("none", "off", "disabled"):
        return None
    return THINKING_BUDGETS.get(effort.lower(), THINKING_BUDGETS["medium"])


# -- request mapping -------------------------------------------------------------------------


def to_anthropic_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A ``{"name", "description", "parameters"}`` definition as an Anthropic tool."""
    return tool_definition(tool, "input_schema")


def tool_input(arguments: str) -> dict[str, Any]:
    """The ``tool_use.input`` object for raw JSON arguments; ``{}`` unless a JSON object."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _anthropic_block(b: TextBlock | ImageBlock) -> dict[str, Any]:
    if isinstance(b, ImageBlock):
        source = {"type": "base64", "media_type": b.media_type, "data": b.data}
        return {"type": "image", "source": source}
    return {"type": "text", "text": b.text}


def to_anthropic_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The ``messages`` array for a request (see the module docstring)."""
    out: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if isinstance(m, UserMessage):
            user: list[dict[str, Any]] = []
            for b in m.content:
                if isinstance(b, TextBlock) and b.text:
                    user.append({"type": "text", "text": b.text})
                elif isinstance(b, ImageBlock):
                    source = {"type": "base64", "media_type": b.media_type, "data": b.data}
                    user.append({"type": "image", "source": source})
            push("user", user)
        elif isinstance(m, AssistantMessage):
            assistant: list[dict[str, Any]] = []
            for b in m.content:
                if isinstance(b, ReasoningBlock) and b.signature:
                    assistant.append(
                        {"type": "thinking", "thinking": b.text, "signature": b.signature}
                    )
                elif isinstance(b, TextBlock) and b.text:
                    assistant.append({"type": "text", "text": b.text})
                elif isinstance(b, ToolCallBlock):
                    assistant.append(
                        {
                            "type": "tool_use",
                            "id": b.id,
                            "name": b.name,
                            "input": tool_input(b.arguments),
                        }
                    )
            push("assistant", assistant)
        elif isinstance(m, ToolResultMessage):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.call_id}
            if m.images and not isinstance(m.content, str):
                # tool_result content takes text and image blocks (empty text is refused)
                blocks = [b for b in m.content if not isinstance(b, TextBlock) or b.text]
                result["content"] = [_anthropic_block(b) for b in blocks]
            elif m.text:
                result["content"] = m.text
            if m.is_error:
                result["is_error"] = True
            push("user", [result])
    for msg in out:
        if msg["role"] == "user" and len(msg["content"]) > 1:
            # The API wants tool results right at the start of the user turn that follows the
            # tool calls; a stable sort keeps everything else in order.
            msg["content"].sort(key=lambda block: block["type"] != "tool_result")
    return out


# -- stream mapping --------------------------------------------------------------------------


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


__all__ = [
    "THINKING_BUDGETS",
    "AnthropicAdapter",
    "AnthropicStreamParser",
    "to_anthropic_messages",
    "to_anthropic_tool",
    "tool_input",
]
