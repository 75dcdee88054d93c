"""Crash durability: ``kill -9`` a process mid-turn, resume its session, count what was lost.

    .venv/bin/python benchmarks/bench_crash.py            # 50 crashes (about a minute)
    .venv/bin/python benchmarks/bench_crash.py --runs 200

Each run starts a child process that drives one agent (JSONL persistence, a zero-latency
scripted model asking for tool calls in a loop) and prints, after every turn, how many events the
flush barrier has made durable. The parent kills the child with SIGKILL at a random moment,
then resumes the session in its own App and checks:

- **lost**: fewer events on disk than the child last reported as flushed (must be 0);
- **resume failures**: ``ctx.agents.resume`` raised (must be 0);
- **dangling calls**: a ``tool/call`` without a ``tool/result`` after crash repair (must be 0);
- **next turn**: the resumed agent completes a new turn.

Asserts nothing: it prints one table (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentloop_nb import AgentOptions, App, tool
from agentloop_nb.testing import ScriptedModel, text, tool_call

CHILD = r"""
import asyncio, sys
from agentloop_nb import AgentOptions, App, tool
from agentloop_nb.testing import ScriptedModel, text, tool_call

@tool(concurrency_safe=True)
async def step(n: int) -> str:
    '''Return n.'''
    await asyncio.sleep(0)
    return str(n)

async def main(root: str, sid: str) -> None:
    app = App(persistence_root=root)
    app.ctx.tools.register(step)
    script = []
    for turn in range(10_000):
        script += [tool_call(f"c{turn}", "step", {"n": turn}), text(f"turn {turn} done")]
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel(script))
    handle = await app.ctx.agents.create(
        session_id=sid, agent_options=AgentOptions(provider="scripted", model="m")
    )
    agent = handle.agent
    print("ready", flush=True)
    while True:
        agent.followup("go")
        await agent.when_idle()
        print("flushed", len(agent.session.events), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@tool(concurrency_safe=True)
async def step(n: int) -> str:
    """Return n."""
    return str(n)


def crash_once(root: Path, sid: str, rng: random.Random) -> int:
    """Start the child, kill it with SIGKILL mid-run; return the last flushed count it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), sid],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    flushed = 0
    line = proc.stdout.readline()  # "ready": the session exists on disk
    if not line.startswith("ready"):
        proc.kill()
        raise RuntimeError(f"child did not start: {line!r}")
    deadline = time.monotonic() + rng.uniform(0.05, 0.6)
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("flushed"):
            flushed = int(line.split()[1])
    proc.send_signal(signal.SIGKILL)
    for line in proc.stdout:  # lines already in the pipe were printed before the kill
        if line.startswith("flushed"):
            flushed = int(line.split()[1])
    proc.wait()
    return flushed


async def check(root: Path, sid: str, flushed: int) -> dict[str, int]:
    app = App(persistence_root=str(root))
    app.ctx.tools.register(step)
    # A follow-up the child queued just before the kill is still pending after resume (the inbox
    # is rebuilt from the log), so the resumed agent may run two turns: script enough for both.
    script = []
    for i in range(4):
        script += [tool_call(f"r{i}", "step", {"n": i}), text("resumed")]
    app.ctx.llm.register_adapter(["scripted"], ScriptedModel(script))
    out = {"lost": 0, "resume_failures": 0, "dangling": 0, "next_turn_failures": 0}
    try:
        handle = await app.ctx.agents.resume(
            resume_session_id=sid, agent_options=AgentOptions(provider="scripted", model="m")
        )
    except Exception:
        out["resume_failures"] = 1
        await app.aclose()
        return out
    agent = handle.agent
    events = list(agent.session.events)
    resumed_at = len(events)
    if len(events) < flushed:
        out["lost"] = flushed - len(events)
    calls = {e.data["call_id"] for e in events if e.type == "tool/call"}
    results = {e.data["call_id"] for e in events if e.type == "tool/result"}
    out["dangling"] = len(calls - results)
    agent.followup("after the crash")
    await asyncio.wait_for(agent.when_idle(), 30)
    for end in (e for e in agent.session.events[resumed_at:] if e.type == "turn/end"):
        if end.data["reason"]["kind"] != "completed":
            out["next_turn_failures"] = 1
            print(f"  {sid}: a turn after the resume ended {dict(end.data['reason'])}")
    await app.aclose()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    totals = {"lost": 0, "resume_failures": 0, "dangling": 0, "next_turn_failures": 0}
    flushed_total = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(args.runs):
            sid = f"crash-{i}"
            flushed = crash_once(root, sid, rng)
            flushed_total += flushed
            for key, value in asyncio.run(check(root, sid, flushed)).items():
                totals[key] += value
    elapsed = time.perf_counter() - started
    print(f"kill -9 crashes: {args.runs} ({elapsed:.1f} s, pid {os.getpid()})")
    print(
        "| crashes | flushed events checked | lost | resume failures | dangling calls | "
        "failed next turns |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {args.runs} | {flushed_total} | {totals['lost']} | {totals['resume_failures']} | "
        f"{totals['dangling']} | {totals['next_turn_failures']} |"
    )


if __name__ == "__main__":
    main()
