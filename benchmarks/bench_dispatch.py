"""The dispatcher on a private tmux server with the fake harness: spawn, event → pane latency, throughput, fan-out.

Run: ``.venv/bin/python benchmarks/bench_dispatch.py [--spawns 10] [--events 300] [--burst 300] [--items 50]
[--per-item 20] [--workers 4] [--profile] [--max-seconds 600]``. Measures, through :meth:`Dispatcher.dispatch`
(lock, registry read, ``input_received`` hooks, tmux delivery, registry write, one ``events.jsonl`` line):

- spawn: the ``dispatch(spawn=True)`` call, and call → the fake harness logs ``ready``;
- event → pane: call → the fake logs ``submit`` (its ``t`` is ``time.monotonic()``, CLOCK_MONOTONIC, which is
  system-wide on Linux, so it compares with this process's clock), and the part of the call spent in tmux;
- one pane: back-to-back dispatches, deliveries per second until the last one is submitted;
- fan-out: N work items x M events through :class:`DispatchQueue`; no loss, no cross-delivery, order kept per item.

Everything runs on one private ``-L`` server, killed at the end with the temporary directory; the config is the
dispatcher tests' (``defaultHarness: fake``). Target: event → text submitted in the pane p50 ≤ 15 ms; a miss prints
a cProfile of the dispatch path.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.models import WorkEvent
from the_loop.plugins import PluginHost, set_host
from the_loop.sessions.dispatcher import Dispatcher, DispatchQueue
from the_loop.sessions.tmux import TmuxRunner, unframed
from the_loop.state.registry import SessionRegistry
from the_loop.testing import fake_plugin
from the_loop.testing.harness import PROMPT

TARGET_P50 = 0.015
_ids = iter(range(1, 10**9))


class Tail:
    """A fake's JSONL log read incrementally (re-reading it whole on every poll would dominate the timings)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.records: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return self.records
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        self.records += [json.loads(line) for line in complete.splitlines() if line]
        return self.records

    def wait(self, kind: str, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The first ``count`` records of ``kind`` (boot submissions excluded) once there are that many."""
        deadline = time.monotonic() + timeout
        while True:
            found = [r for r in self.poll() if r["kind"] == kind and not r.get("boot")]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {self.path} has {len(found)} {kind!r} records, wanted {count}")
            time.sleep(0.0005)


class Bench:
    """One private tmux server, one state root, the fake plugin, and a dispatcher over them."""

    def __init__(self, tmp: Path, runner: TmuxRunner) -> None:
        self.tmp = tmp
        self.runner = runner
        self.logs = tmp / "logs"
        self.logs.mkdir()
        (tmp / "work").mkdir()
        (tmp / "home").mkdir()
        os.environ["HOME"] = str(tmp / "home")
        os.environ["FAKE_HARNESS_LOG"] = str(self.logs / "{session}.jsonl")  # one log per conversation
        os.environ["FAKE_TICKETS"] = str(tmp / "tickets.json")  # where the spawn announcement is "posted"
        set_host(PluginHost.create(load_entrypoints=False, plugins=[("fake", fake_plugin)]))
        self.config = self._config()
        self.dispatcher = Dispatcher(self.config, runner=runner)
        self.registry = SessionRegistry(self.config.state)

    def _config(self) -> LoadedConfig:
        from the_loop.plugins import get_host

        path = self.tmp / "cfg" / ".the-loop" / "cli-config.yaml"
        path.parent.mkdir(parents=True)
        routing = {
            "defaultHarness": "fake",
            "spawnOnUnmatched": "always",
            "spawnWorkdir": str(self.tmp / "work"),
            "tmux": {"socketName": self.runner.socket, "resumeProbeSeconds": 0.3},
        }
        path.write_text(yaml.safe_dump({"routing": routing}))
        config = load_config(path, get_host())
        events.configure(config.state.events_path, "bench")
        return config

    def tail(self, ref: str) -> Tail:
        own = self.registry.load(ref).own  # type: ignore[union-attr]
        assert own is not None, ref
        return Tail(self.logs / f"{own.harness_session_id}.jsonl")

    def target(self, ref: str) -> str:
        own = self.registry.load(ref).own  # type: ignore[union-attr]
        assert own is not None, ref
        return own.tmux_target

    def spawn(self, ref: str) -> tuple[float, Tail, float]:
        """Spawn ``ref``'s session: (call seconds, its log, the call's start on the monotonic clock)."""
        began = time.monotonic()
        outcome = self.dispatcher.dispatch(event(ref, "start the work", spawn=True))
        called = time.monotonic() - began
        assert outcome.status == "spawned", outcome
        return called, self.tail(ref), began

    def wait_prompt(self, ref: str, timeout: float = 30.0) -> None:
        """Until tmux shows the fake's prompt: then it has also seen the bracketed-paste switch."""
        deadline = time.monotonic() + timeout
        target = self.target(ref)
        while PROMPT not in self.runner.capture(target):
            if time.monotonic() > deadline:
                raise SystemExit(f"{ref}: the fake's prompt did not show within {timeout}s")
            time.sleep(0.005)


