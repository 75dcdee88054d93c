"""Two versions of agentloop_nb side by side in ONE process: per-step cost of the loop section's
workload (one turn, N tool steps, a zero-latency model, JSONL on and off).

    .venv/bin/python benchmarks/bench_ab.py 8c89743 HEAD        # wave 1 against this tree
    .venv/bin/python benchmarks/bench_ab.py 8c89743 WORKTREE    # ... against uncommitted work
    .venv/bin/python benchmarks/bench_ab.py 8c89743 HEAD --instructions   # + callgrind counts

Each ref's ``agentloop_nb/`` is exported (``git archive``) into a temporary directory under a
renamed package (``agentloop_nb_a``, ``agentloop_nb_b``), so both import side by side; runs
alternate A B B A ... and each reports the median and minimum process CPU time per step.
Alternating in one process cancels most of what a shared machine adds (frequency, caches,
other tenants), which separate processes measured minutes apart do not.

``--instructions`` also counts instructions per step under valgrind's callgrind, JSONL on and
off (needs ``valgrind``; deterministic, so it shows differences of 1-2 % that timings on a
loaded machine cannot): the count of 5 runs minus the count of 1 run, divided by 4 x N.
``--frozen-heap`` counts with the warm-up heap frozen, as ``bench_loop.py`` times a step.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def export(ref: str, name: str, into: Path) -> None:
    """Write ``ref``'s package (``WORKTREE``: the working tree) as ``agentloop_nb_<name>``."""
    target = into / f"agentloop_nb_{name}"
    if ref == "WORKTREE":
        shutil.copytree(ROOT / "agentloop_nb", target, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        blob = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "agentloop_nb"],
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            tar.extractall(into / "_x", filter="data")
        (into / "_x" / "agentloop_nb").rename(target)
    pattern = re.compile(r"\bagentloop_nb\b")
    for path in target.rglob("*.py"):
        path.write_text(pattern.sub(f"agentloop_nb_{name}", path.read_text()))


class ScriptReplay:
    """A zero-latency adapter of any version: the i-th request streams ``script[i]`` (chunks
    built with that version's classes). Shared with ``bench_pool_ab.py``."""

    def __init__(self, script: Any) -> None:
        self.script = script
        self.i = 0

    async def stream(self, options: Any) -> Any:
        chunks = self.script[self.i]
        self.i += 1
        for chunk in chunks:
            yield chunk


class Version:
    """One exported package: builds an app with a replaying adapter and the ``noop`` tool."""

    def __init__(self, name: str, steps: int) -> None:
        package = f"agentloop_nb_{name}"
        self.name = name
        self.steps = steps
        self.app_class = importlib.import_module(package + ".app").App
        self.options = importlib.import_module(package + ".loop").AgentOptions
        testing = importlib.import_module(package + ".testing")
        tool = importlib.import_module(package + ".tools").tool
        self.script = [testing.tool_call(f"c{i}", "noop", {}) for i in range(steps)]
        self.script.append(testing.text("done"))

        @tool
        async def noop() -> str:
            """Do nothing."""
            return "ok"

        self.noop = noop

    def build(self, root: Path | None) -> tuple[Any, Any]:
        app = self.app_class(None, persistence_root=root) if root else self.app_class(None)
        app.ctx.llm.register_adapter(["replay"], ScriptReplay(self.script))
        app.ctx.tools.register(self.noop)
        agent = app.ctx.agent_loop.create("bench", self.options(provider="replay", model="m"))
        return app, agent

    async def run(self, root: Path | None) -> float:
        """CPU microseconds per step of one turn (the JSONL writer thread included)."""
        app, agent = self.build(root)
        gc.collect()
        start = time.process_time()
        agent.followup("go")
        await agent.when_idle()
        used = time.process_time() - start
        assert agent.session.events[-1].data["reason"] == {"kind": "completed"}
        await app.aclose()
        return used * 1e6 / self.steps


