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
  ``stream: true`` and ``stream_options: {"include_usage": true}``. ``defaults(config)``
  offers the optional ``default_max_tokens`` / ``default_reasoning_effort`` to
  ``ctx.llm.prepare_call`` (neither is set unless configured, except that a server on a
  loopback address gets ``max_tokens``: a quarter of the context window it reports, at most
  4,096, or ``LOCAL_DEFAULT_MAX_TOKENS`` = 1024 when it reports none; see
  :mod:`agentloop_nb.llm._window`). ``context_window(model)`` is the entry's
  ``context_window``, else that report (``None`` for a remote endpoint, which is never
  asked).

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

from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidValueError
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
from ._sse import SseAdapter, tool_definition
from ._window import WindowProbe, cap_for_window

if TYPE_CHECKING:
    import httpx

    from ._openai_stream import OpenAIStreamParser, usage_from_openai
    from ._options import GenerateOptions

#: The output cap a server on this machine gets when neither the agent (``max_tokens``) nor the
#: provider entry (``default_max_tokens``) sets one and the server reports no context window.
LOCAL_DEFAULT_MAX_TOKENS = 1024


class OpenAIAdapter(SseAdapter):
    """Streams Chat Completions from an OpenAI-compatible endpoint (see the module docstring);
    ``stream`` and ``aclose`` keep the contract of :class:`SseAdapter`."""

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
        default_max_tokens: int | None = None,
        default_reasoning_effort: str | None = None,
        context_window: int | None = None,
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
        self.default_max_tokens = default_max_tokens
        self.default_reasoning_effort = default_reasoning_effort
        if context_window is not None and (
            isinstance(context_window, bool)
            or not isinstance(context_window, int)
            or context_window <= 0
        ):
            raise InvalidValueError(
                f"provider {name!r}: context_window must be a positive number of tokens "
                f"(e.g. 4096, what llama-server -c was given), got {context_window!r}"
            )
        self.context_window_override = context_window
        self._windows = WindowProbe()

    def defaults(self, config: Any) -> dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]:
        """The configured ``default_max_tokens`` / ``default_reasoning_effort`` for the fields
        ``config`` leaves unset. Unconfigured, a remote endpoint gets neither (Chat Completions
        requires neither); a server on this machine (``is_local``) gets a ``max_tokens`` cap,
        so a small local model's answer cannot run on until its context is full (llama.cpp
        generates until it is, without a cap): :func:`cap_for_window` of the window it reports
        (:meth:`context_window`), else :data:`LOCAL_DEFAULT_MAX_TOKENS`. The first request to
        such a server that needs the cap asks it (a coroutine is returned then: the runtime
        awaits it); later ones reuse the answer."""
        out: dict[str, Any] = {}
        effort = self.default_reasoning_effort
        if effort is not None and getattr(config, "reasoning_effort", None) is None:
            out["reasoning_effort"] = effort
        if getattr(config, "max_tokens", None) is not None:
            return out
        cap = self.default_max_tokens
        if cap is None and self.is_local:
            model = str(getattr(config, "model", "") or "")
            asked, window = self._windows.known(self.base_url, model)
            if self.context_window_override is not None:
                asked, window = True, self.context_window_override
            if not asked:
                return self._capped(out, model)
            cap = LOCAL_DEFAULT_MAX_TOKENS if window is None else cap_for_window(window)
        if cap is not None:
            out["max_tokens"] = cap
        return out

    async def _capped(self, out: dict[str, Any], model: str) -> dict[str, Any]:
        window = await self.context_window(model)
        out["max_tokens"] = LOCAL_DEFAULT_MAX_TOKENS if window is None else cap_for_window(window)
        return out

    async def context_window(self, model: str) -> int | None:
        """The context window (tokens) of ``model`` on this endpoint: the entry's
        ``context_window`` when given (nothing is asked then), else what the server reports,
        asked once, lazily, and only when the server is on this machine (``None`` for a remote
        endpoint, a server that does not say, or one that cannot be asked right now). Never
        raises for a server problem."""
        if self.context_window_override is not None:
            return self.context_window_override
        if not self.is_local:
            return None
        headers = dict(self._fixed_headers())
        headers.update(self._headers)
        key = self._key()
        if key is not None:
            headers.update(self._auth_headers(key))
        return await self._windows.window(self._http(), self.base_url, model, headers)

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

    def _endpoint(self) -> str:
        return self.base_url + "/chat/completions"

    def _auth_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def _parser(self) -> OpenAIStreamParser:
        # the stream mapping (with the chunk models) loads with the first stream, not when
        # ``App()`` builds this adapter
        from ._openai_stream import OpenAIStreamParser

        return OpenAIStreamParser(self.name)


# -- request mapping -------------------------------------------------------------------------


def to_openai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A ``{"name", "description", "parameters"}`` definition as an OpenAI function tool."""
    return {"type": "function", "function": tool_definition(tool, "parameters")}


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
    pending_images: list[ToolResultMessage] = []
    for i, m in enumerate(messages):
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
            out.append({"role": "tool", "tool_call_id": m.call_id, "content": m.text})
            if m.images:
                pending_images.append(m)
        if pending_images and not _next_is_tool(messages, i):
            out.append(_images_turn(pending_images))
            pending_images = []
    return out


def _next_is_tool(messages: Sequence[Message], i: int) -> bool:
    return i + 1 < len(messages) and isinstance(messages[i + 1], ToolResultMessage)


def _images_turn(results: Sequence[ToolResultMessage]) -> dict[str, Any]:
    """Tool messages take text only: their images follow in one user turn, after the last
    tool message of the step (the API wants every tool message right after its call)."""
    parts: list[dict[str, Any]] = []
    for r in results:
        parts.append({"type": "text", "text": f"Images returned by tool call {r.call_id}:"})
        parts.extend(
            {"type": "image_url", "image_url": {"url": f"data:{b.media_type};base64,{b.data}"}}
            for b in r.images
        )
    return {"role": "user", "content": parts}


__all__ = [
    "OpenAIAdapter",
    "OpenAIStreamParser",
    "to_openai_messages",
    "to_openai_tool",
    "usage_from_openai",
]


def __getattr__(name: str) -> Any:
    # The stream mapping is its own module (``_openai_stream``), loaded with the first stream.
    if name in ("OpenAIStreamParser", "usage_from_openai"):
        from . import _openai_stream

        return getattr(_openai_stream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
