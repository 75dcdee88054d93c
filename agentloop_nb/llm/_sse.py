"""The streaming driver shared by the HTTP adapters: send one request, read its server-sent
events (parsed by ``httpx-sse``) and hand each event to a provider-specific
:class:`EventParser` that turns it into :class:`StreamChunk` s.

Contract of :func:`stream_sse` (an async generator):

- it never raises for a provider or network problem and never hangs: every path ends with
  exactly one ``Finish`` — a successful one from the parser, ``Finish(Aborted())`` when
  ``signal`` aborts, or an ``ErrorFinish`` (HTTP status, transport failure, read timeout,
  truncated or malformed stream; see :mod:`._http`);
- cancellation: an abort of ``signal`` cancels the pending network operation at once (each
  await on the network runs in its own :class:`~agentloop_nb.signals.AbortScope`; no scope is
  held across a ``yield``, so the consumer's own awaits are never hit), the response
  is closed and ``Finish(Aborted())`` is yielded. Cancelling the consuming task, or closing the
  generator, closes the response too;
- it stops reading as soon as the parser reports the stream done (``[DONE]``,
  ``message_stop``) rather than waiting for the server to close;
- every error message goes through :func:`._http.redact` with the request's secrets.

:class:`SseAdapter` is the base of the HTTP adapters: configuration read at request time, a
repr that never shows the key, and ``stream`` — build the JSON request (a missing key or an
unusable URL is an error finish, never an exception) and drive it through :func:`stream_sse`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import aclosing
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from .._json import dumps_bytes
from ..errors import AgentloopError
from ..signals import AbortError, AbortScope, AbortSignal
from ._http import (
    HttpClientOwner,
    error_details,
    header_secrets,
    http_error,
    httpx,
    is_loopback_url,
    key_hint,
    missing_key_message,
    redact,
    resolve_env,
    safe_url,
    stream_error,
    transport_error,
    truncate,
    url_secrets,
)

if TYPE_CHECKING:
    from ._chunks import ErrorFinish, Finish, StreamChunk
    from ._options import GenerateOptions

#: Most bytes read from an error response (its body is only quoted, truncated).
MAX_ERROR_BODY = 64 * 1024

_T = TypeVar("_T")


class StreamFailure(AgentloopError):
    """Raised by a parser for a stream it cannot accept (in-stream error event, malformed
    JSON); the driver yields ``Finish(failure.finish)`` and closes the response."""

    def __init__(self, finish: ErrorFinish) -> None:
        super().__init__(finish.message)
        self.finish = finish


class EventParser(Protocol):
    """Turns one provider's events into chunks. ``done`` becomes true once the provider's
    terminator has been seen (the driver then stops reading)."""

    done: bool

    def feed(self, event: str, data: str) -> list[StreamChunk]:
        """Chunks for one event (the last one a ``Finish`` once ``done``). May raise
        :class:`StreamFailure`."""
        ...

    def eof(self) -> list[StreamChunk]:
        """Chunks for a stream that ended before ``done``: a completion whose finish reason
        was already seen, or a ``TRANSPORT`` "truncated" error finish."""
        ...


class _Aborted:
    """Sentinel: the awaited network operation was cut short by the abort signal."""


_ABORTED = _Aborted()


async def _until_abort(
    signal: AbortSignal | None, fn: Callable[..., Awaitable[_T]], *args: Any
) -> _T | _Aborted:
    """``await fn(*args)`` under an :class:`AbortScope` of ``signal``: ``_ABORTED`` when the
    signal aborts before or during the await (which is cancelled), or when ``fn`` fails after
    the abort (the abort wins over the error it caused)."""
    if signal is None:
        return await fn(*args)
    try:
        # Not strict: an event that arrived just as the abort landed is still delivered; the
        # next read sees the abort on entry.
        with AbortScope(signal, strict=False):
            return await fn(*args)
    except AbortError:
        return _ABORTED


async def _read_limited(response: httpx.Response, limit: int = MAX_ERROR_BODY) -> bytes:
    """At most ``limit`` bytes of the body (an error body is only ever quoted)."""
    buf = bytearray()
    async for piece in response.aiter_bytes():
        buf += piece
        if len(buf) >= limit:
            break
    return bytes(buf[:limit])


async def _close(response: httpx.Response) -> None:
    # Shielded: this also runs while the consuming task is being cancelled, and an unclosed
    # stream would leak the connection. Closing a streamed response only drops the socket,
    # it never waits on the server.
    with anyio.CancelScope(shield=True):
        await response.aclose()


async def stream_sse(
    *,
    client: httpx.AsyncClient,
    request: httpx.Request,
    parser: EventParser,
    signal: AbortSignal | None,
    provider: str,
    model: str,
    secrets: Iterable[str | None],
    key_env: str | None = None,
) -> AsyncGenerator[StreamChunk, None]:
    """Send ``request`` and stream its events through ``parser`` (see the module docstring)."""
    from ._chunks import Aborted, ErrorFinish, Finish  # not at import: see ``_chunks``

    secrets = tuple(secrets)
    url = request.url
    try:
        sent = await _until_abort(signal, partial(client.send, request, stream=True))
    except httpx.HTTPError as exc:
        yield Finish(reason=transport_error(exc, provider=provider, url=url, secrets=secrets))
        return
    if isinstance(sent, _Aborted):
        yield Finish(reason=Aborted())
        return
    response: httpx.Response = sent
    try:
        if response.status_code >= 400 or not _is_event_stream(response):
            yield await _error_response(response, signal, provider, model, secrets, key_env)
            return
        from httpx_sse import EventSource  # with the first stream, as httpx is

        events = EventSource(response).aiter_sse()
        next_event = events.__anext__
        try:
            while True:
                try:
                    event = await _until_abort(signal, next_event)
                except StopAsyncIteration:
                    for chunk in parser.eof():
                        yield chunk
                    return
                except httpx.HTTPError as exc:
                    yield Finish(
                        reason=transport_error(exc, provider=provider, url=url, secrets=secrets)
                    )
                    return
                if isinstance(event, _Aborted):
                    yield Finish(reason=Aborted())
                    return
                try:
                    chunks = parser.feed(event.event, event.data)
                except StreamFailure as failure:
                    message = redact(failure.finish.message, secrets)
                    yield Finish(reason=failure.finish.model_copy(update={"message": message}))
                    return
                except Exception as exc:
                    # Well-formed JSON of an unexpected shape (a list where an index belongs,
                    # ...): still a bad response, never an exception out of the adapter.
                    detail = f"{type(exc).__name__}: {exc}"
                    message = (
                        f"{provider}: could not interpret the {event.event!r} event "
                        f"({truncate(detail, 120)}): {truncate(event.data, 200)!r}"
                    )
                    yield Finish(
                        reason=ErrorFinish(code="BAD_RESPONSE", message=redact(message, secrets))
                    )
                    return
                for chunk in chunks:
                    yield chunk
                if parser.done:
                    return
        finally:
            with anyio.CancelScope(shield=True):
                await events.aclose()
    finally:
        await _close(response)


async def _error_response(
    response: httpx.Response,
    signal: AbortSignal | None,
    provider: str,
    model: str,
    secrets: tuple[str | None, ...],
    key_env: str | None,
) -> Finish:
    """The finish for an HTTP error status, or a 2xx that is not an event stream."""
    from ._chunks import Aborted, Finish

    url = response.request.url
    try:
        body = await _until_abort(signal, _read_limited, response)
    except httpx.HTTPError as exc:
        return Finish(reason=transport_error(exc, provider=provider, url=url, secrets=secrets))
    if isinstance(body, _Aborted):
        return Finish(reason=Aborted())
    if response.status_code >= 400:
        return Finish(
            reason=http_error(
                provider=provider,
                status=response.status_code,
                body=body,
                headers=response.headers,
                url=url,
                model=model,
                secrets=secrets,
                key_env=key_env,
            )
        )
    return Finish(reason=_not_a_stream(response, body, provider, secrets))


def _is_event_stream(response: httpx.Response) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


def _not_a_stream(
    response: httpx.Response, body: bytes, provider: str, secrets: tuple[str | None, ...]
) -> ErrorFinish:
    """A 2xx that is not an event stream: an error object some proxies send with 200, or a
    server that ignored ``stream: true``."""
    from ._chunks import ErrorFinish

    text = body.decode("utf-8", errors="replace")
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and "error" in payload and error_details(payload)[0]:
        return stream_error(
            provider=provider, payload=payload, secrets=secrets, default="BAD_RESPONSE"
        )
    ctype = response.headers.get("content-type", "<none>")
    return ErrorFinish(
        code="BAD_RESPONSE",
        status=response.status_code,
        message=redact(
            f"{provider}: expected an event stream (text/event-stream) but got {ctype!r}: "
            f"{truncate(text)}",
            secrets,
        ),
    )


# -- the adapter base ---------------------------------------------------------------------------


def tool_definition(tool: Mapping[str, Any], schema_key: str) -> dict[str, Any]:
    """A ``{"name", "description", "parameters"}`` tool as ``{name, description?, <schema_key>}``
    (an empty description is left out; missing parameters become an empty object schema)."""
    out: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description"):
        out["description"] = tool["description"]
    out[schema_key] = tool.get("parameters") or {"type": "object", "properties": {}}
    return out


class SseAdapter(HttpClientOwner):
    """Base of the HTTP adapters (see the module docstring). A subclass provides
    ``build_body``, ``_endpoint``, ``_parser`` and ``_auth_headers`` (and may add fixed
    headers with ``_fixed_headers``).

    ``stream(options)`` never raises for provider problems and ends with exactly one
    ``Finish``; aborting ``options.signal`` closes the HTTP stream at once and yields
    ``Finish(Aborted())``. ``aclose()`` closes the adapter's own HTTP client (not an injected
    ``client``).
    """

    def __init__(
        self,
        *,
        name: str,
        base_url: str | None,
        api_key: str | None,
        api_key_env: str | None,
        base_url_env: str | None,
        default_base_url: str,
        headers: Mapping[str, str] | None,
        timeout: float | httpx.Timeout | None,
        require_key: bool,
        client: httpx.AsyncClient | None,
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

    @property
    def base_url(self) -> str:
        """The effective base URL right now (explicit, else environment, else default)."""
        return (resolve_env(self._base_url, self.base_url_env) or self.default_base_url).rstrip("/")

    @property
    def is_local(self) -> bool:
        """Whether requests stay on this machine (the base URL is a loopback address): the
        default system prompt shares the working directory with such servers only."""
        return is_loopback_url(self.base_url)

    def _key(self) -> str | None:
        return resolve_env(self._api_key, self.api_key_env)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, base_url={safe_url(self.base_url)!r}, "
            f"api_key={key_hint(self._key())!r}, api_key_env={self.api_key_env!r})"
        )

    # -- subclass hooks -------------------------------------------------------------------------

    def build_body(self, options: GenerateOptions) -> dict[str, Any]:
        """The JSON body sent for ``options``."""
        raise NotImplementedError

    def _endpoint(self) -> str:
        """The URL the request is posted to."""
        raise NotImplementedError

    def _parser(self) -> EventParser:
        """A fresh parser for one response's events."""
        raise NotImplementedError

    def _fixed_headers(self) -> dict[str, str]:
        """Headers every request carries (configured ``headers`` override them)."""
        return {}

    def _auth_headers(self, key: str) -> dict[str, str]:
        """The header(s) that carry the API key."""
        raise NotImplementedError

    # -- streaming ------------------------------------------------------------------------------

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        """Stream one response (see the class docstring for the failure contract)."""
        from ._chunks import ErrorFinish, Finish  # not at import: see ``_chunks``

        key = self._key()
        if key is None and self.require_key:
            yield Finish(
                reason=ErrorFinish(
                    code="AUTH", message=missing_key_message(self.name, self.api_key_env)
                )
            )
            return
        secrets = [key, *header_secrets(self._headers), *url_secrets(self.base_url)]
        headers = {"content-type": "application/json", **self._fixed_headers(), **self._headers}
        if key is not None:
            headers.update(self._auth_headers(key))
        url = self._endpoint()
        client = self._http()
        try:
            request = client.build_request(
                "POST",
                url,
                headers=headers,
                content=dumps_bytes(self.build_body(options)),
                **self._timeout_kwargs(),
            )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            yield Finish(reason=transport_error(exc, provider=self.name, url=url, secrets=secrets))
            return
        chunks = stream_sse(
            client=client,
            request=request,
            parser=self._parser(),
            signal=options.signal,
            provider=self.name,
            model=options.model,
            secrets=secrets,
            key_env=self.api_key_env,
        )
        async with aclosing(chunks):
            async for chunk in chunks:
                yield chunk


__all__ = [
    "MAX_ERROR_BODY",
    "EventParser",
    "SseAdapter",
    "StreamFailure",
    "stream_sse",
    "tool_definition",
]
