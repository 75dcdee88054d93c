"""What the kernel's memory (provenance + autopsy bookkeeping) adds to a cell's run time.

The budget (issue "Fix with agent, undo and why"): a cell's run time grows by at most 1 ms.
Measured in-process on an IPython ``InteractiveShell`` with ``run_cell`` (the same
``pre_run_cell`` / ``post_run_cell`` events a kernel fires), with and without the
``KernelMemory`` hooks installed, interleaved round by round (ABAB...) so both see the same
machine load. The namespace holds 1,000 user variables (one of them a secret, so masking
runs), and three cells are timed:

- ``small``: ``x = x + 1`` (re-run, so its analysis is cached after the first run);
- ``typical``: a 12-line cell binding 6 names, calling methods, a loop — a fresh source every
  run (the analysis is never cached: the worst case);
- ``failing``: a cell raising ``KeyError`` from a function with 3 locals (the autopsy is built).

Two figures per cell: the median ``run_cell`` time without / with the hooks (a difference of
two noisy numbers on a shared machine), and the median time spent inside the two hooks
themselves (timed around the calls IPython makes): the direct measure of what is added.

Run: ``.venv/bin/python benchmarks/bench_kernel_memory.py`` (~30 s). Nothing is asserted.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from agentloop_nb.jupyter.kernel import KernelMemory

ROUNDS = 15
PER_ROUND = 100


def _typical(i: int) -> str:
    return "\n".join(
        [
            f"rows_{i % 50} = list(range({i % 7} + 20))",
            "total = sum(rows_0) if 'rows_0' in globals() else 0",
            "names = [f'n{k}' for k in range(10)]",
            "names.append('extra')",
            "lookup = {n: len(n) for n in names}",
            "lookup.update(z=1)",
            "for k in range(3):",
            "    total += k",
            "def helper(v):",
            "    return v * 2",
            f"result = helper(total) + {i}",
            "del k",
        ]
    )


FAILING = "def pick(table, key, fallback=None):\n    return table[key]\npick({'alpha': 1}, 'alpa')"


def _time(shell: Any, source: Any, n: int) -> float:
    """Median seconds of one ``run_cell`` over ``n`` runs (``source(i)`` or a string)."""
    times = []
    for i in range(n):
        code = source(i) if callable(source) else source
        start = time.perf_counter()
        shell.run_cell(code, store_history=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    shell.user_ns.update({f"var_{k}": k for k in range(999)})
    shell.user_ns["API_TOKEN"] = "tok-not-a-real-secret"
    shell.run_cell("x = 0")
    memory = KernelMemory(shell)
    hook_times: dict[str, list[float]] = {}
    current = {"cell": "", "pre": 0.0}

    def timed_pre(info: Any) -> None:
        start = time.perf_counter()
        memory.pre_run_cell(info)
        current["pre"] = time.perf_counter() - start

    def timed_post(result: Any) -> None:
        start = time.perf_counter()
        memory.post_run_cell(result)
        spent = current["pre"] + time.perf_counter() - start
        hook_times.setdefault(str(current["cell"]), []).append(spent)

    cells = {"small": "x = x + 1", "typical": _typical, "failing": FAILING}
    results: dict[tuple[str, bool], list[float]] = {}
    devnull = open("/dev/null", "w")  # noqa: SIM115 - the failing cell's traceback goes here
    real_stderr, real_stdout = sys.stderr, sys.stdout
    counter = 0
    try:
        for _ in range(ROUNDS):
            for installed in (False, True):
                for event, fn in (("pre_run_cell", timed_pre), ("post_run_cell", timed_post)):
                    if installed:
                        shell.events.register(event, fn)
                    elif fn in shell.events.callbacks[event]:
                        shell.events.unregister(event, fn)
                for name, source in cells.items():
                    current["cell"] = name
                    gc.collect()
                    sys.stdout = sys.stderr = devnull
                    try:
                        if callable(source):  # a fresh source every run: no cache hit
                            base = counter
                            counter += PER_ROUND

                            def fresh(i: int, base: int = base, source: Any = source) -> str:
                                return source(base + i)

                            t = _time(shell, fresh, PER_ROUND)
                        else:
                            t = _time(shell, source, PER_ROUND)
                    finally:
                        sys.stdout, sys.stderr = real_stdout, real_stderr
                    results.setdefault((name, installed), []).append(t)
    finally:
        devnull.close()
    print(
        f"{'cell':10} {'without (ms)':>13} {'with (ms)':>10} {'difference':>11} {'in hooks (ms)':>14}"
    )
    for name in cells:
        off = statistics.median(results[(name, False)]) * 1e3
        on = statistics.median(results[(name, True)]) * 1e3
        hooks = statistics.median(hook_times[name]) * 1e3
        print(f"{name:10} {off:13.3f} {on:10.3f} {on - off:11.3f} {hooks:14.3f}")
    print(f"(medians of {ROUNDS} rounds x {PER_ROUND} runs; 1,000 user variables)")


if __name__ == "__main__":
    main()
