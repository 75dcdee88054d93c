"""``AgentloopError``: the one root of every exception the package raises, and its leaves.

A public leaf (plugins import it from here). Each of the package's exceptions keeps its historical base (``RuntimeError``,
``ValueError``, ``LookupError`` ...) as its first base and adds this one, so existing
``except`` clauses keep working and ``except AgentloopError`` catches everything the package
raises on purpose. Public as ``agentloop_nb.AgentloopError``.

Where no more specific class fits (``SessionNotFoundError``, ``LlmError``, ``AbortError`` ...),
the package raises one of five general leaves, each also the built-in it always raised:

- :class:`InvalidValueError` (``ValueError``): an argument, option or record has a bad value;
- :class:`InvalidTypeError` (``TypeError``): something of the wrong kind was passed or returned;
- :class:`UsageError` (``RuntimeError``): a call made in the wrong state or without what it
  needs (a closed loop, a disposed agent, no running event loop, a missing service);
- :class:`NotFoundError` (``KeyError``, so also ``LookupError``): nothing has this name or id;
- :class:`MissingDependencyError` (``ImportError``): an optional extra is not installed.
"""

from __future__ import annotations


class AgentloopError(Exception):
    """Base of every exception ``agentloop_nb`` raises (a second base where the exception
    also derives from a built-in one)."""

    __module__ = "agentloop_nb"


class InvalidValueError(ValueError, AgentloopError):
    """An argument, option or record has a bad value; the message names it and what to pass."""

    __module__ = "agentloop_nb"


class InvalidTypeError(TypeError, AgentloopError):
    """Something of the wrong type was passed, or returned by a listener or callback; the
    message names what was expected."""

    __module__ = "agentloop_nb"


class UsageError(RuntimeError, AgentloopError):
    """A call made in a state that does not allow it (closed, disposed, not set up); the
    message says what to do first."""

    __module__ = "agentloop_nb"


class NotFoundError(KeyError, AgentloopError):
    """Nothing has this name or id. A ``KeyError`` (hence a ``LookupError``) whose ``str`` is
    the plain message, not ``KeyError``'s quoted repr of it."""

    __module__ = "agentloop_nb"

    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class MissingDependencyError(ImportError, AgentloopError):
    """An optional dependency is not installed; the message names the ``pip install`` extra."""

    __module__ = "agentloop_nb"


__all__ = [
    "AgentloopError",
    "InvalidTypeError",
    "InvalidValueError",
    "MissingDependencyError",
    "NotFoundError",
    "UsageError",
]
