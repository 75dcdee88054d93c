"""Applying plugins: Config validation, ``inject`` checks, named replacement, rollback.

Private to :mod:`agentloop_nb.context`; ``Context.plugin`` is the public entry point and hands
this module what it needs (a way to derive the plugin's context, to look a service up, and the
table of named plugins applied through it), so nothing here touches a context's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ._fiber import Fiber, close_unstarted, is_awaitable
from .errors import AgentloopError, InvalidTypeError


class PluginError(RuntimeError, AgentloopError):
    """A plugin cannot be applied (e.g. a service it injects is not provided)."""


def plugin_name(plugin: Any, name: str | None) -> tuple[str | None, str]:
    """``(name, label)``: the replacement key (the ``name=`` argument or the plugin's ``name``
    attribute) and a label for messages and the scope path."""
    if name is None:
        attr = getattr(plugin, "name", None)
        name = attr if isinstance(attr, str) else None
    label = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    return name, label


def validate_config(plugin: Any, config: Any) -> Any:
    """Validate ``config`` against the plugin's pydantic ``Config`` (``None`` means defaults);
    without a ``Config`` model the value passes through. ``ValidationError`` propagates."""
    model = getattr(plugin, "Config", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return config
    if config is None:
        return _defaults(model)
    if isinstance(config, model):
        return config
    return model.model_validate(config)


def _defaults(model: type[BaseModel]) -> BaseModel:
    """``model()``: constructed without building its validator when validating the defaults
    would do nothing (no model validator, no ``validate_default``), as for the built-in
    plugins applied by every ``App`` (start-up cost); validated otherwise."""
    validates_defaults = (
        model.__pydantic_decorators__.model_validators
        or model.model_config.get("validate_default")
        or any(f.validate_default for f in model.model_fields.values())
    )
    return model() if validates_defaults else model.model_construct()


def check_inject(plugin: Any, label: str, path: str, provided: Callable[[str], bool]) -> None:
    """Raise :class:`PluginError` naming the first ``inject`` service that is not provided."""
    inject = getattr(plugin, "inject", ())
    for service in (inject,) if isinstance(inject, str) else inject:
        if not provided(service):
            raise PluginError(
                f"plugin {label!r} requires service {service!r}, which is not provided to "
                f"context {path!r}; provide it first with "
                f"ctx.provide({service!r}, obj) or apply the plugin that provides it"
            )


def remember(named: dict[str, Fiber], name: str, fiber: Fiber) -> None:
    """Record ``fiber`` as the live plugin ``name``; its disposal forgets it again. A live
    plugin of the same name must have been disposed before (see :func:`replace_named`)."""
    named[name] = fiber

    def forget() -> None:
        if named.get(name) is fiber:
            del named[name]

    fiber.own(forget)


def replace_named(named: dict[str, Fiber], name: str | None) -> None:
    """Dispose the live plugin called ``name`` (its own teardown removes it from ``named``)."""
    if name is None:
        return
    old = named.get(name)
    if old is not None:
        old.dispose()


def run_apply(plugin: Any, ctx: Any, config: Any, label: str) -> None:
    """Call ``plugin(ctx, config)``; a class's instance becomes ``fiber.instance`` (its
    ``dispose()`` is owned by the scope). On any error the plugin's scope is disposed and the
    error propagates; an ``apply`` returning an awaitable is a ``TypeError``."""
    fiber: Fiber = ctx.fiber
    try:
        if isinstance(plugin, type):
            instance = plugin(ctx, config)
            fiber.instance = instance
            dispose = getattr(instance, "dispose", None)
            if callable(dispose):
                fiber.own(dispose)
        else:
            result = plugin(ctx, config)
            if result is not None and is_awaitable(result):
                close_unstarted((result,))
                raise InvalidTypeError(
                    f"plugin {label!r} returned an awaitable: apply must be synchronous "
                    "(start async work with ctx.effect or a task owned by a service)"
                )
    except BaseException:
        fiber.dispose()
        raise


__all__ = [
    "PluginError",
    "check_inject",
    "plugin_name",
    "remember",
    "replace_named",
    "run_apply",
    "validate_config",
]
