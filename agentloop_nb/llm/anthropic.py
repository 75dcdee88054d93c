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
from ._sse import SseAdapter, tool_definition

if TYPE_CHECKING:
    import httpx

    from ._anthropic_stream import AnthropicStreamParser
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
        # the stream mapping (with the chunk models) loads with the first stream, not when
        # ``App()`` builds this adapter
        from ._anthropic_stream import AnthropicStreamParser

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


__all__ = [
    "THINKING_BUDGETS",
    "AnthropicAdapter",
    "AnthropicStreamParser",
    "to_anthropic_messages",
    "to_anthropic_tool",
    "tool_input",
]


def __getattr__(name: str) -> Any:
    # The stream mapping is its own module (``_anthropic_stream``), loaded with the first stream.
    if name in ("AnthropicStreamParser",):
        from . import _anthropic_stream

        return getattr(_anthropic_stream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
