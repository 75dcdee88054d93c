"""The magics: ``%agent``, ``%%agent``, ``%%plugin`` and their sub-commands.

``_agent`` parses and dispatches; each family of sub-commands (kernel tools, fork, long
sessions, MCP) lives in a module of its own and is wired in there. The magics reach agents
through the kernel state (``.._state``) and show them through ``view``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._lazy import LazyExports

if TYPE_CHECKING:
    from ._agent import AgentMagics, keep_question_marks
    from ._cellplugin import plugin

_EXPORTS = LazyExports(
    __name__,
    {"._agent": ("AgentMagics", "keep_question_marks"), "._cellplugin": ("plugin",)},
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


__all__ = ["AgentMagics", "keep_question_marks", "plugin"]
