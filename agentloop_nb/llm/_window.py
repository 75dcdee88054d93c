"""The context window a server on this machine reports, and the output cap derived from it.

A local OpenAI-compatible server knows the window it runs with (``llama-server -c 4096``),
which no model table can: llama.cpp's ``GET /props`` answers it as
``default_generation_settings.n_ctx`` (per slot), vLLM's ``GET /v1/models`` as each model's
``max_model_len``. :class:`WindowProbe` asks once per base URL and model, lazily (on the first
request that needs it, never at import or construction), with a short timeout, and remembers
the answer. A server that answered without a window is remembered as "does not say"
(``None``); a probe that failed (connection refused, a timeout, a 5xx while the model loads)
is not remembered, so the next request asks again.

The output cap for such a server (:func:`cap_for_window`): a quarter of its window, at most
:data:`MAX_LOCAL_CAP`, so the prompt keeps three quarters and a small model's answer cannot run
on until the window is full.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx


#: Seconds a probe may take (a server on this machine answers in milliseconds).
PROBE_TIMEOUT = 2.0

#: The largest output cap derived from a window (a CPU model writes ~10-100 tokens/s).
MAX_LOCAL_CAP = 4096

_FAILED = object()  # a probe that could not get an answer: ask again next time


def cap_for_window(window: int) -> int:
    """The default output cap for a server whose context window is ``window`` tokens: a
    quarter of it, at least 1 and at most :data:`MAX_LOCAL_CAP`."""
    return max(1, min(window // 4, MAX_LOCAL_CAP))


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def props_window(payload: Any) -> int | None:
    """llama.cpp's ``/props``: ``default_generation_settings.n_ctx`` (older servers: a
    top-level ``n_ctx``)."""
    if not isinstance(payload, Mapping):
        return None
    settings = payload.get("default_generation_settings")
    if isinstance(settings, Mapping) and _positive_int(settings.get("n_ctx")):
        return int(settings["n_ctx"])
    return _positive_int(payload.get("n_ctx"))


def models_window(payload: Any, model: str) -> int | None:
    """vLLM's ``/v1/models``: the ``max_model_len`` of the entry named ``model`` (or of the
    only entry, since a local server often serves one model under any name)."""
    data = payload.get("data") if isinstance(payload, Mapping) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, Mapping)]
    named = [e for e in entries if e.get("id") == model]
    chosen = named or (entries if len(entries) == 1 else [])
    return _positive_int(chosen[0].get("max_model_len")) if chosen else None


class WindowProbe:
    """The windows servers reported, by ``(base URL, model)``; see the module docstring."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], int | None] = {}
        self._locks: dict[tuple[str, str], tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}

    def known(self, base_url: str, model: str) -> tuple[bool, int | None]:
        """``(asked, window)``: whether the server answered a probe yet, and its window."""
        key = (base_url, model)
        return (key in self._known, self._known.get(key))

    async def window(
        self, client: httpx.AsyncClient, base_url: str, model: str, headers: Mapping[str, str]
    ) -> int | None:
        """The window the server at ``base_url`` reports for ``model`` (``None``: it does not
        say, or could not be asked now). One probe at a time per key; never raises for a
        server problem."""
        key = (base_url, model)
        if key in self._known:
            return self._known[key]
        loop = asyncio.get_running_loop()
        held = self._locks.get(key)
        if held is None or held[0] is not loop:  # a lock belongs to the loop that made it
            held = self._locks[key] = (loop, asyncio.Lock())
        async with held[1]:
            if key in self._known:  # another request asked while this one waited
                return self._known[key]
            found = await _probe(client, base_url, model, headers)
            if found is _FAILED:
                return None
            assert found is None or isinstance(found, int)
            self._known[key] = found
            return found


async def _probe(
    client: httpx.AsyncClient, base_url: str, model: str, headers: Mapping[str, str]
) -> object:
    """``/props``, then ``/models``: a window, ``None`` (answered, no window) or ``_FAILED``."""
    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    answered = False
    for url, read in (
        (root + "/props", props_window),
        (base_url + "/models", lambda p: models_window(p, model)),
    ):
        try:
            response = await client.get(url, headers=dict(headers), timeout=PROBE_TIMEOUT)
        except Exception:  # a probe never fails a request: the default cap serves
            continue
        if response.status_code >= 500:
            continue  # e.g. 503 while the model loads: it may say later
        answered = True
        if response.status_code >= 300:
            continue
        try:
            window = read(json.loads(response.content))
        except ValueError:
            continue
        if window is not None:
            return window
    return None if answered else _FAILED


__all__ = ["MAX_LOCAL_CAP", "PROBE_TIMEOUT", "WindowProbe", "cap_for_window"]
