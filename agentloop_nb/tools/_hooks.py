"""The tool hooks' names, their shared defaults and the "does anyone listen" check.

Every phase dispatches through ``execution.ctx`` (the agent's context when there is an agent),
so scope filtering applies. A hook nobody observes is skipped: its default is used directly,
which keeps a call without plugins cheap.
"""

from __future__ import annotations

from typing import Any, Final

from .. import _hook_names
from ._decisions import Accept, Allow

__all__ = [
    "ACCEPT",
    "ALLOW",
    "EXECUTE",
    "POST_EXECUTE",
    "PRE_EXECUTE",
    "RESULT",
    "SETTLED",
    "accept",
    "allow",
    "observed",
]

PRE_EXECUTE: Final = _hook_names.TOOLS_PRE_EXECUTE
EXECUTE: Final = _hook_names.TOOLS_EXECUTE
SETTLED: Final = _hook_names.TOOLS_SETTLED
POST_EXECUTE: Final = _hook_names.TOOLS_POST_EXECUTE
RESULT: Final = _hook_names.TOOLS_RESULT

# Decisions are frozen, so the waterfalls' defaults can share one instance each.
ALLOW: Final = Allow()
ACCEPT: Final = Accept()


def allow() -> Allow:
    return ALLOW


def accept() -> Accept:
    return ACCEPT


def observed(ctx: Any, name: str) -> bool:
    """Whether dispatching ``name`` through ``ctx`` could reach a listener (a dispatcher
    without ``has_listeners`` is assumed observed: the hook then always runs)."""
    has = getattr(ctx, "has_listeners", None)
    return True if has is None else bool(has(name))
