"""Kernel responsiveness while agents stream into live views (goal: p99 ≤ 1.3× idle).

A kernel client (jupyter_client) starts a real ipykernel of this interpreter, loads the
extension (JSONL persistence on, in a temporary folder) and times a trivial cell's round trip
(``execute_request`` → ``execute_reply``) in three phases:

1. idle: no agent running;
2. streaming, views shown: ``--agents`` agents (default 20) each stream ``--rate`` tokens/s
   (default 200, one text delta per token) and each agent's ``%%agent`` view is displayed;
3. streaming, no views: the same agents, no view displayed.

Each phase takes ``--samples`` round trips spaced 20 ms apart and reports p50 / p99 and the
p99 ratio to idle. Run: ``.venv/bin/python benchmarks/bench_kernel.py [--agents 20]
[--rate 200] [--samples 200]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import textwrap
import time
from typing import Any

from jupyter_client.manager import start_new_kernel

SETUP = """
import asyncio, time
import agentloop_nb.jupyter as J
from agentloop_nb.llm import (BlockEnd, BlockStart, Finish, Stop, TextDelta, Usage,
                              UsageChunk)
J.configure(persistence_root={root!r})
%load_ext agentloop_nb

class Paced:
    '''Streams `rate` one-word text deltas per second until cancelled (or `limit`).'''
    def __init__(self, rate, limit):
        self.rate, self.limit = rate, limit
    async def stream(self, options):
        yield BlockStart(index=0, block_type="text")
        start = time.monotonic()
        for i in range(self.limit):
            delay = start + i / self.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            yield TextDelta(index=0, text=f"w{{i}} ")
        yield BlockEnd(index=0)
        yield UsageChunk(usage=Usage(input_tokens=1, output_tokens=self.limit))
        yield Finish(reason=Stop())

_ = ctx.llm.register_adapter(["paced"], Paced({rate}, {limit}))
"""

START = """
for i in range({agents}):
    get_ipython().run_line_magic("agent", f"create {prefix}{{i}} --provider paced --model m")
"""

STOP = """
chunks = sum(
    sum(  # streamed words (one per delta); the log coalesces deltas, so count their text
        e.data["chunk"].get("text", "").count(" ")
        for e in globals()[f"{prefix}{{i}}"].session.events
        if e.type == "assistant/chunk"
    )
    for i in range({agents})
)
assert chunks >= {agents} * {rate} * {seconds}, f"only {{chunks}} chunks streamed"
for i in range({agents}):
    globals()[f"{prefix}{{i}}"].cancel("user")
for i in range({agents}):
    await asyncio.wait_for(globals()[f"{prefix}{{i}}"].when_idle(), 30)
"""


def _run(kc: Any, code: str, timeout: float = 60) -> float:
    """Execute ``code``; return the round trip in seconds. Raises on an error reply."""
    start = time.perf_counter()
    msg_id = kc.execute(code, silent=False, store_history=False)
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    elapsed = time.perf_counter() - start
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply['content']}")
    _drain(kc)
    return elapsed


def _drain(kc: Any) -> int:
    """Read (and drop) every pending iopub message, as a front end would; returns the count."""
    n = 0
    while kc.iopub_channel.msg_ready():
        kc.iopub_channel.get_msg(timeout=0)
        n += 1
    return n


def _sample(kc: Any, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        times.append(_run(kc, "1"))
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:  # keep reading iopub while waiting
            _drain(kc)
            time.sleep(0.002)
    return times


def _stats(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


def main(agents: int, rate: float, samples: int) -> None:
    seconds = samples * 0.05 + 30  # streams outlast the sampling; cancelled after it
    limit = int(rate * seconds)
    with tempfile.TemporaryDirectory() as root:
        km, kc = start_new_kernel(kernel_name="python3")
        try:
            _run(kc, SETUP.format(root=root, rate=rate, limit=limit))
            _run(kc, "1")
            rows = [("idle", _sample(kc, samples))]
            for phase, prefix, show in (
                ("streaming, views shown", "v", True),
                ("streaming, no views", "n", False),
            ):
                _run(kc, START.format(agents=agents, prefix=prefix))
                for i in range(agents):
                    name = f"{prefix}{i}"
                    if show:  # the cell queues the prompt and displays the view
                        _run(kc, f"%%agent {name}\nstream please")
                    else:
                        _run(kc, f'{name}.followup("stream please")')
                _run(kc, "await asyncio.sleep(1)")  # every stream under way
                began = time.perf_counter()
                rows.append((phase, _sample(kc, samples)))
                streamed = 0.8 * (time.perf_counter() - began)  # every agent streamed meanwhile
                stop = STOP.format(agents=agents, prefix=prefix, rate=rate, seconds=streamed)
                _run(kc, stop, timeout=120)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    idle_p99 = _stats(rows[0][1])[1]
    print(f"{agents} agents x {rate:g} tokens/s, {samples} round trips of a trivial cell per phase")
    print(f"{'phase':<26}{'p50 ms':>9}{'p99 ms':>9}{'p99 / idle':>12}")
    for phase, times in rows:
        p50, p99 = _stats(times)
        print(f"{phase:<26}{p50:>9.2f}{p99:>9.2f}{p99 / idle_p99:>12.2f}")
    print("goal: p99 with views shown <= 1.3x idle")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--rate", type=float, default=200.0, help="tokens per second per agent")
    parser.add_argument("--samples", type=int, default=200)
    ns = parser.parse_args()
    main(ns.agents, ns.rate, ns.samples)
