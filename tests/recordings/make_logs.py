"""The script behind the recorded session logs of ``v1/`` and ``v2/``: two turns against a
scripted model (a retried failure, a tool call with text, reasoning and two tool calls, one
closed by a ``block-end`` carrying its block), then an answer cut by a cancel; the log cut
after its last chunk as a crash mid-stream leaves it; and what the code that wrote them derived
(``tests/_log_state.py``). Each version's ``make_v<n>_logs.py`` runs it with that version's
writer (a checkout of that time).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))  # the tests' helpers

from _log_state import derived_state
from _loop_helpers import OPTIONS, make_app, run, scripted

from agentloop_nb.llm import (
    BlockEnd,
    BlockStart,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCalls,
    Usage,
    UsageChunk,
)
from agentloop_nb.messages import ToolCallBlock
from agentloop_nb.session import JsonlPersistence
from agentloop_nb.testing import error, hang_after, text, tool_call
from agentloop_nb.tools import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _no_wait(_seconds: float) -> None:
    return None


def _reasoned_calls() -> list[Any]:
    """Reasoning, then two tool calls whose ids/names arrive in pieces, one closed by a
    ``block-end`` carrying its block."""
    return [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="I should "),
        ReasoningDelta(index=0, text="add twice."),
        BlockEnd(index=0),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=1, id="c2", name="add", arguments_delta='{"a": 1, '),
        ToolCallDelta(index=1, id="", arguments_delta='"b": 1}'),
        BlockEnd(index=1),
        ToolCallDelta(index=2, id="c3", name="add", arguments_delta='{"a": 2,'),
        BlockEnd(index=2, block=ToolCallBlock(id="c3", name="add", arguments='{"a": 2, "b": 2}')),
        UsageChunk(usage=Usage(input_tokens=12, output_tokens=9)),
        Finish(reason=ToolCalls()),
    ]


async def _record(root: Path, name: str, logged_cut: Callable[[Any], bool]) -> None:
    app = make_app(persistence=JsonlPersistence(root))
    app.ctx.retry.sleep = _no_wait
    app.ctx.tools.register(add)
    cut = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="I was say"),
        TextDelta(index=0, text="ing"),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=1, id="c9", name="add", arguments_delta='{"a"'),
    ]
    scripted(
        app,
        error("SERVER", "flaky"),
        tool_call("c1", "add", {"a": 2, "b": 3}, text="let me add"),
        text("2 + 3 = 5"),
        _reasoned_calls(),
        text("done twice"),
        hang_after(cut),
    )
    handle = await app.ctx.agents.create(session_id=name, agent_options=OPTIONS)
    agent = handle.agent
    await run(agent, "add 2 and 3")
    await run(agent, "add twice")
    agent.followup("say something long")
    # Cancel once ``logged_cut`` says the cut stream's chunk just logged is the one to wait
    # for (an event, not a sleep).
    seen = asyncio.Event()

    def on_event(payload: Any) -> None:
        if payload.event.type == "assistant/chunk" and logged_cut(payload.event.data["chunk"]):
            seen.set()

    off = app.ctx.on("session/event", on_event)
    await asyncio.wait_for(seen.wait(), 5)
    off()
    agent.cancel("user")
    await asyncio.wait_for(agent.when_idle(), 5)
    await app.aclose()


def _crash_copy(source: Path, target: Path, name: str) -> None:
    """``target``: ``source`` cut right after the chunks of its last streamed step (as a
    crash mid-stream leaves it: no ``assistant/message``, the step and turn open)."""
    lines = source.read_text().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    last = max(i for i, r in enumerate(records) if r.get("type") == "assistant/chunk")
    kept = lines[: last + 1]
    target.write_text("".join(kept).replace(f'"id":"{name}"', f'"id":"{name}-crash"', 1))


def make(here: Path, name: str, logged_cut: Callable[[Any], bool]) -> None:
    """Write ``here/<name>.jsonl``, ``here/<name>-crash.jsonl`` and ``here/expected.json``."""
    work = here / "_work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    asyncio.run(_record(work, name, logged_cut))
    shutil.copy(work / f"{name}.jsonl", here / f"{name}.jsonl")
    _crash_copy(here / f"{name}.jsonl", here / f"{name}-crash.jsonl", name)
    shutil.rmtree(work)
    expected = {n: derived_state(here, n) for n in (name, f"{name}-crash")}
    (here / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
