"""``OpenAIAdapter``: any OpenAI-compatible Chat Completions endpoint, streaming (OpenAI,
DeepSeek, vLLM, llama.cpp, Ollama, OpenRouter, ...).

Configuration: ``base_url`` (including the ``/v1`` prefix) and ``api_key`` given explicitly win;
otherwise they are read from ``base_url_env`` / ``api_key_env`` *at request time*, so an adapter
can be built before the key exists. A missing key (when ``require_key``) ends the stream with an
``AUTH`` error naming the variable to set. The key is sent as ``Authorization: Bearer`` and
never appears in a repr, an error message or a yielded chunk.

Request mapping (``GenerateOptions`` → JSON body):

- ``system`` → a leading ``{"role": "system"}`` message;
- user text/images → ``content`` (a plain string when text only, else text + ``image_url``
  data-URL parts);
- assistant text → ``content``; tool calls → ``tool_calls`` (``type: function``, arguments the
  raw JSON string, ``""`` sent as ``"{}"``); an assistant message with neither is skipped;
- reasoning blocks are never sent back (DeepSeek rejects ``reasoning_content`` in input and
  OpenAI has no field for it);
- tool results → ``{"role": "tool", "tool_call_id", "content"}`` (``is_error`` has no wire
  field; the content already says what failed);
- ``tools`` → ``{"type": "function", "function": {name, description, parameters}}``;
  ``max_tokens``, ``temperature``, ``stop``, ``reasoning_effort`` when set; always
  ``stream: true`` and ``stream_options: {"include_usage": true}``.

Stream mapping: ``delta.content`` (and ``delta.refusal``, so a refusal is shown as the answer
text) → a text block; ``delta.reasoning_content`` (DeepSeek) or ``delta.reasoning`` (vLLM,
OpenRouter) → a reasoning block; ``delta.tool_calls`` → one tool-call block per ``index``
(``id``/``name`` are taken once even when the server repeats them in every delta; only
``arguments`` accumulate). Only choice 0 is read. Text and reasoning blocks end when another
block starts; tool-call blocks stay open until the finish, because parallel calls may
interleave by index. The usage chunk maps ``prompt_tokens`` → ``input_tokens`` (OpenAI counts
cached tokens in it), ``completion_tokens`` → ``output_tokens``,
``prompt_tokens_details.cached_tokens`` (DeepSeek: ``prompt_cache_hit_tokens``) →
``cache_read_tokens``, ``completion_tokens_details.reasoning_tokens`` → ``reasoning_tokens``.

Finish mapping: ``stop`` → ``Stop`` (but ``ToolCalls`` when the stream carried tool calls: some
servers, e.g. Ollama, say ``stop`` there); ``tool_calls``/``function_call`` → ``ToolCalls``;
``length`` → ``MaxTokens``; ``content_filter`` → an error finish with code ``BAD_REQUEST``
(the provider blocked the output: retrying the same request will not help, and the turn must
not end looking like a normal answer). A ``Stop`` with no text and no tool calls (reasoning
alone does not count) becomes ``EMPTY_RESPONSE``. ``data: [DONE]`` ends the stream; a stream
that ends before any ``finish_reason`` and without ``[DONE]`` is ``TRANSPORT`` (truncated); a
``{"error": {...}}`` chunk is an error finish (code from its type/code, default ``SERVER``);
undecodable JSON is ``BAD_RESPONSE`` quoting the bad data. HTTP and transport failures: see
:mod:`agentloop_nb.llm._http`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

import httpx

from ..messages import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from ._chunks import (
    BlockEnd,
    BlockStart,
    BlockType,
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
from ._http import (
    HttpClientOwner,
    header_secrets,
    key_hint,
    missing_key_message,
    resolve_env,
    safe_url,
    stream_error,
    transport_error,
    truncate,
)
from ._sse import StreamFailure, stream_sse


class OpenAIAdapter(HttpClientOwner):
    """Streams Chat Completions from an OpenAI-compatible endpoint (see the module docstring).

    ``stream(options)`` never raises for provider problems and ends with exactly one
    ``Finish``; aborting ``options.signal`` closes the HTTP stream at once and yields
    ``Finish(Aborted())``. ``aclose()`` closes the adapter's own HTTP client (not an injected
    ``client``).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        name: str = "openai",
        api_key_env: str | None = "OPENAI_API_KEY",
        base_url_env: str | None = "OPENAI_BASE_URL",
        default_base_url: str = "https://api.openai.com/v1",
        headers: Mapping[str, str] | None = None,
        timeout: float | httpx.Timeout | None = None,
        require_key: bool = True,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.name = name
        self._base_url = base_url
        self._api_key = api_key
        self.api_key_env = api_key_env
        self.base_url_env = base_url_env
        self.default_base_url = default_base_url
        self._headers = dict(headers or {})
        self.require_key = require_key
        self._init_client(client, timeout)

    # -- configuration --------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The effective base URL right now (explicit, else environment, else default)."""
        return (resolve_env(self._base_url, self.base_url_env) or self.default_base_url).rstrip("/")

    def _key(self) -> str | None:
        return resolve_env(self._api_key, self.api_key_env)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, base_url={safe_url(self.base_url)!r}, "
            f"api_key={key_hint(self._key())!r}, api_key_env={self.api_key_env!r})"
        )

    # -- request --------------------------------------------------------------------------------

    def build_body(self, options: GenerateOptions) -> dict[str, Any]:
        """The JSON body sent for ``options`` (see the module docstring)."""
        body: dict[str, Any] = {
            "model": options.model,
            "messages": to_openai_messages(options.system, options.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if options.tools:
            body["tools"] = [to_openai_tool(t) for t in options.tools]
        if options.max_tokens is not None:
            body["max_tokens"] = options.max_tokens
        if options.temperature is not None:
            body["temperature"] = options.temperature
        if options.stop:
            body["stop"] = list(options.stop)
        if options.reasoning_effort is not None:
            body["reasoning_effort"] = options.reasoning_effort
        return body

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        """Stream one completion (see the class docstring for the failure contract)."""
        key = self._key()
        if key is None and self.require_key:
            yield Finish(
                reason=ErrorFinish(
                    code="AUTH", message=missing_key_message(self.name, self.api_key_env)
                )
            )
            return
        secrets = [key, *header_secrets(self._headers)]
        headers = {"content-type": "application/json", **self._headers}
        if key is not None:
            headers["authorization"] = f"Bearer {key}"
        url = self.base_url + "/chat/completions"
        client = self._http()
        try:
            request = client.build_request(
                "POST",
                url,
                headers=headers,
                content=json.dumps(self.build_body(options)).encode(),
                **self._timeout_kwargs(),
            )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            yield Finish(reason=transport_error(exc, provider=self.name, url=url, secrets=secrets))
            return
        chunks = stream_sse(
            client=client,
            request=request,
            parser=OpenAIStreamParser(self.name),
            signal=options.signal,
            provider=self.name,
            model=options.model,
            secrets=secrets,
            key_env=self.api_key_env,
        )
        async with aclosing(chunks):
            async for chunk in chunks:
                yield chunk


# -- request mapping -------------------------------------------------------------------------


def to_openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A ``{"name", "description", "parameters"}`` definition as an OpenAI function tool."""
    fn: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description"):
        fn["description"] = tool["description"]
    fn["parameters"] = tool.get("parameters") or {"type": "object", "properties": {}}
    return {"type": "function", "function": fn}


def _user_content(blocks: Sequence[ContentBlock]) -> str | list[dict[str, Any]]:
    if all(isinstance(b, TextBlock) for b in blocks):
        return "".join(b.text for b in blocks if isinstance(b, TextBlock))
    parts: list[dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            url = f"data:{b.media_type};base64,{b.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def to_openai_messages(system: str | None, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The ``messages`` array for a request (see the module docstring)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for m in messages:
        if isinstance(m, UserMessage):
            out.append({"role": "user", "content": _user_content(m.content)})
        elif isinstance(m, AssistantMessage):
            text = "".join(b.text for b in m.content if isinstance(b, TextBlock))
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": b.arguments or "{}"},
                }
                for b in m.content
                if isinstance(b, ToolCallBlock)
            ]
            if not text and not calls:
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif isinstance(m, ToolResultMessage):
            out.append({"role": "tool", "tool_call_id": m.call_id, "content": m.content})
    return out


# -- stream mapping --------------------------------------------------------------------------


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


class OpenAIStreamParser:
    """Maps Chat Completions chunks to ``StreamChunk`` s (an ``EventParser`` for
    :func:`._sse.stream_sse`; see the module docstring)."""

    def __init__(self, provider: str = "openai") -> None:
        self.provider = provider
        self.done = False
        self._next_block = 0
        self._text: int | None = None
        self._reasoning: int | None = None
        self._calls: dict[int, _Call] = {}
        self._open_calls: list[int] = []
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._has_text = False
        self._events = 0

    def _start(self, out: list[StreamChunk], block_type: BlockType) -> int:
        index = self._next_block
        self._next_block += 1
        out.append(BlockStart(index=index, block_type=block_type))
        return index

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
        try:
            obj = json.loads(data)
        except ValueError:
            raise StreamFailure(
                ErrorFinish(
                    code="BAD_RESPONSE",
                    message=f"{self.provider}: malformed JSON in the event stream: {truncate(data, 200)!r}",
                )
            ) from None
        if not isinstance(obj, dict):
            raise StreamFailure(
                ErrorFinish(
                    code="BAD_RESPONSE",
                    message=f"{self.provider}: unexpected event data (not an object): {truncate(data, 200)!r}",
                )
            )
        if obj.get("error") or event == "error":
            raise StreamFailure(
                stream_error(provider=self.provider, payload=obj, secrets=(), default="SERVER")
            )
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
                self._finish_reason = str(reason)
        return out

    def _delta(self, delta: dict[str, Any], out: list[StreamChunk]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            if self._reasoning is None:
                self._end_text_and_reasoning(out)
                self._reasoning = self._start(out, "reasoning")
            out.append(ReasoningDelta(index=self._reasoning, text=reasoning))
        for key in ("content", "refusal"):
            text = delta.get(key)
            if isinstance(text, str) and text:
                if self._text is None:
                    self._end_text_and_reasoning(out)
                    self._text = self._start(out, "text")
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
            block = self._start(out, "tool-call")
            state = _Call(block, str(call_id) if call_id else f"call_{self._events}_{key}")
            self._calls[key] = state
            self._open_calls.append(key)
        fn = call.get("function") or {}
        name = fn.get("name") if isinstance(fn, dict) else None
        args: Any = fn.get("arguments") if isinstance(fn, dict) else None
        if args is not None and not isinstance(args, str):
            args = json.dumps(args)  # some servers send the arguments object itself
        send_name = name if (name and not state.named) else None
        if send_name:
            state.named = True
        if send_name or args:
            out.append(
                ToolCallDelta(
                    index=state.block, id=state.id, name=send_name, arguments_delta=args or ""
                )
            )

    def _finish(self) -> list[StreamChunk]:
        self.done = True
        out: list[StreamChunk] = []
        self._end_text_and_reasoning(out)
        for key in self._open_calls:
            out.append(BlockEnd(index=self._calls[key].block))
        self._open_calls.clear()
        if self._usage is not None:
            out.append(UsageChunk(usage=self._usage))
        out.append(Finish(reason=self._finish_kind()))
        return out

    def _finish_kind(self) -> FinishReason:
        reason = self._finish_reason
        if reason == "length":
            return MaxTokens()
        if reason == "content_filter":
            return ErrorFinish(
                code="BAD_REQUEST",
                message=f"{self.provider}: the provider's content filter blocked the response "
                "(finish_reason 'content_filter'); rephrase the request",
            )
        if self._calls:
            return ToolCalls()
        if not self._has_text:
            return ErrorFinish(
                code="EMPTY_RESPONSE",
                message=f"{self.provider}: the model returned no text and no tool calls "
                f"(finish_reason {reason!r})",
            )
        return Stop()

    def eof(self) -> list[StreamChunk]:
        if self._finish_reason is not None:
            # The answer is complete; only the ``[DONE]`` terminator is missing.
            return self._finish()
        self.done = True
        return [
            Finish(
                reason=ErrorFinish(
                    code="TRANSPORT",
                    message=f"{self.provider}: the stream was truncated: it ended after "
                    f"{self._events} events without a finish_reason or [DONE]",
                )
            )
        ]


__all__ = [
    "OpenAIAdapter",
    "OpenAIStreamParser",
    "to_openai_messages",
    "to_openai_tool",
    "usage_from_openai",
]
