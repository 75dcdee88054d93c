"""Shared HTTP plumbing for the provider adapters: API-key resolution and redaction, and the
mapping from HTTP statuses, provider error bodies and transport exceptions to
:class:`~agentloop_nb.llm._chunks.ErrorFinish` codes.

Nothing here raises for a provider problem: every failure becomes an ``ErrorFinish`` whose
message names what went wrong and how to fix it, carries the provider's own message (truncated)
and never contains an API key (every message goes through :func:`redact`).

Status mapping (both providers):

===========================  ==============================================================
401, 403                     ``AUTH``
400, 413, 422                ``BAD_REQUEST``, or ``CONTEXT_WINDOW_EXCEEDED`` when the
                             provider's message says the prompt is too long (the wordings of
                             OpenAI, Anthropic, DeepSeek, vLLM, Ollama and llama.cpp)
404                          ``BAD_REQUEST`` (model or endpoint not found)
408                          ``TIMEOUT``
429                          ``RATE_LIMIT`` with ``retry_after`` from ``retry-after-ms`` or
                             ``Retry-After`` (seconds or an HTTP date)
529, or ``overloaded_error``  ``OVERLOADED``
500, 502, 503, 504 (5xx)     ``SERVER`` (``CONTEXT_WINDOW_EXCEEDED`` for an overflow message:
                             Ollama reports it with 500)
other 4xx                    ``BAD_REQUEST``
===========================  ==============================================================

Transport: connect/read/write errors and dropped connections → ``TRANSPORT``; an idle read
beyond the read timeout (or a connect/pool timeout) → ``TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from importlib.util import LazyLoader, find_spec, module_from_spec
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit


def _lazy_module(name: str) -> ModuleType:
    """``name`` as imported, or a module that imports itself at its first attribute access
    (the standard library's ``LazyLoader`` recipe). The App builds its HTTP adapters at start,
    but ``httpx`` (about 9 MiB and 20 ms with its CLI's dependencies) is needed only by the
    first request to a provider: ``%load_ext`` and offline-only sessions never pay for it."""
    if name in sys.modules:
        return sys.modules[name]
    spec = find_spec(name)
    if spec is None or spec.loader is None:  # not installed: fail where it is used, clearly
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    spec.loader = LazyLoader(spec.loader)
    module = module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import httpx

    from ._chunks import ErrorFinish
else:
    httpx = _lazy_module("httpx")

#: Longest provider text (error body, bad SSE data) quoted in an error message.
MAX_QUOTE = 300

REDACTED = "…redacted"

# How each server words "the prompt does not fit the context window" (lower-cased, matched
# anywhere in the error's type, code or message):
# - OpenAI / DeepSeek / vLLM: code ``context_length_exceeded``, "This model's maximum context
#   length is N tokens. However, you requested M tokens ... Please reduce the length of the
#   messages"; vLLM also "The decoder prompt (length M) is longer than the maximum model length";
#   newer OpenAI models: "Input tokens exceed the configured limit of N tokens";
# - Anthropic: "prompt is too long: M tokens > N maximum";
# - Ollama: "prompt too long; exceeded max context length by N tokens", "the input length
#   exceeds the context length";
# - llama.cpp's llama-server: type ``exceed_context_size_error``, "request (M tokens) exceeds
#   the available context size (N tokens), try increasing it".
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "model_context_window_exceeded",
    "exceed_context_size",
    "maximum context length",
    "max context length",
    "context length",
    "context window",
    "context size",
    "maximum model length",
    "prompt is too long",
    "prompt too long",
    "input is too long",
    "too many tokens",
    "input tokens exceed",
    "reduce the length of the messages",
)

# Anthropic (and some proxies) name the failure in ``error.type``; used for in-stream errors
# and for bodies whose status alone is ambiguous.
_ERROR_TYPE_CODES = {
    "overloaded_error": "OVERLOADED",
    "rate_limit_error": "RATE_LIMIT",
    "rate_limit_exceeded": "RATE_LIMIT",
    "api_error": "SERVER",
    "server_error": "SERVER",
    "internal_server_error": "SERVER",
    "service_unavailable": "SERVER",
    "authentication_error": "AUTH",
    "permission_error": "AUTH",
    "invalid_api_key": "AUTH",
    "billing_error": "AUTH",
    "invalid_request_error": "BAD_REQUEST",
    "not_found_error": "BAD_REQUEST",
    "request_too_large": "BAD_REQUEST",
    "timeout_error": "TIMEOUT",
    "context_length_exceeded": "CONTEXT_WINDOW_EXCEEDED",
    "exceed_context_size_error": "CONTEXT_WINDOW_EXCEEDED",
    "unavailable_error": "SERVER",
}


# -- secrets ------------------------------------------------------------------------------------


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Return ``text`` with every occurrence of each non-empty secret replaced by ``…redacted``.

    Matching ignores case (a server may echo a key upper-cased). A secret cut short by
    :func:`truncate` (its beginning right before the cut marker) is redacted too. Secrets
    shorter than 4 characters are ignored (redacting them would mangle ordinary text and they
    are not real keys). Never raises.
    """
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = re.sub(re.escape(secret), REDACTED, text, flags=re.IGNORECASE)
        if _CUT in text:
            text = _redact_cut(text, secret)
    return text


def _redact_cut(text: str, secret: str) -> str:
    for size in range(len(secret) - 1, 3, -1):
        head = re.escape(secret[:size]) + re.escape(_CUT)
        text = re.sub(head, REDACTED + _CUT, text, flags=re.IGNORECASE)
    return text


def url_secrets(url: str | httpx.URL | None) -> list[str]:
    """The credentials in a URL's user-info (``https://user:secret@host``), raw,
    percent-decoded and as the ``Basic`` token httpx sends for them, to redact like the key."""
    if url is None:
        return []
    try:
        parsed = httpx.URL(str(url))
    except Exception:
        return []
    raw = parsed.userinfo.decode("ascii", errors="replace")
    if not raw:
        return []
    out = [raw, *raw.split(":", 1)]
    out += [unquote(part) for part in out]
    out.append(base64.b64encode(unquote(raw).encode()).decode())
    return out


_KEY_PREFIX = re.compile(r"^(sk-(?:ant-|proj-)?)")


def key_hint(key: str | None) -> str | None:
    """What a repr may show for an API key: ``None`` when unset, ``'sk-…redacted'`` for keys
    with a well-known public prefix, ``'<set>'`` otherwise. Never any secret character."""
    if not key:
        return None
    match = _KEY_PREFIX.match(key)
    return match.group(1) + REDACTED if match and len(key) > 12 else "<set>"


def resolve_env(explicit: str | None, env_name: str | None) -> str | None:
    """``explicit`` when given (explicit configuration wins), else the environment variable's
    value at call time (empty counts as unset)."""
    if explicit:
        return explicit
    if env_name:
        return os.environ.get(env_name) or None
    return None


def missing_key_message(provider: str, env_name: str | None) -> str:
    """The AUTH message for a provider that needs a key and has none."""
    where = f"set {env_name} or " if env_name else ""
    return (
        f"no API key for provider {provider!r}: {where}pass "
        f"providers={{{provider!r}: {{'api_key': ...}}}}"
    )


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is this machine: ``localhost`` (and ``*.localhost``), an address
    in 127.0.0.0/8 or ``::1``. ``False`` for anything unparseable."""
    # urllib, not httpx: the App asks this of every provider when it starts.
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    if not host:
        return False
    import ipaddress  # here: the App asks this with no URL for most presets (start-up cost)

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def safe_url(url: str | httpx.URL) -> str:
    """``url`` without user-info and query (either may hold credentials), for messages."""
    try:
        parsed = httpx.URL(str(url))
        return str(parsed.copy_with(userinfo=b"", query=None, fragment=None))
    except Exception:
        return "<invalid URL>"


# -- quoting ------------------------------------------------------------------------------------


_CUT = "… ["  # how a cut starts; ``redact`` recognises a secret cut short by it


def truncate(text: str, limit: int = MAX_QUOTE) -> str:
    """``text`` cut to ``limit`` characters, marking the cut. Redact *before* truncating: a
    secret cut in half is harder to recognise."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f"{_CUT}{len(text) - limit} more chars]"


# -- retry-after --------------------------------------------------------------------------------


def parse_retry_after(headers: Mapping[str, str] | httpx.Headers) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms`` (milliseconds, preferred: more
    precise), else ``Retry-After`` as seconds or as an HTTP date. ``None`` when absent or
    unparseable; never negative."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime  # a date form is rare (start-up cost)

    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


# -- provider error bodies ----------------------------------------------------------------------


def error_details(body: Any) -> tuple[str | None, str | None, str | None]:
    """``(message, type, code)`` from a provider error body, in any of the common shapes:
    ``{"error": {"message", "type", "code"}}`` (OpenAI, Anthropic), ``{"error": "text"}``,
    ``{"message": ...}``, ``{"detail": ...}``."""
    if not isinstance(body, Mapping):
        return None, None, None
    err: Any = body.get("error", body)
    if isinstance(err, str):
        return err, None, None
    if not isinstance(err, Mapping):
        return None, None, None
    message = err.get("message") or err.get("detail") or body.get("message") or body.get("detail")
    etype = err.get("type")
    code = err.get("code")
    return (
        str(message) if message is not None else None,
        str(etype) if etype is not None else None,
        str(code) if code is not None else None,
    )


def _is_context_overflow(*texts: str | None) -> bool:
    joined = " ".join(t for t in texts if t).lower()
    return any(marker in joined for marker in _CONTEXT_MARKERS)


def classify_error_type(etype: str | None, code: str | None, message: str | None) -> str:
    """The code for an error named only by its body (in-stream errors): ``type``/``code`` per
    ``_ERROR_TYPE_CODES``, with context-overflow phrases winning over ``BAD_REQUEST``."""
    if _is_context_overflow(etype, code, message):
        return "CONTEXT_WINDOW_EXCEEDED"
    for name in (code, etype):
        if name and name.lower() in _ERROR_TYPE_CODES:
            return _ERROR_TYPE_CODES[name.lower()]
    return "UNKNOWN"


def status_code_for(status: int, etype: str | None, code: str | None, message: str | None) -> str:
    """The error code for an HTTP error status (see the module docstring's table)."""
    if status == 529 or (etype or "").lower() == "overloaded_error":
        return "OVERLOADED"
    if status in (401, 403):
        return "AUTH"
    if status == 429:
        return "RATE_LIMIT"
    if status == 408:
        return "TIMEOUT"
    # Ollama reports an overflow with 500; retrying the same prompt cannot help there either.
    if (status in (400, 413, 422) or status >= 500) and _is_context_overflow(etype, code, message):
        return "CONTEXT_WINDOW_EXCEEDED"
    if 400 <= status < 500:
        return "BAD_REQUEST"
    if status >= 500:
        return "SERVER"
    return "UNKNOWN"


def _error_label(head: str, status: int | None, etype: str | None, code: str | None) -> str:
    """``head`` plus the provider's own name for the error in parentheses: its ``code``, or its
    ``type`` when the code only repeats the HTTP status (llama.cpp, vLLM send ``code: 400``)."""
    name = code if code and code != str(status) else etype
    return f"{head} ({name})" if name else head


_STATUS_HINTS = {
    "AUTH": "check the API key{env}",
    "RATE_LIMIT": "rate limited; wait and retry",
    "OVERLOADED": "the provider is overloaded; retry later",
    "SERVER": "provider server error; retry later",
    "CONTEXT_WINDOW_EXCEEDED": "the conversation no longer fits the model's context window; "
    "shorten it or compact it",
}


def http_error(
    *,
    provider: str,
    status: int,
    body: bytes,
    headers: httpx.Headers,
    url: str | httpx.URL,
    model: str,
    secrets: Iterable[str | None],
    key_env: str | None = None,
) -> ErrorFinish:
    """The :class:`ErrorFinish` for an HTTP error response (status ≥ 400, or a 2xx that is not
    an event stream). The message quotes the provider's own message, redacted then truncated;
    credentials in ``url``'s user-info count as secrets."""
    from ._chunks import ErrorFinish  # not at import: see ``_chunks``

    secrets = (*secrets, *url_secrets(url))
    text = body.decode("utf-8", errors="replace")
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = None
    message, etype, code = error_details(parsed)
    provider_text = message if message is not None else text
    err_code = status_code_for(status, etype, code, provider_text)
    parts = [_error_label(f"{provider} HTTP {status}", status, etype, code)]
    if status == 404:
        parts.append(
            f"model {model!r} or endpoint {safe_url(url)} not found; check the model name and base_url"
        )
    elif err_code in _STATUS_HINTS:
        parts.append(_STATUS_HINTS[err_code].format(env=f" ({key_env})" if key_env else ""))
    if provider_text.strip():
        parts.append(truncate(redact(provider_text, secrets)))
    retry_after = parse_retry_after(headers)
    return ErrorFinish(
        code=err_code,
        message=redact(": ".join(parts), secrets),
        status=status,
        retry_after=retry_after,
    )


def _status_of(payload: Any) -> int | None:
    """The numeric ``error.code`` of an in-stream error body (llama.cpp sends the status it
    would have used), else ``None``."""
    err = payload.get("error") if isinstance(payload, Mapping) else None
    code = err.get("code") if isinstance(err, Mapping) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def stream_error(
    *, provider: str, payload: Any, secrets: Iterable[str | None], default: str = "UNKNOWN"
) -> ErrorFinish:
    """The :class:`ErrorFinish` for an error reported inside a 200 event stream (Anthropic's
    ``event: error``, an OpenAI-compatible ``{"error": {...}}`` chunk), redacted then
    truncated."""
    from ._chunks import ErrorFinish  # not at import: see ``_chunks``

    secrets = tuple(secrets)
    message, etype, code = error_details(payload)
    err_code = classify_error_type(etype, code, message)
    if err_code == "UNKNOWN":
        err_code = default
    status = _status_of(payload)
    label = _error_label(f"{provider} stream error", status, etype, code)
    # text for people (not an encoding): anything str() can show, not only JSON
    text = truncate(redact(message or json.dumps(payload, default=str), secrets))
    return ErrorFinish(code=err_code, message=redact(f"{label}: {text}", secrets))


def transport_error(
    exc: BaseException, *, provider: str, url: str | httpx.URL, secrets: Iterable[str | None]
) -> ErrorFinish:
    """The :class:`ErrorFinish` for an httpx exception raised while sending or reading (the
    exception text redacted then truncated; ``url``'s user-info counts as a secret)."""
    from ._chunks import ErrorFinish  # not at import: see ``_chunks``

    secrets = (*secrets, *url_secrets(url))
    where = safe_url(url)
    detail = truncate(redact(str(exc) or type(exc).__name__, secrets))
    if isinstance(exc, httpx.ReadTimeout):
        code, text = (
            "TIMEOUT",
            f"{provider}: no data from {where} within the read timeout (stalled stream)",
        )
    elif isinstance(exc, httpx.TimeoutException):
        code, text = "TIMEOUT", f"{provider}: timed out talking to {where} ({type(exc).__name__})"
    elif isinstance(exc, httpx.ConnectError):
        code, text = (
            "TRANSPORT",
            f"{provider}: could not connect to {where}; is the server running and base_url right? ({detail})",
        )
    elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        code, text = (
            "TRANSPORT",
            f"{provider}: connection to {where} dropped mid-response ({detail})",
        )
    elif isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        code, text = "BAD_REQUEST", f"{provider}: invalid base_url {where}: {detail}"
    else:
        code, text = (
            "TRANSPORT",
            f"{provider}: HTTP transport error talking to {where} ({type(exc).__name__}: {detail})",
        )
    return ErrorFinish(code=code, message=redact(text, secrets))


# -- HTTP client ownership ----------------------------------------------------------------------


def default_timeout() -> httpx.Timeout:
    """Connect fast, but let a slow model think: ``read`` is the longest silence tolerated
    between two bytes of a stream before the request ends with ``TIMEOUT``."""
    return httpx.Timeout(connect=10.0, read=300.0, write=60.0, pool=60.0)


_SENSITIVE_HEADER_PARTS = ("authorization", "key", "token", "secret", "cookie")


def header_secrets(headers: Mapping[str, str] | None) -> list[str]:
    """Values of configured headers that look like credentials (redacted like the key): the
    whole value, the token after a scheme (``Bearer <token>``) and, for ``Basic``, the decoded
    ``user:password`` and each of its parts."""
    if not headers:
        return []
    out: list[str] = []
    for name, value in headers.items():
        if any(part in name.lower() for part in _SENSITIVE_HEADER_PARTS):
            out.append(value)
            words = value.split()
            out.extend(words[1:])
            if len(words) == 2 and words[0].lower() == "basic":
                out.extend(_basic_parts(words[1]))
    return out


def _basic_parts(token: str) -> list[str]:
    try:
        decoded = base64.b64decode(token, validate=True).decode("utf-8")
    except ValueError:  # binascii.Error and UnicodeDecodeError included
        return []
    return [decoded, *decoded.split(":", 1)]


class HttpClientOwner:
    """Mixin for adapters: a lazily created ``httpx.AsyncClient`` (or an injected one, which
    the adapter never closes) and the request timeout (``None`` = the injected client's own).
    Nothing here touches ``httpx`` before the first request (see :func:`_lazy_module`)."""

    _client: httpx.AsyncClient | None
    _owns_client: bool
    _client_loop: asyncio.AbstractEventLoop | None
    _timeout_arg: float | httpx.Timeout | None

    def _init_client(
        self, client: httpx.AsyncClient | None, timeout: float | httpx.Timeout | None
    ) -> None:
        self._client = client
        self._owns_client = client is None
        self._client_loop = None
        self._timeout_arg = timeout

    @property
    def _timeout(self) -> httpx.Timeout | None:
        """The timeout given, else :func:`default_timeout` for an owned client, else ``None``
        (an injected client keeps its own)."""
        given = self._timeout_arg
        if given is None:
            return default_timeout() if self._owns_client else None
        return given if isinstance(given, httpx.Timeout) else httpx.Timeout(given)

    def _http(self) -> httpx.AsyncClient:
        if not self._owns_client:
            assert self._client is not None
            return self._client
        # Pooled connections belong to the event loop that opened them: a client created
        # under another (closed) loop cannot be reused, so build a fresh one for this loop.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._client_loop is not loop:
            self._client = httpx.AsyncClient(timeout=self._timeout)
            self._client_loop = loop
        return self._client

    def _timeout_kwargs(self) -> dict[str, Any]:
        timeout = self._timeout
        return {"timeout": timeout} if timeout is not None else {}

    async def aclose(self) -> None:
        """Close the adapter's own HTTP client (idempotent; an injected client is left open)."""
        if not self._owns_client:
            return
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


__all__ = [
    "MAX_QUOTE",
    "REDACTED",
    "HttpClientOwner",
    "classify_error_type",
    "default_timeout",
    "error_details",
    "header_secrets",
    "http_error",
    "is_loopback_url",
    "key_hint",
    "missing_key_message",
    "parse_retry_after",
    "redact",
    "resolve_env",
    "safe_url",
    "status_code_for",
    "stream_error",
    "transport_error",
    "truncate",
]
