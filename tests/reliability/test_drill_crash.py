"""Known-fault drill: ``kill -9`` while the model is streaming, several times, each followed
by a resume. Nothing the child acknowledged (a flushed turn) is lost, the resume repairs the
cut turn (``interrupted``), no tool call is left dangling, and the next turn completes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import anyio.to_thread
import pytest
from _drills import bounded, turn_ends
from _loop_helpers import OPTIONS, dangling_calls, make_app, run, scripted

from agentloop_nb.testing import text

pytestmark = pytest.mark.anyio

CRASHES = 3

CHILD = r"""
import asyncio, sys
from agentloop_nb import AgentOptions, App
from agentloop_nb.testing import text

class Streaming:
    '''Answers every request with a 400-character text, one chunk per character, and says
    "streaming" once a turn's answer is well under way (the parent kills it then).'''

    def __init__(self, say_at_turn):
        self.turn = 0
        self.say_at_turn = say_at_turn

    async def stream(self, options):
        self.turn += 1
        for i, chunk in enumerate(text("x" * 400)):
            if self.turn == self.say_at_turn and i == 50:
                print("streaming", flush=True)
            await asyncio.sleep(0.001)
            yield chunk

async def main(root, sid, say_at_turn):
    app = App(persistence_root=root)
    app.ctx.llm.register_adapter(["streaming"], Streaming(say_at_turn))
    handle = await app.ctx.agents.create(
        session_id=sid, agent_options=AgentOptions(provider="streaming", model="m")
    )
    agent = handle.agent
    while True:
        agent.followup("go")
        await agent.when_idle()
        await agent.session.flush()
        print("flushed", agent.session.durable_seq + 1, flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def crash_mid_stream(root: Path, sid: str, turn: int) -> tuple[int, int]:
    """Run the child until turn ``turn`` is streaming, then SIGKILL it; returns the events it
    acknowledged as durable and its pid."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), sid, str(turn)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    acknowledged = 0
    try:
        for line in proc.stdout:
            if line.startswith("flushed"):
                acknowledged = int(line.split()[1])
            elif line.startswith("streaming"):
                break
        else:
            raise AssertionError(f"the child ended before streaming (exit {proc.wait()})")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return acknowledged, proc.pid


async def test_kill_minus_nine_mid_stream_then_resume_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    rng = random.Random(27)
    async with bounded(seconds=90) as drill:
        for n in range(CRASHES):
            sid = f"crash-{n}"
            turn = rng.randint(1, 3)
            acknowledged, pid = await anyio.to_thread.run_sync(
                crash_mid_stream, tmp_path, sid, turn
            )
            drill.watch(pid)
            assert acknowledged > 0 or turn == 1
            app = make_app(persistence_root=tmp_path)
            model = scripted(app, text("resumed"))
            handle = await app.ctx.agents.resume(resume_session_id=sid, agent_options=OPTIONS)
            agent = handle.agent
            events = agent.session.events
            assert len(events) >= acknowledged, f"crash {n}: acknowledged events were lost"
            ends = turn_ends(agent)
            assert [e["kind"] for e in ends] == ["completed"] * (turn - 1) + ["interrupted"]
            await run(agent, "after the crash")
            assert dangling_calls(model.requests[0].messages) == []
            assert turn_ends(agent)[-1]["kind"] == "completed"
            await app.aclose()