async def compare(names: list[str], steps: int, reps: int, tmp: Path) -> None:
    versions = [Version(n, steps) for n in names]
    samples: dict[tuple[str, str], list[float]] = {(v.name, m): [] for v in versions for m in "01"}
    for v in versions:  # warm-up: imports, caches, first calls
        await v.run(tmp / f"warm-{v.name}")
        await v.run(None)
    gc.collect()
    gc.freeze()
    k = 0
    for rep in range(reps):
        for v in versions if rep % 2 == 0 else versions[::-1]:
            k += 1
            samples[(v.name, "1")].append(await v.run(tmp / f"r{k}"))
            samples[(v.name, "0")].append(await v.run(None))
    print(f"\nper-step CPU, {steps} steps, {reps} alternating runs (µs/step: median, min)")
    for mode, label in (("1", "JSONL on"), ("0", "no persistence")):
        first = None
        for v in versions:
            values = samples[(v.name, mode)]
            median = statistics.median(values)
            first = first or median
            print(
                f"  {label:15} {v.name}: {median:7.1f} {min(values):7.1f}   "
                f"({median / first:.2f}x {versions[0].name})"
            )


def instructions(tmp: Path, name: str, steps: int, jsonl: bool, frozen: bool = False) -> int:
    """Instructions per step of version ``name`` under callgrind, JSONL on or off (all threads:
    the JSONL writer's work counts). ``PYTHONHASHSEED=0`` makes repeated counts identical.

    Each counted turn builds its App and starts with a full ``gc.collect()``. With ``frozen``
    the heap the two warm-up turns leave (the imported package, its dependencies) is frozen
    first (``gc.freeze()``, as ``bench_loop.py`` does before it times), so that collection
    walks only what the turns made; without it, each turn also pays one walk of that heap
    (about 75 k instructions a step at 200 steps), the figure earlier sessions recorded."""

    def count(runs: int) -> int:
        code = (
            "import asyncio, gc, sys, tempfile; from pathlib import Path\n"
            "sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); import bench_ab as b\n"
            "v = b.Version(sys.argv[3], int(sys.argv[4]))\n"
            "def root(): return Path(tempfile.mkdtemp()) if sys.argv[6] == '1' else None\n"
            "async def main():\n"
            "    for _ in range(2): await v.run(root())\n"
            "    if sys.argv[7] == '1': gc.collect(); gc.freeze()\n"
            "    for _ in range(int(sys.argv[5])): await v.run(root())\n"
            "asyncio.run(main())\n"
        )
        valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        here = str(Path(__file__).parent)
        argv = [tmp, here, name, steps, runs, int(jsonl), int(frozen)]
        done = subprocess.run(
            [*valgrind, sys.executable, "-c", code, *map(str, argv)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        found = re.search(r"Collected : (\d+)", done.stderr)
        assert found, done.stderr[-2000:]
        return int(found.group(1))

    return (count(5) - count(1)) // (4 * steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", help="git ref of version A (or WORKTREE)")
    parser.add_argument("b", help="git ref of version B (or WORKTREE)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--instructions", action="store_true", help="also count (callgrind)")
    parser.add_argument(
        "--frozen-heap",
        action="store_true",
        help="count with the warm-up heap frozen, as bench_loop.py times (see instructions())",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        export(args.a, "a", tmp)
        export(args.b, "b", tmp)
        sys.path.insert(0, str(tmp))
        print(f"A = {args.a}, B = {args.b}")
        asyncio.run(compare(["a", "b"], args.steps, args.reps, tmp / "logs"))
        if args.instructions:
            heap = ", warm-up heap frozen" if args.frozen_heap else ""
            print(f"\ninstructions per step (callgrind{heap})")
            for jsonl, label in ((True, "JSONL on"), (False, "no persistence")):
                counts = {
                    n: instructions(tmp, n, args.steps, jsonl, args.frozen_heap) for n in ("a", "b")
                }
                for n, c in counts.items():
                    print(f"  {label:15} {n}: {c:,}   ({c / counts['a']:.3f}x a)")


if __name__ == "__main__":
    main()
