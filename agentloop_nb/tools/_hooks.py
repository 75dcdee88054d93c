"""The tool hooks' names and their shared defaults.

Every phase dispatches through ``execution.ctx`` (the agent's context when there is an agent),
so scope filtering applies. Dispatching a hook nobody observes is cheap (the bus runs the
default directly), and payloads that would have to be built are passed as ``Lazy`` so an
unobserved hook never builds them.
"""

from __future__ import annotations

from typing import Final

from .. import _hook_names
from ._verdicts import Accept, Allow

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
]

PRE_EXECUTE: Final = _hook_names.TOOLS_PRE_EXECUTE
EXECUTE: Final = _hook_names.TOOLS_EXECUTE
SETTLED: Final = _hook_names.TOOLS_SETTLED
POST_EXECUTE: Final = _hook_names.TOOLS_POST_EXECUTE
RESULT: Final = _hook_names.TOOLS_RESULT

# Decisions are frozen, so the waterfalls' defaults can share one instance each (made with
# model_construct: no validator is built at import for these literal, valid instances).
ALLOW: Final = Allow.model_construct()
ACCEPT: Final = Accept.model_construct()


def allow() -> Allow:
    return ALLOW


def accept() -> Accept:
    return ACCEPT
