"""Listing stored sessions: ``JsonlPersistence.scan()`` / ``list()`` over N sessions of S MB each
(headers only), against loading every one of them (what a listing that parsed bodies would
cost). Median of ``--reps`` rounds, cold-ish: the page cache is not dropped (that needs root
and would measure the disk, not the code), so this is the code's cost on warm files.

    python benchmarks/bench_listing.py [--sessions 10] [--megabytes 5] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agentloop_nb.session import JsonlPersistence, SessionEvent, SessionHeader


def build(root: Path, sessions: int, megabytes: int) -> int:
    """Write ``sessions`` sessions of about ``megabytes`` MB (realistic-sized events)."""
    backend = JsonlPersistence(root)
    text = "lorem ipsum dolor sit amet " * 40  # ~1 KB per event
    per_session = megabytes * 1024
    for s in range(sessions):
        sid = f"session-{s:03d}"
        backend.create(SessionHeader(sid, created_at=float(s), meta={"title": sid}))
        events = [
            SessionEvent(
                "user/message",
                i,
                1.0,
                {
                    "message": {
                        "role": "user",
                        "id": f"m{i}",
                        "content": [{"type": "text", "text": text}],
                    }
                },
            )
            for i in range(per_session)
        ]
        backend.append(sid, events)
    return sum(p.stat().st_size for p in root.glob("*.jsonl"))


def timed(fn: object, reps: int) -> float:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--megabytes", type=int, default=5)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        size = build(root, args.sessions, args.megabytes)
        backend = JsonlPersistence(root)
        scan = timed(backend.scan, args.reps)
        listed = timed(backend.list, args.reps)
        ids = [e.id for e in backend.scan()]

        def load_all() -> None:
            for sid in ids:
                backend.load(sid)

        load = timed(load_all, max(1, args.reps // 2))
    print(f"{args.sessions} sessions, {size / 1e6:.1f} MB in all; median of {args.reps} runs")
    print(f"  scan()            {scan * 1e3:9.2f} ms")
    print(f"  list()            {listed * 1e3:9.2f} ms")
    print(f"  load() every one  {load * 1e3:9.2f} ms   (what parsing the bodies would cost)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
