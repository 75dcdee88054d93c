"""The tool pipeline's decisions: small frozen pydantic models discriminated by a literal
``kind``.

- ``tools/pre-execute`` answers ``Allow()``, ``Deny(reason, info=None)`` or ``Ask(reason=None)``;
- ``tools/post-execute`` answers ``Accept(content=None, additional_contexts=())`` or
  ``Block(feedback)``;
- an approval service answers ``True`` / ``False`` or ``ApproveEdited(args)``.

Loaded with the pipeline's first call (``_admit``, ``_settle``) or the first access to a name
through ``agentloop_nb``, ``agentloop_nb.hooks`` or ``agentloop_nb.tools`` (their public homes),
not by ``import agentloop_nb`` nor ``App()``: six pydantic classes cost about 1.2 M
instructions each to make even with ``defer_build``.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .._decision import Decision

__all__ = [
    "Accept",
    "Allow",
    "ApproveEdited",
    "Ask",
    "Block",
    "Deny",
    "PostExecuteDecision",
    "PreExecuteDecision",
]


# -- decisions -------------------------------------------------------------------------------


class Allow(Decision):
    """``tools/pre-execute``: let the call proceed (to the guards, then dispatch)."""

    kind: Literal["allow"] = "allow"


class Deny(Decision):
    """``tools/pre-execute`` (or a guard): refuse the call. The model receives a ``DENIED``
    error result quoting ``reason``; ``info`` (JSON) becomes the result's ``meta``."""

    kind: Literal["deny"] = "deny"
    reason: str
    info: dict[str, Any] | None = None


class Ask(Decision):
    """``tools/pre-execute``: proceed only if the approval service (``ctx.approval``) answers
    yes (``True``, or ``ApproveEdited(args)``: the call runs with the arguments the person
    edited). With no approval service, or one that fails, the call is denied."""

    kind: Literal["ask"] = "ask"
    reason: str | None = None


class Accept(Decision):
    """``tools/post-execute``: keep the result. ``content`` (when not ``None``) replaces the
    result's content; ``additional_contexts`` are appended to the result's own, and the loop
    injects them into the next step's input."""

    kind: Literal["accept"] = "accept"
    content: str | None = None
    additional_contexts: tuple[str, ...] = ()


class Block(Decision):
    """``tools/post-execute``: withhold the result. The model receives an error result
    (code ``BLOCKED``) whose content is ``"Error: <feedback>"``."""

    kind: Literal["block"] = "block"
    feedback: str


class ApproveEdited(BaseModel):
    """What an approval service answers when the person approved the call **after editing
    its arguments**: the call runs with ``args`` (checked against the tool's schema again;
    invalid → ``INVALID_ARGS``), and ``ToolExecution.edited_from`` keeps the model's own
    arguments so the tool can tell the model what was changed."""

    # defer_build: validators are built on first use, not at import (start-up cost)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    args: dict[str, Any]


PreExecuteDecision = Allow | Deny | Ask
PostExecuteDecision = Accept | Block


# The public path (``agentloop_nb.Allow`` ...), as the package root's eager names report: reprs,
# docs and pickles name it whichever home loads them first.
for _cls in (Accept, Allow, Ask, Block, Deny):
    _cls.__module__ = "agentloop_nb"
del _cls
