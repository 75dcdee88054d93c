"""Records ``tests/recordings/v2/``: session logs in the version-2 form (chunks coalesced, a
response's ``usage`` and ``finish`` chunks logged as streamed), written by agentloop_nb before
the log left out the chunks a message implies, and what that code derived from them (the model
messages after crash repair, the view state).

Kept to show how the fixtures were made; it only reproduces them with a version-2 writer
(run from a checkout before the version-3 log: ``PYTHONPATH=. python
tests/recordings/v2/make_v2_logs.py``). ``tests/test_session_log_v2.py`` loads them
(``tests/_log_state.py`` derives the state).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent))  # the tests' helpers

from _log_state import derived_state  # noqa: E402
from _loop_helpers import OPTIONS, make_app, run, scripted  # noqa: E402

from agentloop_nb.llm import (  # noqa: E402
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
from agentloop_nb.messages import ToolCallBlock  # noqa: E402
from agentloop_nb.session import JsonlPersistence  # noqa: E402
from agentloop_nb.testing import error, hang_after, text, tool_call  # noqa: E402
from agentloop_nb.tools import tool  # noqa: E402


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


async def _record(root: Path) -> None:
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
    handle = await app.ctx.agents.create(session_id="v2", agent_options=OPTIONS)
    agent = handle.agent
    await run(agent, "add 2 and 3")
    await run(agent, "add twice")
    agent.followup("say something long")
    # Cancel once the cut stream's text is logged (an event, not a sleep; the log holds its
    # open tool-call block until the response closes, at the cancel).
    seen = asyncio.Event()

    def on_event(payload: Any) -> None:
        data = payload.event.data
        if payload.event.type == "assistant/chunk" and data["chunk"]["type"] == "text-delta":
            seen.set()

    off = app.ctx.on("session/event", on_event)
    await asyncio.wait_for(seen.wait(), 5)
    off()
    agent.cancel("user")
    await asyncio.wait_for(agent.when_idle(), 5)
    await app.aclose()


def _crash_copy(source: Path, target: Path) -> None:
    """``target``: ``source`` cut right after the chunks of its last streamed step (as a
    crash mid-stream leaves it: no ``assistant/message``, the step and turn open)."""
    lines = source.read_text().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]
    last = max(i for i, r in enumerate(records) if r.get("type") == "assistant/chunk")
    kept = lines[: last + 1]
    target.write_text("".join(kept).replace('"id":"v2"', '"id":"v2-crash"', 1))


def main() -> None:
    work = HERE / "_work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    asyncio.run(_record(work))
    shutil.copy(work / "v2.jsonl", HERE / "v2.jsonl")
    _crash_copy(HERE / "v2.jsonl", HERE / "v2-crash.jsonl")
    shutil.rmtree(work)
    expected = {name: derived_state(HERE, name) for name in ("v2", "v2-crash")}
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
