"""Scale benchmarks: many agents in one process, long histories, memory of a loaded session.
Prints tables; asserts nothing.

    .venv/bin/python benchmarks/bench_scale.py            # every section (a few minutes)
    .venv/bin/python benchmarks/bench_scale.py --quick    # smoke run
    .venv/bin/python benchmarks/bench_scale.py agents     # chosen sections: agents history memory

Sections:
  agents   (a) 100 and 1,000 agents x 20 tool steps concurrently (zero-latency scripted model,
               JSONL on): per-step cost vs one agent alone (interleaved rounds), peak RSS
  history  (b) per-step cost of 20 tool steps on a fresh session vs on a resumed session of
               100k events (the loop must be flat in history)
  memory   (c) memory of a loaded 100k-event session vs its JSONL size, and the CPU time of
               loading it; a log whose steps repeat their texts and tool results, and one
               whose steps all differ

Per-step cost = wall time of the run / (agents x steps). The CPU column counts every thread
(the JSONL writer included).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import resource
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_loop import noop, table, write_session

from agentloop_nb.app import App
from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm._chunks import StreamChunk
from agentloop_nb.loop import AgentOptions
from agentloop_nb.session import JsonlPersistence, SessionStore
from agentloop_nb.testing import text, tool_call

OPTIONS = AgentOptions(provider="steps", model="bench")
STEPS = 20
_IDS = itertools.count()  # call ids unique across Apps: rounds append to one session


class Steps:
    """A zero-latency adapter: each agent gets ``steps`` tool-call responses, then an answer
    (decided from the request's own history, so concurrent agents never share a script).
    Call ids are unique per response (a resumed session never sees an id reused)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.answer = text("done")

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        since = _since_last_user(options.messages)
        done = since >= self.steps
        response = self.answer if done else tool_call(f"s{next(_IDS)}", "noop", {})
        for chunk in response:
            yield chunk


def _since_last_user(messages: Sequence[Any]) -> int:
    """Tool results after the last user message: the steps this turn already ran."""
    n = 0
    for m in reversed(messages):
        if m.role == "user":
            break
        if m.role == "tool":
            n += 1
    return n


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # Linux: kilobytes


async def run_agents(n: int, root: Path, steps: int = STEPS) -> tuple[float, float]:
    """Wall and CPU seconds for ``n`` agents each running one turn of ``steps`` tool steps
    concurrently in one App (JSONL on); building the App and agents is not timed."""
    app = App(persistence_root=root)
    app.ctx.llm.register_adapter(["steps"], Steps(steps))
    app.ctx.tools.register(noop)
    agents = [app.ctx.agent_loop.create(f"a{i}", OPTIONS) for i in range(n)]
    gc.collect()
    cpu, start = time.process_time(), time.perf_counter()
    for agent in agents:
        agent.followup("go")
    await asyncio.gather(*(agent.when_idle() for agent in agents))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    for agent in agents:
        ends = [e for e in agent.session.events if e.type == "step/end"]
        assert len(ends) == steps + 1, (agent.id, len(ends))
    await app.aclose()
    return wall, cpu


async def bench_agents(counts: Sequence[int], rounds: int, tmp: Path) -> str:
    rows = []
    for n in counts:
        alone: list[float] = []
        many: list[float] = []
        many_cpu: list[float] = []
        for r in range(rounds):  # interleaved: one agent alone, then n agents, each round
            wall, _ = await run_agents(1, tmp / f"one-{n}-{r}")
            alone.append(wall / STEPS)
            wall, cpu = await run_agents(n, tmp / f"many-{n}-{r}")
            many.append(wall / (n * STEPS))
            many_cpu.append(cpu / (n * STEPS))
            shutil.rmtree(tmp / f"many-{n}-{r}", ignore_errors=True)
        one, per = statistics.median(alone), statistics.median(many)
        rows.append(
            [
                f"{n:,} agents x {STEPS} steps",
                one * 1000,
                per * 1000,
                f"{per / one:.2f}x",
                statistics.median(many_cpu) * 1000,
                peak_rss_mb(),
            ]
        )
    return table(
        f"(a) many agents, JSONL on (median of {rounds} interleaved rounds; goal: per step "
        "<= 1.5x one agent alone)",
        ["run", "ms/step alone", "ms/step concurrent", "ratio", "cpu ms/step", "peak RSS MB"],
        rows,
    )


async def steps_on(app: App, agent: Any) -> float:
    """Seconds per step of a second turn of ``STEPS`` tool steps (the first turn warms the
    agent up: a resumed session's one-time costs are not per-step costs)."""
    agent.followup("warm up")
    await agent.when_idle()
    gc.collect()
    start = time.perf_counter()
    agent.followup("go on")
    await agent.when_idle()
    return (time.perf_counter() - start) / STEPS


async def bench_history(target: int, rounds: int, tmp: Path) -> str:
    root = tmp / "hist"
    sid, count = await write_session(root, target)
    fresh: list[float] = []
    long: list[float] = []
    for _ in range(rounds):
        app = App(persistence_root=root)
        app.ctx.llm.register_adapter(["steps"], Steps(STEPS))
        app.ctx.tools.register(noop)
        agent = app.ctx.agent_loop.create("fresh", OPTIONS)
        fresh.append(await steps_on(app, agent))
        handle = await app.ctx.agents.resume(resume_session_id=sid)
        resumed = handle.agent
        resumed.options = OPTIONS
        long.append(await steps_on(app, resumed))
        await handle.dispose()
        await app.aclose()
    a, b = statistics.median(fresh), statistics.median(long)
    return table(
        f"(b) per-step cost vs history (median of {rounds} interleaved rounds; goal: flat)",
        ["session", "events before", "ms/step", "/ fresh"],
        [["fresh", 0, a * 1000, "1.00x"], ["resumed", count, b * 1000, f"{b / a:.2f}x"]],
    )


async def bench_memory(target: int, tmp: Path, reps: int = 5) -> str:
    rows = []
    for distinct in (False, True):
        root = tmp / f"mem-{distinct}"
        sid, count = await write_session(root, target, distinct=distinct)
        size = (root / f"{sid}.jsonl").stat().st_size
        gc.collect()
        before_rss = rss_mb()
        loaded = _load(root, sid)  # RSS first: tracemalloc's own bookkeeping inflates RSS
        gc.collect()
        after_rss = rss_mb()
        del loaded
        gc.collect()
        tracemalloc.start()
        loaded = _load(root, sid)
        gc.collect()
        heap, _peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del loaded
        cpu: list[float] = []
        for _ in range(reps):
            gc.collect()
            start = time.process_time()
            loaded = _load(root, sid)
            cpu.append(time.process_time() - start)
            del loaded
        rows.append(
            [
                "distinct steps" if distinct else "repeating steps",
                count,
                size / 1e6,
                heap / 1e6,
                f"{heap / size:.2f}x",
                after_rss - before_rss,
                statistics.median(cpu) * 1000,
            ]
        )
    return table(
        "(c) memory of a loaded session (load + prepare + derive; goal: heap <= 3x the JSONL "
        f"size; CPU: median of {reps})",
        ["log", "events", "JSONL MB", "heap MB", "heap / file", "RSS growth MB", "CPU ms"],
        rows,
    )


def _load(root: Path, sid: str) -> Any:
    """A session as a resume holds it: loaded, prepared, its messages derived."""
    header, events = JsonlPersistence(root).load(sid)
    session = SessionStore(None).prepare(header=header, events=events)
    return session, session.derive_messages()


SECTIONS = ("agents", "history", "memory")


async def main(args: argparse.Namespace) -> None:
    chosen = args.sections or list(SECTIONS)
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s) {sorted(unknown)}: choose from {SECTIONS}")
    quick = args.quick
    tmp = Path(tempfile.mkdtemp(prefix="agentloop-scale-"))
    try:
        if "agents" in chosen:
            await bench_agents([10, 50] if quick else [100, 1000], 1 if quick else 3, tmp)
        if "history" in chosen:
            await bench_history(5_000 if quick else 100_000, 1 if quick else 3, tmp)
        if "memory" in chosen:
            await bench_memory(5_000 if quick else 100_000, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sections", nargs="*", help=f"any of {', '.join(SECTIONS)}")
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args()))
