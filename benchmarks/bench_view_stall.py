"""Does the kernel stall while agent views stream? (issue 26 §3; goal: p99 ≤ 1.3× idle, max ≤ 50 ms)

A kernel client (jupyter_client) starts a real ipykernel of this interpreter, runs
``%load_ext agentloop_nb`` (JSONL persistence on, in a temporary folder) and creates two sets of
``--agents`` agents (default 20) on the offline model paced at ``--rate`` words per second (its
word-by-word stream of one long text, whatever the prompt: the benchmark's prompts stay short,
so twenty transcripts of many turns stay light): the first set has its views displayed
(``%agent show NAME``, so every render becomes comm messages on IOPub), the second is never
shown. It then times a trivial cell's round trip (``1+1``: ``execute_request`` →
``execute_reply``, one every 20 ms, a user's pace) in three phases:

- ``idle``: no agent running (the issue's baseline: the idle kernel);
- ``views``: the shown agents each stream one long answer into their views;
- ``no views``: the unshown agents stream the same answers.

The phases alternate in short blocks (``--samples`` round trips each, default 60, about 2 s),
one block of each phase per round in a rotating order, over ``--rounds`` rounds (default 40):
the machine's load drifts over the three alike, and each round is a time-local pair of an idle
and a views block. Each streaming block starts its agents' turns and cancels them after it;
the clock starts once every shown view has rendered since its turn began (each view's new turn
box, its first stream widget: a burst of widget creation that is a turn's start, not its
streaming; a time-based warm-up alone let the last of those renders land among the counted
round trips), and its first ``--warmup`` round trips (and the idle block's, alike) are not
counted either. A p99 needs thousands of samples to be more than a handful
of slow round trips (2,400 a phase by default), and the ratio is printed with a 95 %
confidence interval from a bootstrap over rounds (resampling whole rounds keeps each round's
idle and views blocks together, so load that moves between rounds widens the interval instead
of biasing the ratio). The verdict: met when the interval's upper end is ≤ 1.3, not met when
its lower end is above, undecided otherwise (run more rounds).

Another process reads the kernel's IOPub socket all the time, as a front end would (counting
messages, comm messages and bytes per phase), so nothing backs up and its work does not compete
for this process's GIL. ``--probe`` loads :mod:`_loop_probe` into the kernel: per phase, the
loop's CPU time, its longest iterations and what they ran, the slowest view renders and the
cyclic GC's pauses. ``--profile PATH`` cProfiles the kernel over the views blocks. ``--pacer-rate R`` adds a fourth
phase, ``views@R``: the same shown views with the render pacer's ``RATE`` set to ``R`` for that
block (an A/B of the rate in one run). Nothing here
is a test: the figures are ratios against the idle kernel measured side by side. Run::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_view_stall.py [--agents 20] [--rate 200]
        [--samples 60] [--rounds 40] [--warmup 5] [--probe] [--profile PATH] [--pacer-rate R]

(about 6 minutes with the defaults; ``--rounds 3 --samples 150`` is the layout of the first
versions, about a minute). On a machine other work loads, ``nice -n -10`` (as root) keeps that
work out of the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.manager import KernelManager

SETUP = """
import asyncio, sys
import agentloop_nb.jupyter as J
from agentloop_nb.jupyter._state import state as _bench_state
J.configure(persistence_root={root!r})
%load_ext agentloop_nb
_bench_words = []
for _i in range({words}):
    _bench_words.append(f"word{{_i}}" + ("\\n\\n" if _i % 60 == 59 else "\\n" if _i % 12 == 11 else " "))
_BENCH_TEXT = "".join(_bench_words)
from agentloop_nb.llm.offline import OfflineModel as _Offline
class _BenchModel(_Offline):  # the offline model's stream of one long text, whatever was asked
    def respond(self, options):
        return _BENCH_TEXT, None
_bench_state().app.ctx.llm.register_adapter(["offline@bench"], _BenchModel(token_delay={delay!r}))
"""

PROBE = """
sys.path.insert(0, {folder!r})
import _loop_probe
_loop_probe.install()
"""

CREATE = """
for _i in range({agents}):
    get_ipython().run_line_magic("agent", f"create {prefix}{{_i}} --provider offline@bench")
"""

SHOW = """
for _i in range({agents}):
    get_ipython().run_line_magic("agent", f"show {prefix}{{_i}}")
