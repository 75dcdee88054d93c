"""The App's supervisor: the owner of every background task (agent drivers).

Cells and callers never own driver tasks, so a cell that returns, raises or is re-run cannot
orphan or kill an agent; ``aclose()`` cancels and awaits whatever is still running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from .errors import UsageError

_log = logging.getLogger("agentloop_nb")


def require_running_loop(what: str) -> asyncio.AbstractEventLoop:
    """Return the running loop or raise a ``RuntimeError`` that says how to get one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise UsageError(
            f"{what} needs a running asyncio event loop: call it from async code "
            "(inside `asyncio.run(main())`) or from a Jupyter cell, whose kernel runs one"
        ) from None


class Supervisor:
    """Spawns tasks on the running loop, keeps strong references, reports crashes."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        try:
            loop = require_running_loop("starting an agent")
        except RuntimeError:
            coro.close()
            raise
        task = loop.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("background task %s crashed", task.get_name(), exc_info=task.exception())

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        return frozenset(self._tasks)

    async def aclose(self) -> None:
        """Cancel every task still running and wait for all of them."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