def event(ref: str, text: str, *, spawn: bool = False) -> WorkEvent:
    return WorkEvent(delivery_id=f"bench-{next(_ids)}", work_item=ref, text=text, spawn=spawn)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:7.2f}"


def row(label: str, values: list[float], note: str = "") -> None:
    print(
        f"{label:<34} {ms(statistics.median(values))} {ms(percentile(values, 95))} {ms(percentile(values, 99))} "
        f"{ms(max(values))}  {note}"
    )


def timing_deliver(runner: TmuxRunner, spent: list[float]) -> Callable[[str, str], None]:
    """Wrap ``runner.deliver`` to record how long each call spends in tmux (the rest is the dispatcher's)."""
    deliver = runner.deliver

    def timed(target: str, text: str) -> None:
        began = time.monotonic()
        try:
            deliver(target, text)
        finally:
            spent.append(time.monotonic() - began)

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=10)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--per-item", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--profile", action="store_true", help="print the dispatch profile even when the target is met")
    parser.add_argument("--max-seconds", type=float, default=600, help="give up (and clean up) after this long")
    args = parser.parse_args()
    binary = shutil.which("tmux")
    if binary is None:
        raise SystemExit("tmux is not installed")
    for name in [k for k in os.environ if k.startswith("THE_LOOP_") or k in ("TMUX", "TMUX_PANE")]:
        del os.environ[name]  # never reach an operator's tmux or config
    version = subprocess.run([binary, "-V"], capture_output=True, text=True, check=False).stdout.strip()
    runner = TmuxRunner(socket=f"the-loop-bench-{secrets.token_hex(6)}", binary=binary)
    socket_file = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / runner.socket
    tmp = Path(tempfile.mkdtemp(prefix="the-loop-bench-dispatch-"))
    print(f"{version}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, server -L {runner.socket}")
    deadline = time.monotonic() + args.max_seconds
    try:
        run(Bench(tmp, runner), args, deadline)
    finally:
        set_host(None)
        subprocess.run([binary, "-L", runner.socket, "kill-server"], capture_output=True, timeout=10, check=False)
        socket_file.unlink(missing_ok=True)  # tmux leaves its socket file behind
        shutil.rmtree(tmp, ignore_errors=True)


