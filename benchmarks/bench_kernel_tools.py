"""How long ``inspect_variable`` / ``list_variables`` take on huge objects.

The summaries must stay well under a second on a 10-million-row DataFrame. The figure is a
ratio against a baseline measured in the same run: ``df.head(5).to_string()``, the cheapest
useful look at a frame (what a person types first). Also timed: the one-line
``list_variables`` summary, a 10-million-element numpy array and a 1-million-item list.

Run: ``.venv/bin/python benchmarks/bench_kernel_tools.py`` (needs numpy and pandas: the
``test`` extra; ~20 s, most of it building the frame). Prints the best of 5 runs per row
(the least disturbed by other load). Nothing here is asserted.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from agentloop_nb.jupyter.kernel._describe import describe, short_summary

ROWS = 10_000_000
MAX_CHARS = 4000


def best(fn: Callable[[], Any], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "id": np.arange(ROWS),
            "x": rng.random(ROWS),
            "y": rng.integers(0, 1000, ROWS),
            "label": pd.Categorical(rng.choice(["a", "b", "c"], ROWS)),
        }
    )
    array = rng.random(ROWS)
    items = list(range(1_000_000))
    baseline = best(lambda: df.head(5).to_string())
    rows = [
        ("DataFrame 10M x 4: inspect_variable", best(lambda: describe(df, MAX_CHARS))),
        ("DataFrame 10M x 4: list_variables line", best(lambda: short_summary(df))),
        ("ndarray 10M float64: inspect_variable", best(lambda: describe(array, MAX_CHARS))),
        ("list 1M ints: inspect_variable", best(lambda: describe(items, MAX_CHARS))),
        ("full df.describe() (what a naive summary costs)", best(df.describe, runs=1)),
    ]
    print(f"baseline df.head(5).to_string(): {baseline * 1e3:8.2f} ms")
    print(f"{'summary':52} {'ms':>9} {'x baseline':>11}")
    for name, seconds in rows:
        print(f"{name:52} {seconds * 1e3:9.2f} {seconds / baseline:11.1f}")


if __name__ == "__main__":
    main()
