"""The driver: turns and steps (SPEC §4.4, §4.6). This module only orchestrates; the pieces it
calls (inbox, scheduler, stream assembly, services) live elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ..hooks import (
    Enter,
    ErrorPayload,
    PreStepPayload,
    Reject,
    TurnStoppingPayload,
)
from ..signals import AbortController
from ._guard import TurnAborted, interruptible
from ._scheduler import run_tool_calls

if TYPE_CHECKING:
    from ..messages import UserMessage
    from ._agent import Agent


@dataclass(slots=True)
class _Turn:
    turn: int
    step: int = 0
    step_open: bool = False
    max_tokens: bool = False
    end: str = "completed"
    detail: str | None = None  # a Reject's reason


async def drive(agent: Agent) -> None:
    """Run turns while there is work; then flip the agent to idle. Owned by the App supervisor."""
    try:
        with agent._loop._initiator(agent):
            allow_queue = True
            while True:
                if agent._controller.signal.aborted:
                    # A cancel governs exactly one turn: the one it hit, or (when it landed
                    # between turns, even before the first) the one about to start. Queued
                    # input then waits; only a waking send latched after the abort runs now.
                    agent._controller = AbortController()
                    allow_queue = False
                if agent._disposed or not (
                    agent._wake or (allow_queue and agent.inbox._lists["next-turn"])
                ):
                    break
                agent._wake = False
                reason = await run_turn(agent)
                if reason["kind"] == "disposed":
                    break
                allow_queue = reason["kind"] in ("completed", "max-tokens")
    finally:
        agent._task = None
        agent._set_status("idle")


async def run_turn(agent: Agent) -> dict[str, Any]:
    """One turn, errors contained: returns the logged ``turn/end`` reason."""
    session = agent.session
    agent._turn += 1
    t = _Turn(agent._turn)
    signal = agent._controller.signal
    session.append("turn/start", {"turn": t.turn})
    reason: dict[str, Any]
    try:
        if signal.aborted:
            raise TurnAborted
        await _run_steps(agent, t)
        reason = {"kind": "max-tokens" if t.max_tokens else t.end}
        if t.detail is not None:
            reason["reason"] = t.detail
    except TurnAborted:
        reason = _abort_reason(signal.reason)
    except anyio.get_cancelled_exc_class():
        # The supervisor is tearing the driver down (App.aclose): close the log, then obey.
        _close(agent, t, {"kind": "disposed"})  # synchronous: nothing to shield
        raise
    except Exception as exc:
        if signal.aborted:
            reason = _abort_reason(signal.reason)
        else:
            reason = {
                "kind": "error",
                "message": str(exc) or type(exc).__name__,
                "code": getattr(exc, "code", "UNKNOWN"),
            }
            agent._emit("agent/error", ErrorPayload(agent, t.turn, t.step, exc))
    with anyio.CancelScope(shield=True):
        _close(agent, t, reason)
        await session.flush()
    return reason


def _close(agent: Agent, t: _Turn, reason: dict[str, Any]) -> None:
    if t.step_open:
        agent.session.append("step/end", {"turn": t.turn, "step": t.step})
        t.step_open = False
    agent.session.append("turn/end", {"turn": t.turn, "reason": reason})


def _abort_reason(cause: Any) -> dict[str, Any]:
    cause = dict(cause) if isinstance(cause, dict) else {"kind": "user"}
    if cause.get("kind") == "disposed":
        return {"kind": "disposed"}
    return {"kind": "aborted", "cause": cause}


async def _run_steps(agent: Agent, t: _Turn) -> None:
    ctx = agent.ctx
    inbox = agent.inbox
    signal = agent._controller.signal
    while True:
        if signal.aborted:
            raise TurnAborted
        claimed = inbox._claim("next-step", len(inbox._lists["next-step"]), t.turn)
        if t.step == 0:
            claimed += inbox._claim("next-turn", 1, t.turn)
        agent._wake = False  # this claim serves every waking send so far: no empty extra turn
        step = t.step + 1
        if ctx.has_listeners("system-prompt/assemble"):
            assembly = await interruptible(signal, ctx.system_prompt.assemble(agent))
        else:  # nothing can rewrite it: skip the waterfall and its cancel scope
            assembly = ctx.system_prompt.collect(agent)
        entered = await _pre_step(agent, tuple(claimed), t.turn, step)
        if isinstance(entered, Reject):
            t.end, t.detail = "rejected", entered.reason
            return
        if step == 1 and not entered:
            return  # nothing to say: the turn completes without a step
        t.step = step
        agent.session.append("step/start", {"turn": t.turn, "step": step})
        t.step_open = True
        for m in entered:
            agent.session.append("user/message", {"message": m.model_dump(mode="json")})
        had_tools = await _run_step(agent, t, assembly)
        agent.session.append("step/end", {"turn": t.turn, "step": step})
        t.step_open = False
        if had_tools or inbox._lists["next-step"]:
            continue
        if ctx.has_listeners("agent/turn-stopping"):
            await interruptible(
                signal,
                ctx.serial("agent/turn-stopping", TurnStoppingPayload(agent, t.turn, signal)),
            )
        if not inbox._lists["next-step"]:
            return


async def _pre_step(
    agent: Agent, claimed: tuple[UserMessage, ...], turn: int, step: int
) -> tuple[UserMessage, ...] | Reject:
    ctx = agent.ctx
    if not ctx.has_listeners("agent/pre-step"):
        return claimed
    signal = agent._controller.signal
    decision = await interruptible(
        signal,
        ctx.waterfall(
            "agent/pre-step",
            PreStepPayload(agent, claimed, turn, step, signal),
            lambda: Enter(messages=claimed),
        ),
    )
    if isinstance(decision, Reject):
        return decision
    if not isinstance(decision, Enter):
        raise TypeError(
            f"an agent/pre-step listener returned {decision!r}; return Enter(messages) or Reject()"
        )
    return decision.messages


async def _run_step(agent: Agent, t: _Turn, assembly: Any) -> bool:
    """One model call plus its tool calls; returns whether tools ran (the turn continues)."""
    session = agent.session
    signal = agent._controller.signal
    turn, step = t.turn, t.step
    reply = await agent._requests.request(turn, step, assembly, signal)
    asm, kind, seqs = reply.assembler, reply.kind, reply.chunk_seqs
    interrupted = kind == "aborted" or kind is None
    message = asm.message(interrupted=interrupted)
    data: dict[str, Any] = {"turn": turn, "step": step, "message": message.model_dump(mode="json")}
    if asm.usage is not None:
        data["usage"] = asm.usage.model_dump(exclude_none=True)
    if interrupted:
        data["interrupted"] = True
    session.append("assistant/message", data, source_event_seqs=seqs)
    if kind == "max-tokens":
        t.max_tokens = True
    calls = message.tool_calls
    if calls:
        results = await run_tool_calls(agent, calls, turn, step, signal)
        for call, result in zip(calls, results, strict=True):
            for extra in result.additional_contexts:
                agent.inbox._insert("next-step", _context_message(extra, call.id, call.name))
    if interrupted or signal.aborted:
        raise TurnAborted
    return bool(calls)


def _context_message(extra: Any, call_id: str, name: str) -> UserMessage:
    from ._inbox import make_user_message

    return make_user_message(extra, {"kind": "tool-context", "call_id": call_id, "tool": name})