def check_time(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise SystemExit("--max-seconds reached: stopping (tables above are complete)")


def run(bench: Bench, args: argparse.Namespace, deadline: float) -> None:
    print(f"{'milliseconds':<34} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}")
    print("-" * 66)

    # (a) Spawn: the dispatch call (lock, registry, template, tmux new-session, record, announce), then → ready.
    calls, readies = [], []
    for i in range(args.spawns):
        ref = f"fake:octo/spawn#{i + 1}"
        called, tail, began = bench.spawn(ref)
        (ready,) = tail.wait("ready", 1)
        calls.append(called)
        readies.append(ready["t"] - began)
        bench.runner.kill(bench.target(ref))  # keep the server small for what follows
    row("spawn: dispatch(spawn=True) call", calls, f"n={args.spawns}")
    row("spawn: call → fake ready", readies, "(includes the python fake's start-up)")
    check_time(deadline)

    # (b) Event → pane, one at a time into one live session.
    ref = "fake:octo/repo#1"
    bench.spawn(ref)
    bench.wait_prompt(ref)
    tail = bench.tail(ref)
    in_tmux: list[float] = []
    bench.dispatcher.runner.deliver = timing_deliver(bench.runner, in_tmux)  # type: ignore[method-assign]
    latencies, durations = [], []
    for i in range(args.events):
        text = f"event {i}\nsecond line of event {i}"
        began = time.monotonic()
        outcome = bench.dispatcher.dispatch(event(ref, text))
        durations.append(time.monotonic() - began)
        assert outcome.status == "delivered", outcome
        submitted = tail.wait("submit", i + 1)[-1]
        assert unframed(submitted["text"]) == text, submitted
        latencies.append(submitted["t"] - began)
        check_time(deadline)
    overhead = [total - tmux for total, tmux in zip(durations, in_tmux, strict=True)]
    p50 = statistics.median(latencies)
    row("dispatch() call", durations, f"n={args.events}")
    row("  of which runner.deliver (tmux)", in_tmux)
    row("  of which the dispatcher's own", overhead, "(lock, registry read+write, hooks, events.jsonl)")
    row(
        "event → submitted in the pane",
        latencies,
        f"[target p50 ≤ {TARGET_P50 * 1000:.0f} ms: {'met' if p50 <= TARGET_P50 else 'MISSED'}]",
    )
    del bench.dispatcher.runner.deliver  # back to the class's method

    # (c) Back to back into the same pane.
    texts = [f"burst {i}" for i in range(args.burst)]
    done_before = len(tail.wait("submit", args.events))
    began = time.monotonic()
    for text in texts:
        outcome = bench.dispatcher.dispatch(event(ref, text))
        assert outcome.status == "delivered", outcome
    done = tail.wait("submit", done_before + args.burst, timeout=120)[done_before:]
    elapsed = done[-1]["t"] - began
    assert [unframed(r["text"]) for r in done] == texts, "the burst lost, merged or reordered deliveries"
    print(
        f"\none pane, back to back: {args.burst / elapsed:.0f} deliveries/s "
        f"({args.burst} in {elapsed:.2f} s, order kept)"
    )
    check_time(deadline)

    # (d) N work items x M events through the queue, submitted interleaved as a webhook burst would arrive.
    refs = [f"fake:octo/many#{n + 1}" for n in range(args.items)]
    for item in refs:
        bench.spawn(item)
    for item in refs:
        bench.wait_prompt(item)
    tails = {item: bench.tail(item) for item in refs}
    queue = DispatchQueue(bench.dispatcher, max_workers=args.workers)
    began = time.monotonic()
    try:
        futures = [queue.submit(event(item, f"{item} #{n}")) for n in range(args.per_item) for item in refs]
        outcomes = [future.result(timeout=max(1.0, deadline - time.monotonic())) for future in futures]
    finally:
        queue.shutdown()
    returned = time.monotonic() - began
    assert all(o.status == "delivered" for o in outcomes), [o for o in outcomes if o.status != "delivered"][:3]
    last = 0.0
    for item, item_tail in tails.items():
        got = [unframed(r["text"]) for r in item_tail.wait("submit", args.per_item, timeout=60)]
        assert got == [f"{item} #{n}" for n in range(args.per_item)], f"{item}: lost, crossed or reordered: {got}"
        last = max(last, item_tail.records[-1]["t"])
    leftovers = bench.runner._run(["list-buffers"])
    assert leftovers is not None and leftovers.stdout == b"", f"buffers left behind: {leftovers}"
    total = args.items * args.per_item
    elapsed = last - began
    print(
        f"{args.items} items x {args.per_item} events via DispatchQueue({args.workers} workers): {elapsed:.2f} s to "
        f"the last submit ({returned:.2f} s to the last outcome), {total / elapsed:.0f} events/s; "
        "none lost, none crossed, order kept per item, no buffers left"
    )

    if p50 > TARGET_P50 or args.profile:
        profile(bench, ref, tail, min(args.events, 100))


def profile(bench: Bench, ref: str, tail: Tail, count: int) -> None:
    """Where one dispatch's time goes, over ``count`` deliveries into the live pane."""
    done = len(tail.wait("submit", 0))
    profiler = cProfile.Profile()
    for i in range(count):
        profiler.enable()
        bench.dispatcher.dispatch(event(ref, f"profiled {i}"))
        profiler.disable()
        tail.wait("submit", done + i + 1)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
    print(f"\ncProfile of {count} dispatch() calls (cumulative):")
    print(out.getvalue())


if __name__ == "__main__":
    main()
