"""Inbox accept throughput and latency: ``Inbox.put`` of ~12 KB entries, every one fsync'd before it returns.

Run: ``.venv/bin/python benchmarks/bench_inbox.py [--puts N] [--threads T] [--repeat K] [--dir PATH]``. Prints, per
run, puts/s, the put latency p50/p99 and the puts per group commit (one directory fsync each), for T threads sharing
one inbox (group commit) and for one thread alone. A worker thread settles entries as they arrive, as in a running
daemon, unless ``--no-worker`` is given. Target: ≥ 800 puts/s from 16 threads. Use a ``--dir`` on the disk the
state root lives on (tmpfs makes fsync free and the figures meaningless).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from the_loop.inbox import Inbox
from the_loop.inbox.worker import InboxWorker
from the_loop.state import StateLayout


def sample_entry(number: int) -> dict[str, object]:
    """A comment delivery of ≈12 KB: normalized fields plus an excerpt with a long body."""
    return {
        "dedupe_key": f"github:comment:IC_kwDOA{number:012d}",
        "provider": "github",
        "transport": "webhook",
        "kind": "comment",
        "action": "created",
        "repository": "octo/repo",
        "actor": {"provider": "github", "id": "octocat"},
        "work_items": [f"github:octo/repo#{number % 50}"],
        "body": ("Please add tests for the poller's backoff, and check the rate-limit headers. " * 150)[:11800],
        "received_at": "2026-07-31T09:11:58.000Z",
    }


def run(root: Path, puts: int, threads: int, worker: bool) -> tuple[float, list[float], float]:
    inbox = Inbox(StateLayout(root))
    entries = [sample_entry(n) for n in range(puts)]
    latencies: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    drain = InboxWorker(Inbox(StateLayout(root)), lambda entry: type("Outcome", (), {"status": "delivered"})())
    drainer = threading.Thread(target=drain.run, args=(stop.is_set, 0.01)) if worker else None

    def writer(start: int) -> None:
        mine = []
        for n in range(start, puts, threads):
            began = time.perf_counter()
            assert inbox.put(f"github:comment:{n}", entries[n])
            mine.append(time.perf_counter() - began)
        with lock:
            latencies.extend(mine)

    pool = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    if drainer is not None:
        drainer.start()
    began = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    stop.set()
    if drainer is not None:
        drainer.join()
    return puts / elapsed, latencies, puts / max(inbox.commits, 1)


def report(label: str, rate: float, latencies: list[float], per_commit: float) -> None:
    cuts = statistics.quantiles(latencies, n=100)
    print(
        f"{label:<34} {rate:8.0f} puts/s   p50 {cuts[49] * 1000:6.2f} ms   p99 {cuts[98] * 1000:6.2f} ms   "
        f"{per_commit:5.1f} puts/commit"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to make the temporary state roots")
    parser.add_argument("--no-worker", action="store_true", help="let the inbox fill up instead of draining it")
    args = parser.parse_args()
    worker = not args.no_worker
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            report(f"{args.threads} threads, group commit", *run(Path(tmp) / "many", args.puts, args.threads, worker))
            report("1 thread, no contention", *run(Path(tmp) / "one", max(args.puts // 4, 200), 1, worker))


if __name__ == "__main__":
    main()
