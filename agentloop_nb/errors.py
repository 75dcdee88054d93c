"""``AgentloopError``: the one root of every exception the package raises.

A public leaf (plugins import it from here). Each of the package's exceptions keeps its historical base (``RuntimeError``,
``ValueError``, ``LookupError`` ...) as its first base and adds this one, so existing
``except`` clauses keep working and ``except AgentloopError`` catches everything the package
raises on purpose. Public as ``agentloop_nb.AgentloopError``.
"""

from __future__ import annotations


class AgentloopError(Exception):
    """Base of every exception ``agentloop_nb`` raises (a second base where the exception
    also derives from a built-in one)."""

    __module__ = "agentloop_nb"


__all__ = ["AgentloopError"]
