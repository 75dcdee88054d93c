"""Widget throttling under a fast token stream (goal: ≤ 30 front-end updates/s per view at
10,000 tokens/s, no event lost).

Streams text deltas at a paced 10,000 tokens/s for a few seconds into

- a ``SessionView`` fed straight from a ``Session`` (the view alone), and
- an ``AgentView`` on a real agent whose adapter streams at that pace (loop + persistence off),

counts every comm message the widgets send (the front-end traffic), and measures the lag from
the last chunk to the render that shows it. Prints a table, then what folding one logged chunk
into a ``Transcript`` costs (the per-token work every view shares). Run:
``.venv/bin/python benchmarks/bench_widgets.py [--seconds 3] [--rate 10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import comm

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.jupyter import AgentView, SessionView, Transcript
from agentloop_nb.llm import (
    BlockEnd,
    BlockStart,
    Finish,
    GenerateOptions,
    Stop,
    StreamChunk,
    TextDelta,
    Usage,
    UsageChunk,
)
from agentloop_nb.loop import AgentOptions
from agentloop_nb.session import SessionStore

COUNTS: Counter[str] = Counter()


def _count_comm_messages() -> None:
    original = comm.DummyComm.publish_msg

    def publish(self: Any, msg_type: str, *args: Any, **kwargs: Any) -> None:
        COUNTS[msg_type] += 1
        original(self, msg_type, *args, **kwargs)

    comm.DummyComm.publish_msg = publish  # type: ignore[method-assign]


async def _paced(rate: float, total: int, emit: Callable[[int], None]) -> float:
    """Call ``emit(i)`` for i in range(total) at ``rate`` per second; return the time of the
    last call."""
    start = time.monotonic()
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        while sent < due:
            emit(sent)
            sent += 1
        await asyncio.sleep(0.001)
    return time.monotonic()


async def bench_session_view(rate: float, seconds: float) -> dict[str, Any]:
    session = SessionStore(Context()).create("bench")
    view = SessionView(session)
    total = int(rate * seconds)
    tokens = [f"w{i} " for i in range(total)]
    COUNTS.clear()
    session.append("turn/start", {"turn": 1})
    session.append(
        "assistant/chunk",
        {"turn": 1, "step": 1, "chunk": {"type": "block-start", "index": 0, "block_type": "text"}},
    )
    t0 = time.monotonic()

    def emit(i: int) -> None:
        session.append(
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": tokens[i]}},
        )

    last = await _paced(rate, total, emit)
    await view.throttle.settled()
    lag = time.monotonic() - last
    elapsed = time.monotonic() - t0
    shown = next(i.text for i in view.transcript.items if i.kind == "assistant")
    return _row("SessionView", total, elapsed, view.throttle.renders, lag, shown == "".join(tokens))


class _PacedModel:
    def __init__(self, rate: float, total: int) -> None:
        self.rate = rate
        self.tokens = [f"w{i} " for i in range(total)]
        self.last = 0.0

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        yield BlockStart(index=0, block_type="text")
        start = time.monotonic()
        sent, total = 0, len(self.tokens)
        while sent < total:
            due = min(total, int((time.monotonic() - start) * self.rate) + 1)
            while sent < due:
                yield TextDelta(index=0, text=self.tokens[sent])
                sent += 1
            self.last = time.monotonic()
            await asyncio.sleep(0.001)
        yield BlockEnd(index=0)
        yield UsageChunk(usage=Usage(input_tokens=1, output_tokens=total))
        yield Finish(reason=Stop())


async def bench_agent_view(rate: float, seconds: float) -> dict[str, Any]:
    app = App()
    total = int(rate * seconds)
    model = _PacedModel(rate, total)
    app.ctx.llm.register_adapter(["paced"], model)
    agent = app.ctx.agent_loop.create("bench", AgentOptions(provider="paced", model="m"))
    view = AgentView(agent)
    COUNTS.clear()
    t0 = time.monotonic()
    agent.followup("go")
    await agent.when_idle()
    await view.settled()
    lag = time.monotonic() - model.last
    elapsed = time.monotonic() - t0
    renders = (
        view.session_view.throttle.renders + view.pool_view.throttle.renders + view.throttle.renders
    )
    shown = next(i.text for i in view.transcript.items if i.kind == "assistant")
    row = _row("AgentView (loop)", total, elapsed, renders, lag, shown == "".join(model.tokens))
    view.close()
    await app.aclose()
    return row


def _row(
    name: str, total: int, elapsed: float, renders: int, lag: float, exact: bool
) -> dict[str, Any]:
    messages = COUNTS["comm_msg"]
    return {
        "view": name,
        "tokens": total,
        "seconds": elapsed,
        "tokens/s": total / elapsed,
        "renders": renders,
        "comm msgs": messages,
        "msgs/s": messages / elapsed,
        "final lag ms": lag * 1000,
        "text exact": exact,
    }


def _print(rows: list[dict[str, Any]]) -> None:
    cols = list(rows[0])
    cells = [[f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True)))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    print("goal: ≤ 30 front-end updates/s per view at 10,000 tokens/s, final text exact")


def bench_fold(total: int = 100_000) -> float:
    """Microseconds to fold one logged text delta into a fresh ``Transcript`` (best of 3)."""
    session = SessionStore(Context()).create("fold")
    session.append("turn/start", {"turn": 1})
    for i in range(total):
        session.append(
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": f"w{i} "}},
        )
    events = session.events
    best = float("inf")
    for _ in range(3):
        transcript = Transcript()
        start = time.perf_counter()
        transcript.feed_all(events)
        best = min(best, time.perf_counter() - start)
    return best / len(events) * 1e6


async def main(rate: float, seconds: float) -> None:
    _count_comm_messages()
    rows = [await bench_session_view(rate, seconds), await bench_agent_view(rate, seconds)]
    _print(rows)
    print(f"fold: {bench_fold():.2f} µs per logged chunk")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10_000.0, help="tokens per second")
    parser.add_argument("--seconds", type=float, default=3.0, help="stream duration")
    ns = parser.parse_args()
    asyncio.run(main(ns.rate, ns.seconds))
