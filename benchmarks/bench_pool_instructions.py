"""Instructions per pooled tool call under callgrind, the steady figure on a shared machine.

Section (b)'s turn (parallel-safe calls in one assistant message, cap 10, no persistence) with
bodies that only yield (``anyio.sleep(0)``), run twice per tree under ``valgrind
--tool=callgrind``: turns of 100 then 100 calls, and of 100 then 300 calls, ``gc.collect()``
before each turn and ``gc.freeze()`` after the first (warm-up) one, as ``bench_pool_ab.py``
does, ``PYTHONHASHSEED=0``. The difference over 200 is the marginal
cost of one call, its share of the turn's stream and closing request included. Also printed:
the part outside the cyclic GC (``gcmodule.c``, ``*_traverse``, ``visit_*``), whose share moves
with where collections fall.

    .venv/bin/python benchmarks/bench_pool_instructions.py b5aa5a2 HEAD   # ~4 min a tree

A ref is a git ref or ``WORKTREE``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def probe(sizes: list[int]) -> None:
    """The workload (run inside callgrind): one turn per entry of ``sizes``."""
    import asyncio
    import gc

    import anyio

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_ab import ScriptReplay

    from agentloop_nb import testing
    from agentloop_nb.app import App
    from agentloop_nb.loop import AgentOptions
    from agentloop_nb.tools import tool

    @tool(concurrency_safe=True)
    async def sleepy(i: int) -> str:
        """Yield once."""
        await anyio.sleep(0)
        return "ok"

    scripts = {}
    for n in set(sizes):
        calls = [testing.tool_call(f"c{i}", "sleepy", {"i": i}) for i in range(n)]
        scripts[n] = [testing.combine(*calls), testing.text("done")]

    async def main() -> None:
        for k, n in enumerate(sizes):
            gc.collect()  # as bench_pool_ab.py before each run: each turn starts clean
            app = App({"max_parallel_tool_calls": 10})
            app.ctx.llm.register_adapter(["replay"], ScriptReplay(scripts[n]))
            app.ctx.tools.register(sleepy)
            agent = app.ctx.agent_loop.create("bench", AgentOptions(provider="replay", model="m"))
            agent.followup("go")
            await agent.when_idle()
            await app.aclose()
            if k == 0:
                gc.collect()
                gc.freeze()

    asyncio.run(main())


def _costs(out: Path) -> tuple[int, int]:
    """(total, cyclic GC) instructions of a callgrind output file."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    total = gc = 0
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)", line)
        if not m:
            continue
        value, name = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in name:
            total = value
        elif "gcmodule" in name or "_traverse" in name or "visit_" in name:
            gc += value
    return total, gc


def measure(tree: Path, tmp: Path, tag: str) -> tuple[float, float]:
    runs = {}
    for sizes in ("100,100", "100,300"):
        out = tmp / f"{tag}.{sizes}.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--probe",
                sizes,
            ],
            env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)},
            capture_output=True,
            check=True,
        )
        runs[sizes] = _costs(out)
    (t1, g1), (t2, g2) = runs["100,100"], runs["100,300"]
    return (t2 - t1) / 200, (t2 - t1 - (g2 - g1)) / 200


def export(ref: str, tmp: Path) -> Path:
    if ref == "WORKTREE":
        return ROOT
    target = tmp / ref.replace("/", "_")
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "agentloop_nb", "benchmarks"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("refs", nargs="*", help="git refs or WORKTREE")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe([int(n) for n in args.probe.split(",")])
        return
    tmp = Path(tempfile.mkdtemp(prefix="agentloop-pool-ir-"))
    for ref in args.refs or ["WORKTREE"]:
        per_call, outside = measure(export(ref, tmp), tmp, ref.replace("/", "_"))
        print(f"{ref:12} {per_call:,.0f} instructions per call, {outside:,.0f} outside the GC")


if __name__ == "__main__":
    main()
