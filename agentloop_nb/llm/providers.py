"""``build_adapters``: the shipped model providers, keyed by provider name.

=============  ==================  ===============================  ===================
provider       adapter             base URL (env, then default)     key (env)
=============  ==================  ===============================  ===================
``openai``     ``OpenAIAdapter``   ``OPENAI_BASE_URL``,             ``OPENAI_API_KEY``
                                   ``https://api.openai.com/v1``    (required)
``deepseek``   ``OpenAIAdapter``   ``DEEPSEEK_BASE_URL``,           ``DEEPSEEK_API_KEY``
                                   ``https://api.deepseek.com/v1``  (required)
``ollama``     ``OpenAIAdapter``   ``OLLAMA_BASE_URL``,             ``OLLAMA_API_KEY``
                                   ``http://localhost:11434/v1``    (optional)
``vllm``       ``OpenAIAdapter``   ``VLLM_BASE_URL``,               ``VLLM_API_KEY``
                                   ``http://localhost:8000/v1``     (optional)
``anthropic``  ``AnthropicAdapter``  ``ANTHROPIC_BASE_URL``,        ``ANTHROPIC_API_KEY``
                                   ``https://api.anthropic.com``    (required)
``offline``    ``OfflineModel``    —                                —
=============  ==================  ===============================  ===================

``config`` maps a provider name to keyword arguments for its adapter (``base_url``,
``api_key``, ``headers``, ``timeout``, ``api_key_env``, …; ``token_delay`` for ``offline``);
explicit values override the environment. A name that is not a preset needs
``"type": "openai" | "anthropic" | "offline"`` (e.g. ``{"openrouter": {"type": "openai",
"base_url": "https://openrouter.ai/api/v1", "api_key_env": "OPENROUTER_API_KEY"}}``).
Building never needs a key: keys are read at request time, and a missing one ends that request
with an ``AUTH`` error naming the variable to set. An entry whose explicit ``base_url`` is on
this machine (``localhost``, 127.0.0.0/8, ``::1``) is keyless by default, as local servers
(llama.cpp, Ollama, vLLM) usually are: ``require_key`` defaults to ``False`` there (a key that
is configured is still sent); say ``"require_key": True`` to insist on one.

Raises ``ValueError`` (naming the provider and the accepted options) for an unknown provider
without a ``type`` or for an option the adapter does not take, and (naming the provider and the
field) for a URL, key or variable-name option that is not a string, or a ``base_url`` that is
not an ``http(s)://`` URL.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidValueError
from ._http import is_loopback_url, safe_url
from .anthropic import AnthropicAdapter
from .offline import OfflineModel
from .openai import OpenAIAdapter

_KINDS: dict[str, type[Any]] = {
    "openai": OpenAIAdapter,
    "anthropic": AnthropicAdapter,
    "offline": OfflineModel,
}

#: Preset name → (adapter kind, default keyword arguments).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": ("openai", {}),
    "deepseek": (
        "openai",
        {
            "api_key_env": "DEEPSEEK_API_KEY",
            "base_url_env": "DEEPSEEK_BASE_URL",
            "default_base_url": "https://api.deepseek.com/v1",
        },
    ),
    "ollama": (
        "openai",
        {
            "api_key_env": "OLLAMA_API_KEY",
            "base_url_env": "OLLAMA_BASE_URL",
            "default_base_url": "http://localhost:11434/v1",
            "require_key": False,
        },
    ),
    "vllm": (
        "openai",
        {
            "api_key_env": "VLLM_API_KEY",
            "base_url_env": "VLLM_BASE_URL",
            "default_base_url": "http://localhost:8000/v1",
            "require_key": False,
        },
    ),
    "anthropic": ("anthropic", {}),
    "offline": ("offline", {}),
}


def _accepted(cls: type[Any]) -> list[str]:
    params = inspect.signature(cls.__init__).parameters
    return sorted(p for p in params if p not in ("self", "name"))


#: Options that must be strings when given (``None`` means "not set").
_STRING_OPTIONS = ("base_url", "api_key", "api_key_env", "base_url_env", "default_base_url")


def _check_string_options(name: str, opts: Mapping[str, Any]) -> None:
    """Reject a non-string URL/key option now, naming the provider and the field, instead of
    failing with an ``AttributeError`` at the first request."""
    for field in _STRING_OPTIONS:
        value = opts.get(field)
        if value is not None and not isinstance(value, str):
            raise InvalidValueError(
                f"providers[{name!r}].{field} must be a string, got {type(value).__name__}"
            )
    for field in ("base_url", "default_base_url"):
        value = opts.get(field)
        if value and not value.lower().startswith(("http://", "https://")):
            raise InvalidValueError(
                f"providers[{name!r}].{field} must be an http:// or https:// URL "
                f"(e.g. 'http://127.0.0.1:8080/v1'), got {safe_url(value)!r}"
            )


def build_adapter(name: str, options: Mapping[str, Any] | None = None) -> Any:
    """One adapter for provider ``name`` with ``options`` over its preset defaults."""
    opts = dict(options or {})
    kind = opts.pop("type", None)
    preset_kind, defaults = PRESETS.get(name, (None, {}))
    kind = kind or preset_kind
    if kind is None:
        raise InvalidValueError(
            f"unknown provider {name!r}: use one of {sorted(PRESETS)}, or give it a type, e.g. "
            f"providers={{{name!r}: {{'type': 'openai', 'base_url': ...}}}}"
        )
    if kind not in _KINDS:
        raise InvalidValueError(
            f"provider {name!r}: unknown type {kind!r}; expected one of {sorted(_KINDS)}"
        )
    cls = _KINDS[kind]
    accepted = _accepted(cls)
    unknown = sorted(set(opts) - set(accepted))
    if unknown:
        raise InvalidValueError(
            f"provider {name!r} ({cls.__name__}) does not take option(s) {unknown}; "
            f"accepted: {accepted}"
        )
    _check_string_options(name, opts)
    if "require_key" not in opts and is_loopback_url(opts.get("base_url") or ""):
        opts["require_key"] = False
    kwargs = {**(defaults if kind == preset_kind else {}), **opts}
    if cls is not OfflineModel:
        kwargs["name"] = name
    return cls(**kwargs)


def build_adapters(config: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Every preset provider plus any extra ones in ``config`` (see the module docstring)."""
    config = dict(config or {})
    for name, options in config.items():
        if options is not None and not isinstance(options, Mapping):
            raise InvalidValueError(
                f"providers[{name!r}] must be a mapping of adapter options, got {type(options).__name__}"
            )
    names = list(PRESETS) + [n for n in config if n not in PRESETS]
    return {name: build_adapter(name, config.get(name)) for name in names}


__all__ = ["PRESETS", "build_adapter", "build_adapters"]
