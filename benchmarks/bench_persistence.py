"""Persistence backends compared: write-behind appends/s and resume time of a 100k-event session,
PostgreSQL vs JSONL, interleaved in one process (median of ``--reps`` rounds).

The session is the realistic one of ``bench_loop.py`` (d) (turns of 50 tool steps with streamed
preambles), written once through an App with JSONL, then replayed event for event:

- appends: a published session on a ``Context`` with the backend installed; the clock runs from
  the first ``session.append`` to the end of ``await session.flush()`` (every event durable).
- resume: ``backend.load(id)`` alone, and ``await app.ctx.agents.resume(...)`` end to end.

PostgreSQL comes from ``AGENTLOOP_TEST_DATABASE_URL`` or ``--dsn`` (a throwaway cluster:
``source scripts/_setup.sh && ensure_postgres`` in a shell, as ``scripts/test.sh`` does); each
run uses a fresh schema, dropped at the end.

    python benchmarks/bench_persistence.py [--events 100000] [--reps 3] [--dsn URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_loop import table, timed, write_session

from agentloop_nb.app import App
from agentloop_nb.context import Context
from agentloop_nb.session import (
    JsonlPersistence,
    PostgresPersistence,
    SessionEvent,
    SessionStore,
)


def replay(session: Any, events: Sequence[SessionEvent]) -> None:
    append = session.append
    for e in events:
        append(
            e.type,
            e.data,
            surface_op=e.surface_op,
            source_event_seqs=e.source_event_seqs or None,
            time=e.time,
        )


async def appends(make: Callable[[], Any], sid: str, events: Sequence[SessionEvent]) -> float:
    """Seconds to append ``events`` to a new session and flush them, through write-behind."""
    backend = make()
    ctx = Context()
    backend.install(ctx)
    store = SessionStore(ctx)
    session = store.create(sid)

    async def run() -> None:
        replay(session, events)
        await session.flush()

    elapsed = await timed(run)
    store.detach(session)
    await backend.aclose()
    return elapsed


async def resume_e2e(make: Callable[[], Any], sid: str) -> float:
    app = App(persistence=make())
    handle: Any = None

    async def run() -> None:
        nonlocal handle
        handle = await app.ctx.agents.resume(resume_session_id=sid)

    elapsed = await timed(run)
    await handle.dispose()
    await app.aclose()
    return elapsed


async def load(make: Callable[[], Any], sid: str) -> float:
    backend = make()

    async def run() -> Any:
        return backend.load(sid)

    elapsed = await timed(run)
    if hasattr(backend, "aclose"):
        await backend.aclose()
    return elapsed


def drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def main(args: argparse.Namespace) -> None:
    dsn = args.dsn or os.environ.get("AGENTLOOP_TEST_DATABASE_URL")
    if not dsn:
        sys.exit("no PostgreSQL: set AGENTLOOP_TEST_DATABASE_URL or pass --dsn")
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src, _ = await write_session(root / "src", args.events)
        _, events = JsonlPersistence(root / "src").load(src)
        size = (root / "src" / f"{src}.jsonl").stat().st_size
        makers: dict[str, Callable[[], Any]] = {
            "JSONL": lambda: JsonlPersistence(root / "jsonl"),
            "PostgreSQL": lambda: PostgresPersistence(dsn, schema=schema),
        }
        samples: dict[tuple[str, str], list[float]] = {}
        try:
            for rep in range(args.reps):
                for name, make in makers.items():
                    sid = f"s{rep}"
                    samples.setdefault((name, "append"), []).append(
                        await appends(make, sid, events)
                    )
                    samples.setdefault((name, "load"), []).append(await load(make, sid))
                    samples.setdefault((name, "resume"), []).append(await resume_e2e(make, sid))
        finally:
            drop_schema(dsn, schema)
    n = len(events)
    rows = []
    for name in makers:
        a = statistics.median(samples[(name, "append")])
        ld = statistics.median(samples[(name, "load")])
        r = statistics.median(samples[(name, "resume")])
        rows.append([name, f"{n / a:,.0f}", a * 1000, ld * 1000, r * 1000])
    table(
        f"persistence: {n:,} events ({size / 1e6:.1f} MB as JSONL), median of {args.reps} "
        "interleaved rounds",
        [
            "backend",
            "appends/s (write-behind, to durable)",
            "append+flush ms",
            "load ms",
            "resume ms (agents.resume)",
        ],
        rows,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dsn", default=None)
    anyio.run(main, parser.parse_args())
