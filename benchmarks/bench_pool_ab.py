"""Two versions of agentloop_nb side by side in ONE process on section (b)'s workload (1,000
parallel-safe 10 ms tool calls in one assistant message, cap 10) and a bare anyio semaphore
pool, interleaved; prints wall and the pool's span (first ``tool/call`` to last
``tool/result``) against the bare pool, and CPU per call of the event-loop thread alone
(``time.thread_time``) and of the process (the JSONL writer included).

    .venv/bin/python benchmarks/bench_pool_ab.py 9b11efc HEAD              # 5 rounds, off+on
    .venv/bin/python benchmarks/bench_pool_ab.py 9b11efc WORKTREE --reps 7 --modes off

Versions are exported as renamed packages by ``bench_ab.export``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ab import ScriptReplay, export

CAP, BODY = 10, 0.01


class Version:
    def __init__(self, name: str, calls: int) -> None:
        package = f"agentloop_nb_{name}"
        self.calls = calls
        self.app_class = importlib.import_module(package + ".app").App
        self.options = importlib.import_module(package + ".loop").AgentOptions
        testing = importlib.import_module(package + ".testing")
        tool = importlib.import_module(package + ".tools").tool
        calls_ = [testing.tool_call(f"c{i}", "sleepy", {"i": i}) for i in range(calls)]
        self.script = [testing.combine(*calls_), testing.text("done")]

        @tool(concurrency_safe=True)
        async def sleepy(i: int) -> str:
            """Sleep 10 ms."""
            await anyio.sleep(BODY)
            return "ok"

        self.tool = sleepy

    async def run(self, root: Path | None) -> tuple[float, float, float, float]:
        config = {"max_parallel_tool_calls": CAP}
        app = self.app_class(config, persistence_root=root) if root else self.app_class(config)
        app.ctx.llm.register_adapter(["replay"], ScriptReplay(self.script))
        app.ctx.tools.register(self.tool)
        agent = app.ctx.agent_loop.create("bench", self.options(provider="replay", model="m"))
        gc.collect()
        wall0, loop0, proc0 = time.perf_counter(), time.thread_time(), time.process_time()
        agent.followup("go")
        await agent.when_idle()
        wall = time.perf_counter() - wall0
        loop_cpu, proc_cpu = time.thread_time() - loop0, time.process_time() - proc0
        events = agent.session.events
        first = next(e.time for e in events if e.type == "tool/call")
        last = max(e.time for e in events if e.type == "tool/result")
        await app.aclose()
        return wall, last - first, loop_cpu, proc_cpu


async def bare(calls: int) -> tuple[float, float, float, float]:
    sem = anyio.Semaphore(CAP)

    async def one() -> None:
        async with sem:
            await anyio.sleep(BODY)

    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    async with anyio.create_task_group() as tg:
        for _ in range(calls):
            tg.start_soon(one)
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    return wall, wall, cpu, cpu


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="agentloop-pool-ab-"))
    sys.path.insert(0, str(tmp))
    versions = []
    for name, ref in zip("ab", args.refs, strict=False):
        export(ref, name, tmp)
        versions.append((f"{name}:{ref}", Version(name, args.calls)))
    for _, v in versions:  # warm-up
        await v.run(None)
    gc.collect()
    gc.freeze()
    samples: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    k = 0
    for rep in range(args.reps):
        for label, v in versions if rep % 2 == 0 else versions[::-1]:
            for mode in args.modes.split(","):
                k += 1
                root = tmp / f"r{k}" if mode == "on" else None
                samples.setdefault((label, mode), []).append(await v.run(root))
        samples.setdefault(("bare anyio pool", ""), []).append(await bare(args.calls))
    base = statistics.median(s[0] for s in samples[("bare anyio pool", "")])
    print(
        f"load average {os.getloadavg()[0]:.2f}, {args.calls} calls, median of {args.reps}, "
        f"bare wall {base:.3f} s"
    )
    for (label, mode), values in samples.items():
        wall, span, loop_cpu, proc_cpu = (statistics.median(s[i] for s in values) for i in range(4))
        print(
            f"  {label:18} {mode:3} wall {wall:.3f} s ({wall / base:.3f}x bare)  span {span:.3f} s "
            f"({span / base:.3f}x)  loop cpu {loop_cpu * 1e6 / args.calls:5.0f}  "
            f"process cpu {proc_cpu * 1e6 / args.calls:5.0f} us/call"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("refs", nargs=2, help="two git refs (or WORKTREE)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--modes", default="off,on", help="off (no persistence), on (JSONL)")
    asyncio.run(main(parser.parse_args()))
