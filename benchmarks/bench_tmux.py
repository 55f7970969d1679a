"""Benchmark the tmux runner against the fake harness on a private tmux server.

    .venv/bin/python benchmarks/bench_tmux.py [--deliveries 200] [--sessions 50] [--per-session 20]

Measures spawn latency (the call, and call → the fake's TUI ready), probe cost, deliver → submitted-in-the-pane
latency (from the fake's own timestamps, CLOCK_MONOTONIC is shared across processes), back-to-back deliveries per
second into one pane, and N sessions x M deliveries concurrently (no loss, no cross-delivery, order kept per
session). Everything runs on one private ``-L`` server that is killed at the end; nothing leaves the machine.
Target: deliver → submitted p50 ≤ 15 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from the_loop.sessions.tmux import TmuxRunner, unframed
from the_loop.testing.harness import FakeHarness


class Tail:
    """Read a fake's JSONL log incrementally (re-reading it whole on every poll would dominate the timings)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.records: list[dict] = []

    def poll(self) -> list[dict]:
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        self.records += [json.loads(line) for line in complete.splitlines() if line]
        return self.records

    def wait(self, kind: str, count: int, timeout: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            found = [r for r in self.poll() if r["kind"] == kind]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {self.path} has {len(found)} {kind!r} records, wanted {count}")
            time.sleep(0.0005)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


def spawn_ready(runner: TmuxRunner, fake: FakeHarness, target: str, cwd: Path) -> tuple[float, float]:
    """(spawn call seconds, call → fake ready seconds); returns once tmux shows the prompt."""
    tail = Tail(fake.log)
    began = time.monotonic()
    result = runner.spawn(target, cwd, fake.argv(session_id=secrets.token_hex(8)))
    called = time.monotonic() - began
    assert result.spawned, result
    (ready,) = tail.wait("ready", 1)
    fake.wait_ready(screen=lambda: runner.capture(target))
    return called, ready["t"] - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=200)
    parser.add_argument("--spawns", type=int, default=20)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--per-session", type=int, default=20)
    args = parser.parse_args()
    binary = shutil.which("tmux")
    if binary is None:
        raise SystemExit("tmux is not installed")
    version = subprocess.run([binary, "-V"], capture_output=True, text=True, check=False).stdout.strip()
    runner = TmuxRunner(socket=f"the-loop-bench-{secrets.token_hex(6)}", binary=binary)
    socket_file = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / runner.socket
    work = Path(tempfile.mkdtemp(prefix="the-loop-bench-"))
    print(f"{version}, python {sys.version.split()[0]}, server -L {runner.socket}")
    try:
        run(runner, work, args)
    finally:
        subprocess.run([binary, "-L", str(runner.socket), "kill-server"], capture_output=True, check=False)
        socket_file.unlink(missing_ok=True)  # tmux leaves its socket file behind
        shutil.rmtree(work, ignore_errors=True)


def run(runner: TmuxRunner, work: Path, args: argparse.Namespace) -> None:
    def new_fake(name: str) -> FakeHarness:
        log = work / f"{name}.jsonl"
        log.touch()
        return FakeHarness(log)

    # Spawn latency: the call itself (probe + new-session with remain-on-exit), and call → the TUI is ready.
    calls, readies = [], []
    for i in range(args.spawns):
        called, ready = spawn_ready(runner, new_fake(f"spawn-{i}"), f"loop-bench-spawn-{i}", work)
        calls.append(called)
        readies.append(ready)
    print(f"spawn call      p50 {ms(statistics.median(calls))}  p95 {ms(percentile(calls, 95))}  (n={args.spawns})")
    print(
        f"spawn → ready   p50 {ms(statistics.median(readies))}  p95 {ms(percentile(readies, 95))}  (python fake boot)"
    )

    probes = []
    for i in range(200):
        began = time.monotonic()
        runner.probe(f"loop-bench-spawn-{i % args.spawns}")
        probes.append(time.monotonic() - began)
    print(f"probe           p50 {ms(statistics.median(probes))}  p99 {ms(percentile(probes, 99))}  (one invocation)")

    # Deliver → submitted, one at a time.
    fake = new_fake("latency")
    spawn_ready(runner, fake, "loop-bench-latency-1", work)
    tail = Tail(fake.log)
    latencies, durations = [], []
    for i in range(args.deliveries):
        began = time.monotonic()
        runner.deliver("loop-bench-latency-1", f"event {i}\nsecond line of event {i}")
        durations.append(time.monotonic() - began)
        submitted = tail.wait("submit", i + 1)[-1]
        assert unframed(submitted["text"]) == f"event {i}\nsecond line of event {i}", submitted
        latencies.append(submitted["t"] - began)
    p50 = statistics.median(latencies)
    print(
        f"deliver call    p50 {ms(statistics.median(durations))}  p99 {ms(percentile(durations, 99))}  "
        f"(n={args.deliveries})"
    )
    print(
        f"deliver → submitted  p50 {ms(p50)}  p99 {ms(percentile(latencies, 99))}  max {ms(max(latencies))}  "
        f"[target p50 ≤ 15 ms: {'met' if p50 <= 0.015 else 'MISSED'}]"
    )

    # Back to back into one pane.
    fake = new_fake("burst")
    spawn_ready(runner, fake, "loop-bench-burst-1", work)
    tail = Tail(fake.log)
    texts = [f"burst {i}" for i in range(args.burst)]
    began = time.monotonic()
    for text in texts:
        runner.deliver("loop-bench-burst-1", text)
    done = tail.wait("submit", args.burst)
    elapsed = done[-1]["t"] - began
    assert [unframed(r["text"]) for r in done] == texts, "burst lost, merged or reordered deliveries"
    print(f"one pane        {args.burst / elapsed:.0f} deliveries/s  ({args.burst} in {elapsed:.2f} s, order kept)")

    # N sessions x M deliveries at once, one thread per session.
    fakes = {f"loop-bench-many-{i}": new_fake(f"many-{i}") for i in range(args.sessions)}
    for target, fake in fakes.items():
        runner.spawn(target, work, fake.argv(session_id=secrets.token_hex(8)))
    for target, fake in fakes.items():
        fake.wait_ready(screen=lambda target=target: runner.capture(target))
    errors: list[BaseException] = []

    def send(target: str) -> None:
        try:
            for i in range(args.per_session):
                runner.deliver(target, f"{target} #{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(target,)) for target in fakes]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    last = 0.0
    for target, fake in fakes.items():
        got = Tail(fake.log).wait("submit", args.per_session)
        assert [unframed(r["text"]) for r in got] == [f"{target} #{i}" for i in range(args.per_session)], target
        last = max(last, got[-1]["t"])
    assert not errors, errors
    total = args.sessions * args.per_session
    leftovers = subprocess.run(
        [runner.binary, "-L", str(runner.socket), "list-buffers"], capture_output=True, text=True, check=False
    ).stdout
    assert leftovers == "", f"buffers left behind: {leftovers}"
    print(
        f"{args.sessions} sessions x {args.per_session} concurrently  {total / (last - began):.0f} deliveries/s "
        f"({total} in {last - began:.2f} s; none lost, none crossed, order kept, no buffers left)"
    )


if __name__ == "__main__":
    main()
