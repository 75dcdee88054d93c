"""Agent-loop performance benchmarks (SPEC §10). Prints small tables; asserts nothing.

    .venv/bin/python benchmarks/bench_loop.py            # every section (a few minutes)
    .venv/bin/python benchmarks/bench_loop.py --quick    # smoke run (< 20 s)
    .venv/bin/python benchmarks/bench_loop.py loop pool  # chosen sections: loop pool ingest resume
    .venv/bin/python benchmarks/bench_loop.py ingest --profile   # cProfile one of our runs

Sections:
  loop    (a) per-step overhead: one trivial async tool call per step, zero-latency model, vs
              pydantic-ai, openai-agents and a bare asyncio loop (interleaved, medians)
  pool    (b) 1,000 parallel-safe 10 ms tool calls in one assistant message at cap 10
  ingest  (c) one long streamed text answer through a full turn with JSONL persistence
  resume  (d) load + adopt + derive a ~100k-event JSONL session vs json.loads over its lines

Contenders run in one process and one event loop; every timed run starts after
``gc.collect()``; setup (apps, agents, scripted responses) is outside the timed region.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peers import BareLoop, OpenAIAgents, PydanticAI, versions

from agentloop_nb.app import App
from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    Stop,
    StreamChunk,
    TextDelta,
    Usage,
    UsageChunk,
)
from agentloop_nb.loop import AgentOptions
from agentloop_nb.session import JsonlPersistence, SessionStore
from agentloop_nb.testing import combine, text, tool_call
from agentloop_nb.tools import tool

OPTIONS = AgentOptions(provider="replay", model="bench")

# -- shared helpers ------------------------------------------------------------------------------


class Replay:
    """A zero-latency adapter replaying pre-built chunk lists, one list per request."""

    def __init__(self, responses: Sequence[Sequence[StreamChunk]]) -> None:
        self._responses = responses
        self._next = 0

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        response = self._responses[self._next]
        self._next += 1
        for chunk in response:
            yield chunk


@tool
async def noop() -> str:
    """Do nothing."""
    return "ok"


@tool(concurrency_safe=True)
async def sleepy(i: int) -> str:
    """Sleep 10 ms."""
    await anyio.sleep(0.01)
    return "ok"


def build_app(responses: Sequence[Sequence[StreamChunk]], root: Path | None, **config: Any) -> Any:
    """An App (persistence under ``root`` when given) with the replay adapter, the bench tools
    and one agent; returns ``(app, agent)``."""
    app = App(config or None, persistence_root=root) if root else App(config or None)
    app.ctx.llm.register_adapter(["replay"], Replay(responses))
    app.ctx.tools.register(noop)
    app.ctx.tools.register(sleepy)
    agent = app.ctx.agent_loop.create("bench", OPTIONS)
    return app, agent


LAST_CPU = [0.0]  # process CPU seconds of the last ``timed`` run (all threads)


async def timed(run: Callable[[], Awaitable[Any]]) -> float:
    """Wall seconds of ``await run()`` after a full collection; the process CPU time (every
    thread: the JSONL writer included) is left in ``LAST_CPU[0]``. Whatever ``run`` returns is
    kept alive until the clock has stopped, so freeing results is never timed."""
    gc.collect()
    cpu = time.process_time()
    start = time.perf_counter()
    result = await run()
    elapsed = time.perf_counter() - start
    LAST_CPU[0] = time.process_time() - cpu
    del result
    return elapsed


def freeze_fixtures() -> None:
    """Move every object built so far (scripted responses, imported modules) out of the cyclic
    GC's reach: a real adapter's chunks are short-lived, a pre-built script of 200k chunks would
    otherwise make every full collection during the timed run walk it."""
    gc.collect()
    gc.freeze()


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        f"\n{title}",
        "| " + " | ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True)) + " |",
    ]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    out = "\n".join(lines)
    print(out, flush=True)
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def profile(label: str, run: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[None]]:
    """Wrap ``run`` so it executes under cProfile and prints the top functions."""

    async def profiled() -> None:
        prof = cProfile.Profile()
        prof.enable()
        await run()
        prof.disable()
        for key in ("tottime", "cumulative"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(18)
            print(f"\n--- cProfile {label} (by {key}) ---")
            print("\n".join(buf.getvalue().splitlines()[4:]))

    return profiled


# -- (a) loop overhead per step ------------------------------------------------------------------

_RESPONSES: dict[int, list[list[StreamChunk]]] = {}


def step_responses(n: int) -> list[list[StreamChunk]]:
    if n not in _RESPONSES:
        _RESPONSES[n] = [tool_call(f"c{i}", "noop", {}) for i in range(n)] + [text("done")]
    return _RESPONSES[n]


class Ours:
    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.name = "agentloop_nb (JSONL on)" if root else "agentloop_nb (no persistence)"

    def prepare(self, n: int) -> None:
        self.n = n
        self.app, self.agent = build_app(step_responses(n), self.root)

    async def settle(self) -> None:
        """Finish setting the agent up before the clock starts: with JSONL on, its session
        file is created by the writer thread, which a turn that never yields would otherwise
        let in only at its first flush (about 0.13 ms, mostly the kernel's, inside the timed
        turn). An agent made in one cell and prompted in the next has its file already."""
        await self.agent.session.flush()

    async def run(self) -> None:
        self.agent.followup("go")
        await self.agent.when_idle()

    async def finish(self) -> None:
        events = self.agent.session.events
        assert events[-1].data["reason"] == {"kind": "completed"}, events[-1]
        steps = sum(1 for e in events if e.type == "step/end")
        assert steps == self.n + 1, steps
        await self.app.aclose()


async def bench_loop(ns: Sequence[int], reps: int, tmp: Path, prof: bool) -> str:
    out = []
    contenders: list[Any] = [Ours(tmp / "a"), Ours(None), PydanticAI(), OpenAIAgents(), BareLoop()]
    if prof:
        ours = contenders[0]
        ours.prepare(ns[-1])
        await profile(f"loop N={ns[-1]} JSONL on", ours.run)()
        await ours.finish()
        return ""
    per_step: dict[tuple[str, int], float] = {}
    cpu_step: dict[tuple[str, int], float] = {}
    for n in ns:
        samples: dict[str, list[float]] = {c.name: [] for c in contenders}
        cpus: dict[str, list[float]] = {c.name: [] for c in contenders}
        for c in contenders:  # warm-up: imports, caches, first-call costs
            c.prepare(min(n, 10))
            await c.run()
            if hasattr(c, "finish"):
                await c.finish()
        step_responses(n)
        freeze_fixtures()
        for rep in range(reps):
            order = contenders[rep % len(contenders) :] + contenders[: rep % len(contenders)]
            for c in order:
                c.prepare(n)
                if hasattr(c, "settle"):
                    await c.settle()
                samples[c.name].append(await timed(c.run))
                cpus[c.name].append(LAST_CPU[0])
                if hasattr(c, "finish"):
                    await c.finish()
        for c in contenders:
            per_step[(c.name, n)] = statistics.median(samples[c.name]) * 1000 / n
            cpu_step[(c.name, n)] = statistics.median(cpus[c.name]) * 1000 / n
    ours_on, ours_off = contenders[0].name, contenders[1].name
    bare, pyd, oai = "bare asyncio loop", "pydantic-ai", "openai-agents"
    rows = []
    for c in contenders:
        row: list[Any] = [c.name]
        for n in ns:
            row.append(per_step[(c.name, n)])
        for n in ns:
            row.append(f"{per_step[(c.name, n)] / per_step[(ours_on, n)]:.2f}x")
        row.append(f"{per_step[(c.name, ns[-1])] / per_step[(c.name, ns[0])]:.2f}x")
        for n in ns:
            row.append(cpu_step[(c.name, n)])
        rows.append(row)
    headers = ["contender"] + [f"ms/step N={n}" for n in ns]
    headers += [f"vs ours-on N={n}" for n in ns] + [f"N={ns[-1]}/N={ns[0]}"]
    headers += [f"cpu ms/step N={n}" for n in ns]
    out.append(
        table(f"(a) loop overhead per step (median of {reps} interleaved runs)", headers, rows)
    )
    summary = []
    for ours in (ours_on, ours_off):
        for n in ns:
            mine = per_step[(ours, n)]
            summary.append(
                [
                    ours,
                    n,
                    mine,
                    f"{mine / per_step[(pyd, n)]:.2f}x",
                    f"{mine / per_step[(oai, n)]:.2f}x",
                    f"{mine / per_step[(bare, n)]:.0f}x",
                    f"{cpu_step[(ours, n)] / cpu_step[(pyd, n)]:.2f}x",
                    f"{cpu_step[(ours, n)] / cpu_step[(oai, n)]:.2f}x",
                ]
            )
    out.append(
        table(
            "(a) ours relative to each peer (< 1.00x = faster; goal: lower than both, "
            "<= 0.1 ms/step with JSONL on, flatness <= 1.5x)",
            [
                "ours",
                "N",
                "ms/step",
                "/ pydantic-ai",
                "/ openai-agents",
                "/ bare loop",
                "cpu / pydantic-ai",
                "cpu / openai-agents",
            ],
            summary,
        )
    )
    return "\n".join(out)


# -- (b) tool pool -------------------------------------------------------------------------------


async def bench_pool(calls: int, reps: int, tmp: Path, prof: bool) -> str:
    cap, body = 10, 0.01
    ideal = calls * body / cap
    responses = [
        combine(*[tool_call(f"c{i}", "sleepy", {"i": i}) for i in range(calls)]),
        text("done"),
    ]
    freeze_fixtures()

    async def ours(root: Path | None) -> tuple[float, float, float]:
        app, agent = build_app(responses, root, max_parallel_tool_calls=cap)

        async def run() -> None:
            agent.followup("go")
            await agent.when_idle()

        wall = await (timed(run) if not prof else _timed_profiled(run))
        cpu = LAST_CPU[0]
        events = agent.session.events
        assert sum(1 for e in events if e.type == "tool/result") == calls
        assert not any(e.data.get("is_error") for e in events if e.type == "tool/result")
        first = next(e.time for e in events if e.type == "tool/call")
        last = max(e.time for e in events if e.type == "tool/result")
        await app.aclose()
        return wall, last - first, cpu

    async def bare() -> float:
        sem = anyio.Semaphore(cap)

        async def one() -> None:
            async with sem:
                await anyio.sleep(body)

        async def run() -> None:
            async with anyio.create_task_group() as tg:
                for _ in range(calls):
                    tg.start_soon(one)

        return await timed(run)

    if prof:
        await ours(tmp / "b")
        return ""
    results: dict[str, list[tuple[float, float, float]]] = {"on": [], "off": [], "bare": []}
    for _ in range(reps):
        results["on"].append(await ours(tmp / "b"))
        results["off"].append(await ours(None))
        b = await bare()
        results["bare"].append((b, b, LAST_CPU[0]))
    bare_wall = statistics.median(w for w, _, _ in results["bare"])
    rows = []
    for label, key in (
        ("agentloop_nb (JSONL on)", "on"),
        ("agentloop_nb (no persistence)", "off"),
        ("bare anyio semaphore pool", "bare"),
    ):
        wall = statistics.median(w for w, _, _ in results[key])
        span = statistics.median(s for _, s, _ in results[key])
        cpu = statistics.median(c for _, _, c in results[key])
        rows.append(
            [
                label,
                wall,
                f"{wall / ideal:.3f}x",
                span,
                f"{span / ideal:.3f}x",
                f"{wall / bare_wall:.3f}x",
                cpu * 1e6 / calls,
            ]
        )
    return table(
        f"(b) tool pool: {calls} x 10 ms parallel-safe calls in one message, cap {cap}, "
        f"ideal {ideal:.2f} s (median of {reps}; goal <= 1.05x)",
        [
            "contender",
            "turn wall s",
            "/ ideal",
            "first call..last result s",
            "/ ideal",
            "wall / bare pool",
            "cpu us/call",
        ],
        rows,
    )


async def _timed_profiled(run: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await profile("pool", run)()
    return time.perf_counter() - start


# -- (c) chunk ingest ----------------------------------------------------------------------------


def long_text(deltas: int) -> list[StreamChunk]:
    chunks: list[StreamChunk] = [BlockStart(index=0, block_type="text")]
    chunks.extend(TextDelta(index=0, text=f"t{i % 10} ") for i in range(deltas))
    chunks += [
        BlockEnd(index=0),
        UsageChunk(usage=Usage(input_tokens=10, output_tokens=deltas)),
        Finish(reason=Stop()),
    ]
    return chunks


async def bench_ingest(deltas: int, reps: int, tmp: Path, prof: bool) -> str:
    chunks = long_text(deltas)
    total = len(chunks)
    freeze_fixtures()

    async def ours(root: Path | None) -> float:
        app, agent = build_app([chunks], root)

        async def run() -> None:
            agent.followup("go")
            await agent.when_idle()
            await agent.session.flush()

        if prof:
            await profile("ingest", run)()
            elapsed = 0.0
        else:
            elapsed = await timed(run)
        if root is not None:
            assert agent.session.durable_seq == len(agent.session.events) - 1
        await app.aclose()
        return elapsed

    async def agen() -> AsyncIterator[StreamChunk]:
        for c in chunks:
            yield c

    async def bare_async() -> None:
        async for _ in agen():
            pass

    async def bare_list() -> None:
        for _ in chunks:
            pass

    if prof:
        await ours(tmp / "c")
        return ""
    samples: dict[str, list[float]] = {"on": [], "off": [], "async": [], "list": []}
    cpus: dict[str, list[float]] = {k: [] for k in samples}
    for _ in range(reps):
        for key, run in (
            ("on", lambda: ours(tmp / "c")),
            ("off", lambda: ours(None)),
            ("async", lambda: timed(bare_async)),
            ("list", lambda: timed(bare_list)),
        ):
            samples[key].append(await run())
            cpus[key].append(LAST_CPU[0])
    on = statistics.median(samples["on"])
    rows = []
    for label, key in (
        ("agentloop_nb turn (JSONL on, incl. flush)", "on"),
        ("agentloop_nb turn (no persistence)", "off"),
        ("bare async-generator iteration", "async"),
        ("bare list iteration", "list"),
    ):
        t = statistics.median(samples[key])
        cpu = statistics.median(cpus[key])
        rows.append(
            [
                label,
                t * 1000,
                f"{total / t:,.0f}",
                t * 1e6 / total,
                f"{on / t:.1f}x",
                f"{total / cpu:,.0f}" if cpu else "-",
                cpu * 1e6 / total,
            ]
        )
    return table(
        f"(c) chunk ingest: one text answer of {total:,} chunks (median of {reps}; "
        "goal >= 100,000 chunks/s with JSONL on)",
        [
            "path",
            "ms",
            "chunks/s",
            "us/chunk",
            "ours-on / this",
            "chunks per cpu-s",
            "cpu us/chunk",
        ],
        rows,
    )


# -- (d) resume ----------------------------------------------------------------------------------


async def look_up(q: int) -> str:
    """What the entry says (a result of its own per call)."""
    return f"entry {q}: what the tool found about it, one line of text"


async def write_session(root: Path, target: int, distinct: bool = False) -> tuple[str, int]:
    """Write a realistic session of about ``target`` events: turns of 50 steps, each step a
    ~40-character streamed preamble plus one tool call; a streamed final answer per turn.
    ``distinct``: every step's preamble, arguments and tool result differ (``look_up``);
    otherwise they repeat (``noop`` refusing its argument)."""
    preamble = "Let me look that up for you, one moment."
    answer = "Here is what I found after looking at all of it."
    steps_per_turn = 50
    # Scripted for the fewest events a tool step logs (8 without text: a version-2 log
    # coalesces its chunks; a version-1 log took 3 more): turns are sent until ``target``.
    turns = max(1, target // (8 * steps_per_turn + 4))
    responses: list[list[StreamChunk]] = []
    for t in range(turns + 1):
        for s in range(steps_per_turn):
            if distinct:
                q = t * steps_per_turn + s
                says = f"Step {s} of turn {t}: let me look that up for you."
                responses.append(tool_call(f"t{t}s{s}", "look_up", {"q": q}, text=says))
            else:
                responses.append(tool_call(f"t{t}s{s}", "noop", {"q": s}, text=preamble))
        responses.append(text(answer))
    app, agent = build_app(responses, root)
    if distinct:
        app.ctx.tools.register(look_up)
    for t in range(turns + 1):
        if t and len(agent.session.events) >= target:
            break
        agent.followup(f"question {t}")
        await agent.when_idle()
    await agent.session.flush()
    sid, count = agent.session.id, len(agent.session.events)
    await app.aclose()
    return sid, count


async def bench_resume(target: int, reps: int, tmp: Path, prof: bool) -> str:
    root = tmp / "d"
    sid, count = await write_session(root, target)
    path = root / f"{sid}.jsonl"
    size = path.stat().st_size
    kinds: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        next(f)
        for line in f:
            kind = json.loads(line)["type"]
            kinds[kind] = kinds.get(kind, 0) + 1

    async def baseline() -> Any:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    loaded: dict[str, Any] = {}

    async def load() -> None:
        loaded["v"] = JsonlPersistence(root).load(sid)

    async def prepare() -> None:
        header, events = loaded["v"]
        loaded["s"] = SessionStore(None).prepare(header=header, events=events)

    async def derive() -> None:
        loaded["s"].derive_messages()

    async def full() -> Any:
        header, events = JsonlPersistence(root).load(sid)
        session = SessionStore(None).prepare(header=header, events=events)
        return session, session.derive_messages()

    async def end_to_end() -> float:
        app = App(persistence_root=root)
        handle: Any = None

        async def run() -> None:
            nonlocal handle
            handle = await app.ctx.agents.resume(resume_session_id=sid)

        elapsed = await timed(run)
        await handle.dispose()
        await app.aclose()
        return elapsed

    freeze_fixtures()
    if prof:
        await profile("resume (load + prepare + derive)", full)()
        return ""
    samples: dict[str, list[float]] = {
        k: [] for k in ("json", "load", "prep", "derive", "full", "e2e")
    }
    for _ in range(reps):
        samples["json"].append(await timed(baseline))
        samples["load"].append(await timed(load))
        samples["prep"].append(await timed(prepare))
        samples["derive"].append(await timed(derive))
        samples["full"].append(await timed(full))
        samples["e2e"].append(await end_to_end())
        loaded.clear()
    base = statistics.median(samples["json"])
    rows = []
    for label, key in (
        ("[json.loads(l) for l in open(path)]  (baseline)", "json"),
        ("JsonlPersistence(root).load(id)", "load"),
        ("SessionStore.prepare(header=, events=)", "prep"),
        ("session.derive_messages()", "derive"),
        ("load + prepare + derive", "full"),
        ("await app.ctx.agents.resume(resume_session_id=)", "e2e"),
    ):
        t = statistics.median(samples[key])
        rows.append([label, t * 1000, f"{t / base:.2f}x"])
    mix = ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
    return table(
        f"(d) resume: {count:,} events, {size / 1e6:.1f} MB (median of {reps}; goal: load + "
        f"derive <= 2x the baseline)\n    mix: {mix}",
        ["step", "ms", "/ baseline"],
        rows,
    )


# -- main ----------------------------------------------------------------------------------------

SECTIONS = ("loop", "pool", "ingest", "resume")


async def main(args: argparse.Namespace) -> None:
    chosen = args.sections or list(SECTIONS)
    quick = args.quick
    tmp = Path(tempfile.mkdtemp(prefix="agentloop-bench-"))
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores, "
        + ", ".join(f"{k} {v}" for k, v in versions().items())
        + (" [--quick]" if quick else ""),
        flush=True,
    )
    started = time.perf_counter()
    try:
        for section in chosen:
            if section == "loop":
                await bench_loop(
                    (20, 80) if quick else (50, 200), 2 if quick else 11, tmp, args.profile
                )
            elif section == "pool":
                await bench_pool(200 if quick else 1000, 1 if quick else 3, tmp, args.profile)
            elif section == "ingest":
                await bench_ingest(
                    20_000 if quick else 200_000, 1 if quick else 3, tmp, args.profile
                )
            elif section == "resume":
                await bench_resume(
                    10_000 if quick else 100_000, 1 if quick else 5, tmp, args.profile
                )
            gc.unfreeze()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - started:.1f} s", flush=True)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "sections",
        nargs="*",
        metavar="section",
        help=f"any of {', '.join(SECTIONS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a < 20 s smoke run")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of measuring, cProfile one of our runs per chosen section",
    )
    args = parser.parse_args(argv)
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}: choose from {', '.join(SECTIONS)}")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
