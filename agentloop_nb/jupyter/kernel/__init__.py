"""The kernel-facing tools: what an agent reads and runs in the user's namespace.

``KernelTools`` / ``add_kernel_tools(agent)`` (``list_variables``, ``inspect_variable``,
``run_python``, ``notebook_history``, ``read_error``), the bounded summaries of live objects
and their ``Describers`` registry (an object kept on the IPython shell,
``shell_describers(shell)``; the loaded state provides it as ``ctx.describers`` and builds the
public ``kernel_tools`` over it), the secrets rule,
running model-written code like a cell, the interrupt hook, the opt-in blocking helper, and
the kernel's memory (``KernelMemory``: error autopsies, undo snapshots of agents' runs —
``snapshot_for`` / ``restore`` for any tool that runs code — and the provenance of names).
This room imports ``fold`` only (never ``view``: the approval view shows ``run_python``'s code
and its Undo button through callables the kernel tools register on the approval service).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._lazy import LazyExports

if TYPE_CHECKING:
    from ._autopsy import Autopsy, build_autopsy
    from ._bindings import Bindings, analyse
    from ._describe import (
        MASK,
        Describer,
        Describers,
        close_matches,
        describe,
        is_secret,
        mask,
        secret_values,
        shell_describers,
    )
    from ._interrupt import InterruptHook
    from ._memory import AgentRun, KernelMemory, UndoReport
    from ._provenance import Binding
    from ._run_code import RunOutcome, run_code
    from ._sync import run_eagerly, run_sync
    from ._tools import (
        KernelTools,
        add_kernel_tools,
        code_html,
        describers_of,
        memory_of,
        undo_action,
        user_variables,
    )
    from ._undo import (
        DEFAULT_SIZE_LIMIT,
        NameOutcome,
        Snapshot,
        estimate_size,
        restore,
        snapshot_for,
    )

# Each room loads with the first use of one of its names (start-up cost of %load_ext).
_EXPORTS = LazyExports(
    __name__,
    {
        "._autopsy": ("Autopsy", "build_autopsy"),
        "._bindings": ("Bindings", "analyse"),
        "._describe": (
            "MASK",
            "Describer",
            "Describers",
            "close_matches",
            "describe",
            "is_secret",
            "mask",
            "secret_values",
            "shell_describers",
        ),
        "._interrupt": ("InterruptHook",),
        "._memory": ("AgentRun", "KernelMemory", "UndoReport"),
        "._provenance": ("Binding",),
        "._run_code": ("RunOutcome", "run_code"),
        "._sync": ("run_eagerly", "run_sync"),
        "._tools": (
            "KernelTools",
            "add_kernel_tools",
            "code_html",
            "describers_of",
            "memory_of",
            "undo_action",
            "user_variables",
        ),
        "._undo": (
            "DEFAULT_SIZE_LIMIT",
            "NameOutcome",
            "Snapshot",
            "estimate_size",
            "restore",
            "snapshot_for",
        ),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


__all__ = [
    "DEFAULT_SIZE_LIMIT",
    "MASK",
    "AgentRun",
    "Autopsy",
    "Binding",
    "Bindings",
    "Describer",
    "Describers",
    "InterruptHook",
    "KernelMemory",
    "KernelTools",
    "NameOutcome",
    "RunOutcome",
    "Snapshot",
    "UndoReport",
    "add_kernel_tools",
    "analyse",
    "build_autopsy",
    "close_matches",
    "code_html",
    "describe",
    "describers_of",
    "estimate_size",
    "is_secret",
    "mask",
    "memory_of",
    "restore",
    "run_code",
    "run_eagerly",
    "run_sync",
    "secret_values",
    "shell_describers",
    "snapshot_for",
    "undo_action",
    "user_variables",
]