"""

START = """
for _i in range({agents}):
    globals()[f"{prefix}{{_i}}"].followup("go")
await asyncio.sleep(0.3)  # every stream under way before the clock starts
for _v in _bench_state().views.values():  # ... and every view past its turn's first render
    await _v.settled()
"""

CHUNKS = """sum(
    sum(  # streamed words (one per delta); the log coalesces deltas, so count their text
        e.data["chunk"].get("text", "").count(" ")
        for e in globals()[f"{prefix}{{_i}}"].session.events
        if e.type == "assistant/chunk"
    )
    for _i in range({agents})
)"""

STOP = """
_running = sum(str(globals()[f"{prefix}{{_i}}"].status) == "running" for _i in range({agents}))
_chunks = sum(
    sum(  # streamed words (one per delta); the log coalesces deltas, so count their text
        e.data["chunk"].get("text", "").count(" ")
        for e in globals()[f"{prefix}{{_i}}"].session.events
        if e.type == "assistant/chunk"
    )
    for _i in range({agents})
)
for _i in range({agents}):
    globals()[f"{prefix}{{_i}}"].cancel("user")
for _i in range({agents}):
    await asyncio.wait_for(globals()[f"{prefix}{{_i}}"].when_idle(), 60)
for _v in _bench_state().views.values():  # their last renders land before the next phase
    await _v.settled()
print(_chunks, _running)
"""


def _read_iopub(url: str, conn: Connection) -> None:
    """The reader process: receive every IOPub message; send stdout text back as it comes;
    on ``"stop"`` send ``(time, bytes, is_comm)`` of every message and exit."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.connect(url)
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    seen: list[tuple[float, int, bool]] = []
    while True:
        if conn.poll():
            conn.recv()
            conn.send(seen)
            break
        if not poller.poll(20):
            continue
        while True:
            try:
                frames = sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            k = frames.index(b"<IDS|MSG>")
            kind = json.loads(frames[k + 2]).get("msg_type")
            seen.append((time.monotonic(), sum(len(f) for f in frames), kind == "comm_msg"))
            if kind == "stream":
                conn.send(json.loads(frames[k + 5]).get("text", ""))
    sub.close(0)
    ctx.term()


class Kernel:
    """A kernel with a shell-only client here and an IOPub reader in another process."""

    def __init__(self) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel()
        info = self.km.get_connection_info()
        url = f"{info['transport']}://{info['ip']}:{info['iopub_port']}"
        self.conn, theirs = mp.Pipe()
        self.reader = mp.get_context("spawn").Process(target=_read_iopub, args=(url, theirs))
        self.reader.start()
        self.kc = self.km.client()
        self.kc.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        self.stdout = ""
        deadline = time.monotonic() + 120
        while not self._poll_stdout() and time.monotonic() < deadline:
            self.run("print('ready')")  # until the reader is subscribed (PUB/SUB joins late)
        if "ready" not in self.stdout:
            raise RuntimeError("the IOPub reader never saw the kernel's output")

    def run(self, code: str, timeout: float = 120) -> float:
        """Execute ``code``; return the round trip in seconds. Raises on an error reply."""
        start = time.perf_counter()
        msg_id = self.kc.execute(code, silent=False, store_history=False)
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        elapsed = time.perf_counter() - start
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"cell failed: {reply['content'].get('evalue')}\n{code}")
        return elapsed

    def _poll_stdout(self, timeout: float = 0.0) -> bool:
        got = False
        while self.conn.poll(timeout):
            self.stdout += self.conn.recv()
            got, timeout = True, 0.0
        return got

    def printed(self, code: str) -> str:
        """Run ``code`` (which prints) and return what it printed, read back from IOPub."""
        self._poll_stdout()
        self.stdout = ""
        self.run(f"{code}\nprint('@@end')")
        deadline = time.monotonic() + 60
        while "@@end" not in self.stdout and time.monotonic() < deadline:
            self._poll_stdout(0.05)
        if "@@end" not in self.stdout:
            raise RuntimeError("the kernel's output never arrived")
        return self.stdout[: self.stdout.index("@@end")].strip()

    def fetch(self, expr: str) -> Any:
        """The value of ``expr`` in the kernel (JSON-able)."""
        return json.loads(self.printed(f"print(__import__('json').dumps({expr}))"))

    def close(self) -> list[tuple[float, int, bool]]:
        """Shut down; return every IOPub message seen as ``(time, bytes, is_comm)``."""
        self.conn.send("stop")
        seen: list[tuple[float, int, bool]] = []
        while True:  # stdout text may still be ahead of the list in the pipe
            got = self.conn.recv()
            if isinstance(got, list):
                seen = got
                break
        self.reader.join()
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        return seen


