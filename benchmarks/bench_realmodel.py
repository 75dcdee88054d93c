"""Real-model overhead: an agent streaming from llama-server vs a raw httpx streaming request to
the same server with the same body. Prints a table; asserts nothing.

    bash scripts/realmodel.sh 8080 &                         # llama-server + Gemma 3 270M
    AGENTLOOP_REALMODEL_URL=http://127.0.0.1:8080 .venv/bin/python benchmarks/bench_realmodel.py
    ... bench_realmodel.py --rounds 30 --max-tokens 64 --jsonl

Per round, in alternating order (A B, then B A), each contender sends one request:

- **agent**: a fresh agent (built before the clock starts) gets ``followup(prompt)``; time to
  first token is from that call to the first ``text-delta`` announced on ``session/chunk``, and
  the stream ends at the ``assistant/message``. Everything the loop does is inside: the wake, the
  hooks, the request build, the adapter, SSE parsing, assembly and the session log (JSONL on
  with ``--jsonl``).
- **raw**: ``httpx.AsyncClient.stream("POST", .../chat/completions)`` with the exact JSON body
  the agent sent (captured once), reading SSE lines; time to first token is from the call to
  the first line carrying ``delta.content``.

Both open a fresh loopback connection per request and hit the server's prompt cache (the same prompt every
time), so the difference is the client side. Chunk throughput is the number of content chunks
after the first divided by the time from the first to the last. Medians and p90 of ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import httpx

from agentloop_nb import AgentOptions, App

PROVIDER = "llamacpp"
MODEL = "gemma-3-270m"
PROMPT = "Write a short paragraph about lighthouses."
# A new loopback connection per request for both contenders: llama-server's HTTP library closes
# a kept-alive connection after a few requests, which httpx only notices on the next send.
FRESH = httpx.Limits(max_keepalive_connections=0)


class Capture:
    """Records the JSON body of every request the agent's HTTP client sends."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> None:
        self.bodies.append(json.loads(request.content))


async def agent_round(app: App, n: int, options: AgentOptions) -> tuple[float, float, int]:
    """(ttft s, stream s after the first token, content chunks) for one agent turn."""
    agent = app.ctx.agent_loop.create(f"bench-{n}", options)
    marks: list[float] = []
    done = asyncio.Event()

    def on_chunk(payload: Any) -> None:  # live, as each chunk arrives
        if payload.session is agent.session and payload.chunk["type"] == "text-delta":
            marks.append(time.perf_counter())

    def on_event(payload: Any) -> None:
        if payload.session is agent.session and payload.event.type in (
            "assistant/message",
            "turn/end",
        ):
            done.set()  # turn/end too: a failed request logs no assistant/message

    offs = [app.ctx.on("session/chunk", on_chunk), app.ctx.on("session/event", on_event)]
    try:
        start = time.perf_counter()
        agent.followup(PROMPT)
        await asyncio.wait_for(done.wait(), 120)
        await agent.when_idle()
    finally:
        for off in offs:
            off()
    if not marks:
        ends = [e.data for e in agent.session.events if e.type == "turn/end"]
        raise RuntimeError(f"the agent streamed no text; is the server up? turn/end: {ends}")
    return marks[0] - start, marks[-1] - marks[0], len(marks)


async def raw_round(
    client: httpx.AsyncClient, url: str, body: dict[str, Any]
) -> tuple[float, float, int]:
    """(ttft s, stream s after the first token, content chunks) for one raw request."""
    marks: list[float] = []
    start = time.perf_counter()
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or []
            if choices and choices[0].get("delta", {}).get("content"):
                marks.append(time.perf_counter())
    if not marks:
        raise RuntimeError("the raw request streamed no text")
    return marks[0] - start, marks[-1] - marks[0], len(marks)


def p90(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.9 * len(values)) - 1)]


async def main(args: argparse.Namespace) -> None:
    base = args.url.rstrip("/")
    capture = Capture()
    options = AgentOptions(
        provider=PROVIDER, model=MODEL, max_tokens=args.max_tokens, temperature=0.0
    )
    with tempfile.TemporaryDirectory() as root:
        async with (
            httpx.AsyncClient(
                event_hooks={"request": [capture]}, timeout=120, limits=FRESH
            ) as agent_http,
            httpx.AsyncClient(timeout=120, limits=FRESH) as raw_http,
        ):
            providers = {
                PROVIDER: {"type": "openai", "base_url": base + "/v1", "client": agent_http}
            }
            app = App(providers=providers, persistence_root=root if args.jsonl else None)
            try:
                await agent_round(app, -1, options)  # warm-up; captures the body
                body = capture.bodies[-1]
                await raw_round(raw_http, base + "/v1/chat/completions", body)
                results: dict[str, list[tuple[float, float, int]]] = {"agent": [], "raw": []}
                for n in range(args.rounds):
                    order = ("agent", "raw") if n % 2 == 0 else ("raw", "agent")
                    for who in order:
                        if who == "agent":
                            results[who].append(await agent_round(app, n, options))
                        else:
                            url = base + "/v1/chat/completions"
                            results[who].append(await raw_round(raw_http, url, body))
            finally:
                await app.aclose()
    report(results, args)


def report(results: dict[str, list[tuple[float, float, int]]], args: argparse.Namespace) -> None:
    print(
        f"rounds={args.rounds} max_tokens={args.max_tokens} jsonl={args.jsonl} "
        f"python={sys.version.split()[0]} load={os.getloadavg()[0]:.2f}"
    )
    print("| contender | TTFT median ms | TTFT p90 ms | chunks/s median | chunks/turn |")
    print("|---|---|---|---|---|")
    medians: dict[str, tuple[float, float]] = {}
    for who, rows in results.items():
        ttft = [r[0] * 1000 for r in rows]
        rate = [(r[2] - 1) / r[1] for r in rows if r[1] > 0 and r[2] > 1]
        medians[who] = (statistics.median(ttft), statistics.median(rate) if rate else 0.0)
        chunks = statistics.median(r[2] for r in rows)
        print(
            f"| {who} | {medians[who][0]:.2f} | {p90(ttft):.2f} | {medians[who][1]:.1f} "
            f"| {chunks:.0f} |"
        )
    agent, raw = medians["agent"], medians["raw"]
    print(
        f"\nTTFT agent - raw: {agent[0] - raw[0]:+.2f} ms (goal <= +2 ms); "
        f"throughput agent/raw: {agent[1] / raw[1]:.3f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=os.environ.get("AGENTLOOP_REALMODEL_URL"))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--jsonl", action="store_true", help="persist the session (JSONL)")
    parsed = parser.parse_args()
    if not parsed.url:
        parser.error("no server: pass --url or set AGENTLOOP_REALMODEL_URL (scripts/realmodel.sh)")
    asyncio.run(main(parsed))
