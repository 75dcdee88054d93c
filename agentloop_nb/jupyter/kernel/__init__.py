"""The kernel-facing tools: what an agent reads and runs in the user's namespace.

``kernel_tools(agent)`` (``list_variables``, ``inspect_variable``, ``run_python``,
``notebook_history``), the bounded describers of live objects and the secrets rule, running
model-written code like a cell, the interrupt hook, and the opt-in blocking helper. This room
imports ``fold`` only (never ``view``: the approval view shows ``run_python``'s code through a
renderer the kernel tools register on the approval service).
"""

from __future__ import annotations

from ._describe import close_matches, describe, is_secret
from ._interrupt import InterruptHook
from ._run_code import RunOutcome, run_code
from ._sync import run_eagerly, run_sync
from ._tools import MASK, code_html, kernel_tools, mask, secret_values, user_variables

__all__ = [
    "MASK",
    "InterruptHook",
    "RunOutcome",
    "close_matches",
    "code_html",
    "describe",
    "is_secret",
    "kernel_tools",
    "mask",
    "run_code",
    "run_eagerly",
    "run_sync",
    "secret_values",
    "user_variables",
]