def _sample(k: Kernel, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        times.append(k.run("1+1"))
        time.sleep(0.02)  # a user's pace, not synchronisation: the reply is already in
    return times


def _p99(ordered: list[float]) -> float:
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _stats(times: list[float]) -> tuple[float, float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1e3, _p99(ordered) * 1e3, ordered[-1] * 1e3


def _pooled(blocks: dict[str, list[list[float]]], phase: str) -> list[float]:
    return [t for block in blocks[phase] for t in block]


def _interval(
    blocks: dict[str, list[list[float]]], phase: str, resamples: int, seed: int = 0
) -> tuple[float, float, float, float]:
    """``phase``'s p99 over the idle p99, and its p99 minus the idle's (ms), each with the
    2.5th and 97.5th percentiles of a bootstrap over rounds: each resample draws ``rounds``
    round indices with replacement and pools those rounds' blocks of both phases, so a round's
    blocks (adjacent in time) stay together. Returns ``(low, high, low_ms, high_ms)``."""
    rng = random.Random(seed)
    base, other = blocks["idle"], blocks[phase]
    n = min(len(base), len(other))
    ratios, excess = [], []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        a = _p99(sorted(t for r in picks for t in base[r]))
        b = _p99(sorted(t for r in picks for t in other[r]))
        ratios.append(b / a)
        excess.append((b - a) * 1e3)
    ratios.sort()
    excess.sort()
    lo, hi = round(0.025 * (resamples - 1)), round(0.975 * (resamples - 1))
    return ratios[lo], ratios[hi], excess[lo], excess[hi]


PHASES = ("idle", "views", "no views")

PACER_RATE = "_bench_throttle.RATE = {rate!r}"


def main(ns: argparse.Namespace) -> None:
    # Every answer outlasts its block (a round trip and its pause take about 30 ms; the margin
    # covers a loaded machine): a block never measures an agent that already finished.
    words = int(ns.rate * ((ns.samples + ns.warmup) * 0.15 + 5))
    phases = PHASES + ((f"views@{ns.pacer_rate:g}",) if ns.pacer_rate else ())
    blocks: dict[str, list[list[float]]] = {p: [] for p in phases}
    spans: dict[str, list[tuple[float, float]]] = {p: [] for p in phases}
    probes: dict[str, list[Any]] = {p: [] for p in phases}
    chunks: dict[str, int] = {}
    finished = 0  # agents whose answer ended before their block did
    streamed: dict[str, int] = {p: 0 for p in phases}
    with tempfile.TemporaryDirectory() as root:
        k = Kernel()
        try:
            k.run(SETUP.format(root=root, words=words, delay=1.0 / ns.rate))
            for prefix in ("v", "n"):
                k.run(CREATE.format(agents=ns.agents, prefix=prefix))
            k.run(SHOW.format(agents=ns.agents, prefix="v"))
            if ns.probe:
                k.run(PROBE.format(folder=str(Path(__file__).parent)))
            if ns.pacer_rate:
                k.run("_bench_throttle = sys.modules['agentloop_nb.jupyter.view._throttle']")
                default_rate = k.fetch("_bench_throttle.RATE")
            _sample(k, 20)  # warm up
            for r in range(ns.rounds):
                turn = r % len(phases)
                for phase in phases[turn:] + phases[:turn]:
                    prefix = "v" if phase.startswith("views") else "n" if phase != "idle" else None
                    if ns.pacer_rate:  # the pacer's rate this block (the default but in one)
                        rate = ns.pacer_rate if phase.startswith("views@") else default_rate
                        k.run(PACER_RATE.format(rate=rate))
                    if prefix is not None:
                        k.run(START.format(agents=ns.agents, prefix=prefix))
                    count = CHUNKS.format(agents=ns.agents, prefix=prefix or "v")
                    _sample(k, ns.warmup)  # the turns' starts are not what is measured
                    if ns.probe:
                        chunks_before = k.fetch(count)
                        before = k.fetch("_loop_probe.take()")
                    profiling = ns.profile and phase == "views"
                    if profiling:
                        k.run("import cProfile; _prof = cProfile.Profile(); _prof.enable()")
                    began = time.monotonic()
                    blocks[phase].append(_sample(k, ns.samples))
                    spans[phase].append((began, time.monotonic()))
                    if profiling:
                        k.run(f"_prof.disable(); _prof.dump_stats({ns.profile!r})")
                        ns.profile = None  # one views block is enough
                    if ns.probe:
                        probes[phase].append((before, k.fetch("_loop_probe.take()")))
                        streamed[phase] += k.fetch(count) - chunks_before
                    if prefix is not None:
                        stop = STOP.format(agents=ns.agents, prefix=prefix)
                        logged, running = k.printed(stop).split()
                        chunks[phase] = int(logged)
                        finished += ns.agents - int(running)
        finally:
            seen = k.close()
    _report(ns, phases, blocks, spans, chunks, seen)
    if finished:
        print(f"warning: {finished} answers ended before their block did (raise the margin)")
    if ns.probe:
        _report_probe(probes, spans, streamed)


def _report(
    ns: argparse.Namespace,
    phases: tuple[str, ...],
    blocks: dict[str, list[list[float]]],
    spans: dict[str, list[tuple[float, float]]],
    chunks: dict[str, int],
    seen: list[tuple[float, int, bool]],
) -> None:
    idle = _stats(_pooled(blocks, "idle"))
    print(
        f"{ns.agents} agents x {ns.rate:g} words/s; {ns.rounds} rounds x {ns.samples} round "
        f"trips of `1+1` per phase (blocks interleaved, {ns.warmup} more per block not counted)"
    )
    head = f"{'phase':<10}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}"
    head += (
        f"{'p50/idle':>10}{'p99/idle':>10}{'max/idle':>10}{'msgs/s':>9}{'comm/s':>8}{'KiB/s':>8}"
    )
    print(head)
    for phase in phases:
        p50, p99, mx = _stats(_pooled(blocks, phase))
        s = sum(b - a for a, b in spans[phase]) or 1
        inside = [m for m in seen if any(a <= m[0] <= b for a, b in spans[phase])]
        comm = sum(1 for m in inside if m[2])
        size = sum(m[1] for m in inside)
        print(
            f"{phase:<10}{p50:>8.2f}{p99:>8.2f}{mx:>8.1f}{p50 / idle[0]:>10.2f}"
            f"{p99 / idle[1]:>10.2f}{mx / idle[2]:>10.2f}{len(inside) / s:>9.0f}"
            f"{comm / s:>8.0f}{size / s / 1024:>8.0f}"
        )
    for phase, n in chunks.items():
        print(f"{phase}: {n} chunks logged by the {ns.agents} agents (all rounds)")
    print(f"p99 against the idle kernel's, 95 % CI (bootstrap over the {ns.rounds} rounds):")
    verdict = "undecided"
    for phase in phases[1:]:
        ratio = _stats(_pooled(blocks, phase))[1] / idle[1]
        lo, hi, lo_ms, hi_ms = _interval(blocks, phase, ns.resamples)
        print(
            f"  {phase:<9} {ratio:.3f}x  [{lo:.3f}, {hi:.3f}]   "
            f"excess {ratio * idle[1] - idle[1]:+.2f} ms  [{lo_ms:+.2f}, {hi_ms:+.2f}]"
        )
        if phase == "views":
            verdict = "met" if hi <= 1.3 else "not met" if lo > 1.3 else "undecided"
    over = sum(1 for t in _pooled(blocks, "views") if t > 0.05)
    views_max = _stats(_pooled(blocks, "views"))[2]
    print(
        f"goal: views p99 <= 1.3x idle: {verdict} (met: the CI's upper end <= 1.3; not met: its "
        f"lower end > 1.3); max <= 50 ms: {'met' if views_max <= 50 else 'not met'} "
        f"({views_max:.1f} ms; {over} round trips over 50 ms)"
    )


def _report_probe(
    probes: dict[str, list[Any]],
    spans: dict[str, list[tuple[float, float]]],
    streamed: dict[str, int],
) -> None:
    print("\nkernel CPU (every thread / the main thread) and its loop's longest iterations:")
    print(
        f"{'phase':<10}{'cpu %':>7}{'main %':>8}{'ms/1k chunks':>14}{'>10 ms':>8}{'>25 ms':>8}"
        f"{'max ms':>8}{'its cpu':>9}{'gen2':>6}{'gen2 ms':>9}"
    )
    for phase, pairs in probes.items():
        if not pairs:
            continue
        s = sum(b - a for a, b in spans[phase]) or 1
        cpu = sum(after[4][0] - before[4][0] for before, after in pairs)
        main = sum(after[4][1] - before[4][1] for before, after in pairs)
        takes = [after for _, after in pairs]
        bursts = [b for t in takes for b in t[2]]
        walls = [b[1] for b in bursts]
        gen2 = [d for t in takes for g, d in t[3] if g == 2]
        worst = max(bursts, key=lambda b: b[1], default=[0.0])
        n = streamed[phase]
        per_chunk = f"{1e6 * cpu / n:.1f} / {1e6 * main / n:.1f}" if n else "-"
        print(
            f"{phase:<10}{100 * cpu / s:>7.1f}{100 * main / s:>8.1f}{per_chunk:>14}"
            f"{sum(1 for w in walls if w > 0.01):>8}{sum(1 for w in walls if w > 0.025):>8}"
            f"{sum(1 for b in bursts if b[0] > 0.01):>8}{sum(1 for b in bursts if b[0] > 0.025):>8}"
            f"{max(walls, default=0) * 1e3:>8.1f}{worst[0] * 1e3:>9.1f}{len(gen2):>6}"
            f"{max(gen2, default=0) * 1e3:>9.1f}"
        )
    print(
        "(ms/1k chunks: kernel CPU per 1,000 streamed chunks, every thread / the main thread;\n"
        " >10/>25 ms: iterations (the loop's callbacks between two selects) over that wall time;\n"
        " cpu>10/cpu>25: over that CPU time, which the machine's load does not inflate;\n"
        " 'its cpu': the CPU time of the longest; the rest it waited for a core or the GIL)"
    )
    for phase, pairs in probes.items():
        bursts = sorted((b for _, t in pairs for b in t[2]), key=lambda b: -b[1])[:3]
        for cpu, wall, n, parts in bursts:
            what = "; ".join(f"{d * 1e3:.1f} {x[:48]}" for d, x in parts)
            print(f"  {phase}: {wall * 1e3:.1f} ms ({cpu * 1e3:.1f} cpu), {n} callbacks: {what}")
    print("view renders (CPU ms of each):")
    for phase, pairs in probes.items():
        rs = sorted(d for _, t in pairs for d in t[5])
        if rs:
            p50, p90, p99 = (rs[min(len(rs) - 1, int(f * len(rs)))] * 1e3 for f in (0.5, 0.9, 0.99))
            print(
                f"  {phase}: {len(rs)} renders, p50 {p50:.2f} p90 {p90:.2f} p99 {p99:.2f}"
                f" max {rs[-1] * 1e3:.2f}, {sum(rs) * 1e3:.0f} ms in all"
            )
    print("slowest callbacks and view renders (CPU ms), by kind:")
    for phase, pairs in probes.items():
        kinds: dict[str, list[float]] = {}
        for _, t in pairs:
            for d, what in t[1]:
                key = f"task {what.split()[-1]}" if what.startswith("task ") else what
                kinds.setdefault(key, []).append(d)
        for what, ds in sorted(kinds.items(), key=lambda kv: -sum(kv[1]))[:5]:
            print(f"  {phase}: {len(ds):>5} over 1 ms, max {max(ds) * 1e3:6.1f}  {what[:80]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--rate", type=float, default=200.0, help="words per second per agent")
    parser.add_argument("--samples", type=int, default=60, help="round trips per block")
    parser.add_argument("--rounds", type=int, default=40, help="blocks of each phase")
    parser.add_argument(
        "--warmup", type=int, default=5, help="round trips not counted at each block's start"
    )
    parser.add_argument(
        "--resamples", type=int, default=2000, help="bootstrap resamples of the rounds"
    )
    parser.add_argument(
        "--pacer-rate",
        type=float,
        default=0.0,
        help="add a phase 'views@R': the shown views with the render pacer's RATE set to R",
    )
    parser.add_argument("--probe", action="store_true", help="load _loop_probe into the kernel")
    parser.add_argument(
        "--profile", metavar="PATH", help="cProfile the kernel over one views block into PATH"
    )
    main(parser.parse_args())
