"""What every known-fault drill asserts, in one place: bounded time, bounded memory, no process
left behind, and nothing acknowledged lost; plus a prompt cancel.

``async with bounded(seconds=..., megabytes=...) as drill:`` fails the drill when it runs
longer than ``seconds`` (a hang), when Python allocations inside it peak above ``megabytes``
(tracemalloc: the code under test, not the interpreter's baseline), or when a process this test
started (a child, or a grandchild reparented away) is still alive at the end: register pids
that could escape the process tree with ``drill.watch(pid)``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from agentloop_nb.loop import Agent

#: The contract of a cancel: the agent is idle this many seconds after ``agent.cancel()``.
CANCEL_WITHIN = 2.0


def descendants(root: int | None = None) -> set[int]:
    """The live processes under ``root`` (default: this process), from ``/proc``."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":  # a zombie has exited
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Drill:
    seconds: float
    megabytes: float
    before: set[int]
    watched: set[int] = field(default_factory=set)
    elapsed: float = 0.0
    peak_mb: float = 0.0

    def watch(self, pid: int) -> None:
        """Fail the drill if ``pid`` is alive at its end (a process that left the tree)."""
        self.watched.add(pid)


@contextlib.asynccontextmanager
async def bounded(*, seconds: float, megabytes: float | None = 64.0) -> AsyncIterator[Drill]:
    """See the module docstring; ``megabytes=None`` traces no memory (tracemalloc slows
    allocation-heavy code, such as a subprocess SDK's, several times)."""
    drill = Drill(seconds, megabytes or 0.0, descendants())
    tracing = megabytes is not None and not tracemalloc.is_tracing()
    if tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    began = time.monotonic()
    try:
        with anyio.fail_after(seconds):
            yield drill
    finally:
        drill.elapsed = time.monotonic() - began
        drill.peak_mb = (tracemalloc.get_traced_memory()[1] - base) / 2**20
        if tracing:
            tracemalloc.stop()
        left = (descendants() - drill.before) | {pid for pid in drill.watched if alive(pid)}
        for pid in left:  # never leak them into later tests, whatever the verdict
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {sorted(left)}"
    assert megabytes is None or drill.peak_mb < megabytes, f"memory: {drill.peak_mb:.1f} MB"


async def cancel_promptly(agent: Agent) -> float:
    """Cancel the agent's turn; the seconds until it is idle (fails beyond the contract)."""
    began = time.monotonic()
    assert agent.cancel(), "the agent was not running"
    with anyio.fail_after(CANCEL_WITHIN):
        await agent.when_idle()
    return time.monotonic() - began


def turn_ends(agent: Agent) -> list[dict[str, Any]]:
    return [dict(e.data["reason"]) for e in agent.session.events if e.type == "turn/end"]


def stored_prefix_matches(agent: Agent, stored: list[Any]) -> None:
    """Every event the session acknowledged as durable is stored, byte for byte."""
    durable = agent.session.durable_seq
    kept = [e.to_json() for e in agent.session.events[: durable + 1]]
    assert [e.to_json() for e in stored[: durable + 1]] == kept, "an acknowledged event was lost"
