"""The loop's prompt variables (``provider``, ``model``, ``cwd``), which ``AgentLoop`` registers
on the system prompt when it is built (``App()``): apart from the request path
(``_request``), which loads with the first agent. ``_request`` compares an assembly's values
against these very functions (see ``effective_assembly``)."""

from __future__ import annotations

from typing import Any

__all__ = ["CWD_NOT_SHARED", "configured_model", "configured_provider", "shared_cwd"]


def configured_provider(agent: Any) -> str:
    """The loop's ``provider`` prompt variable at assembly time: the agent's option."""
    return getattr(agent.options, "provider", None) or "unset"


def configured_model(agent: Any) -> str:
    """The loop's ``model`` prompt variable at assembly time: the agent's option."""
    return getattr(agent.options, "model", None) or "unset"


#: What the ``cwd`` prompt variable says to a provider that is not on this machine.
CWD_NOT_SHARED = "not shared with a remote provider"


def shared_cwd(agent: Any) -> str:
    """The loop's ``cwd`` prompt variable: the session's working directory when the agent's
    provider keeps requests on this machine (its adapter says ``is_local``: the offline and
    scripted models, an HTTP server on a loopback address), else :data:`CWD_NOT_SHARED` (a
    user's path is personal data). Fixed for a given provider, so the prompt stays
    byte-stable."""
    provider = getattr(agent.options, "provider", None)
    adapter = agent.ctx.llm.adapter_for(provider) if provider else None
    if not getattr(adapter, "is_local", False):
        return CWD_NOT_SHARED
    return str(agent.session.header.cwd or ".")
