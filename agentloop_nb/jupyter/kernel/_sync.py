"""Sync bridges: :func:`run_eagerly` (the magics' way to finish a coroutine that does not need
to wait) and :func:`run_sync` (the opt-in, ``nest_asyncio``-based blocking helper).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from ..fold import content_text


def run_eagerly(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run ``coro`` synchronously up to its first real suspension.

    Returns ``(True, result)`` when it finished without waiting (an exception it raised
    propagates), else ``(False, task)``: the rest of it runs as a task on the running loop.
    This is how a synchronous magic calls an ``async`` API whose common path never waits
    (``ctx.agents.resume`` without a ``setup``), with no nested event loop.
    """
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, asyncio.get_running_loop().create_task(_resume(coro, yielded))


async def _resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Any:
    """Drive a coroutine that already suspended on ``yielded``, the way a Task would."""
    while True:
        try:
            if isinstance(yielded, asyncio.Future):
                yielded._asyncio_future_blocking = False
                await asyncio.wait({yielded})  # completion, not its outcome: coro reads that
            else:  # a bare ``yield`` (``asyncio.sleep(0)``)
                await asyncio.sleep(0)
        except BaseException as exc:  # our task was cancelled: deliver it like a Task does
            if isinstance(yielded, asyncio.Future):
                yielded.cancel()
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value


def run_sync(agent: Any, prompt: str, *, timeout: float | None = None) -> str:
    """Send ``prompt`` as a follow-up, block until the agent is idle, return the text of its
    last assistant message.

    Opt-in convenience for synchronous code. Inside a running loop (a notebook cell) it
    **applies ``nest_asyncio`` to that loop**, lazily, on first use: that patches asyncio for the
    rest of the process and is why nothing else in ``agentloop_nb`` uses it; prefer
    ``agent.followup(prompt); await agent.when_idle()`` in a cell. With no running loop it uses
    ``asyncio.run``. Raises ``TimeoutError`` after ``timeout`` seconds (the agent is cancelled
    first).
    """

    async def go() -> str:
        agent.followup(prompt)
        try:
            await asyncio.wait_for(agent.when_idle(), timeout)
        except TimeoutError:
            agent.cancel("user")
            await agent.when_idle()
            raise
        return last_assistant_text(agent.session)

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(go())
    import nest_asyncio

    nest_asyncio.apply(loop)
    return loop.run_until_complete(go())


def last_assistant_text(session: Any) -> str:
    """The text of the session's last ``assistant/message`` ("" when there is none)."""
    for event in reversed(session.events):
        if event.type == "assistant/message":
            return content_text((event.data.get("message") or {}).get("content"))
    return ""


__all__ = ["last_assistant_text", "run_eagerly", "run_sync"]
