"""``the-loop events`` over a large log: the whole command as a process, and the in-process reader.

Run: ``.venv/bin/python benchmarks/bench_events.py [--lines N] [--repeat K]``. Writes N event lines (default
100,000, ≈18 MB) to a temporary log, then prints one line per figure (median, min and max of K runs, in
milliseconds). Target: every figure under 1 s at 100,000 lines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from the_loop.events import EventFilter, read_events

TYPES = ("dispatch.queued", "dispatch.succeeded", "session.spawned", "poll.cycle", "routing.routed", "webhook.received")
SOURCES = ("gh-webhook", "poll", "sessions")


def write_log(path: Path, lines: int) -> None:
    """A realistic log: envelope plus a work item, a delivery id and a reason; 500 distinct work items."""
    with path.open("w", encoding="utf-8") as handle:
        for i in range(lines):
            record = {
                "ts": f"2026-07-22T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
                "source": SOURCES[i % len(SOURCES)],
                "event": TYPES[i % len(TYPES)],
                "level": "warning" if i % 50 == 0 else "info",
                "pid": 4242,
                "work_item": f"github:octo/repo#{i % 500}",
                "delivery_id": f"0b7e{i:08x}-delivery",
                "reason": "queued behind an earlier delivery",
            }
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")


def timed(run: Callable[[], object], repeat: int) -> list[float]:
    run()  # warm the page cache and __pycache__
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def report(label: str, samples: list[float]) -> None:
    print(
        f"{label:<58} median {statistics.median(samples):7.1f} ms   min {min(samples):7.1f}   max {max(samples):7.1f}"
    )


def cli(log: Path, cwd: Path, *args: str) -> Callable[[], object]:
    argv = [sys.executable, "-m", "the_loop", "events", "--file", str(log), *args]
    env = {**os.environ, "HOME": str(cwd)}

    def run() -> object:
        result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=True)
        assert result.stdout, "the benchmark query matched nothing"
        return result

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "events.jsonl"
        write_log(log, options.lines)
        size = log.stat().st_size / 1e6
        print(f"events.jsonl: {options.lines:,} lines, {size:.1f} MB; {options.repeat} runs each")
        cwd = Path(tmp)
        report(
            "process: events --type 'dispatch.*' --limit 50",
            timed(cli(log, cwd, "--type", "dispatch.*"), options.repeat),
        )
        report(
            "process: events --work-item github:octo/repo#7",
            timed(cli(log, cwd, "--work-item", "github:octo/repo#7"), options.repeat),
        )
        report(
            "process: events --work-item … --format jsonl --limit 0",
            timed(
                cli(log, cwd, "--work-item", "github:octo/repo#7", "--format", "jsonl", "--limit", "0"), options.repeat
            ),
        )
        report("process: events --types (start-up and catalog only)", timed(cli(log, cwd, "--types"), options.repeat))
        report(
            "in-process: read_events(type='dispatch.*', limit=50)",
            timed(lambda: read_events(log, EventFilter(types=("dispatch.*",)), 50), options.repeat),
        )
        report(
            "in-process: read_events(work_item=…, limit=50)",
            timed(lambda: read_events(log, EventFilter(work_item="github:octo/repo#7"), 50), options.repeat),
        )


if __name__ == "__main__":
    main()
