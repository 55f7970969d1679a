"""A soak of the real GitHub receiver under attack: well-behaved signed deliveries keep being accepted, exactly once,
while hostile clients hold idle sockets, send endless headers and stream oversized bodies.

Run: ``.venv/bin/python benchmarks/bench_soak.py [--seconds 60] [--senders 16] [--idle 32] [--flooders 8]
[--oversize 4] [--dir PATH]``.

Starts ``the-loop daemon run gh-webhook`` (the GitHub plugin's route, default limits: ``maxConcurrency`` 64, so at
most 32 connections from one address) with a worker settling inbox entries as a daemon's does. For ``--seconds``:

- ``--senders`` keep-alive httpx clients on 127.0.0.1 POST distinct signed ~12 KB issue comments, back to back;
- in another process, ``--idle`` sockets from 127.0.0.2 connect and send nothing (reconnecting whenever the
  receiver drops them), ``--flooders`` sockets from 127.0.0.3 send header lines without end, and ``--oversize``
  sockets from 127.0.0.4 stream bodies declared at 30 MB — each of them over again as soon as it is refused.

Prints what the senders got (accepted/s, p50/p99, any answer that was not a 2xx), what the hostile clients got
(answers by status), the receiver's resident memory (start, peak, end; sampled every 0.25 s) and whether every
accepted delivery is in the inbox exactly once. Targets: every delivery a 2xx, memory within 100 MB of its start,
nothing lost or doubled.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_webhook import deliveries, drive, percentile, receiver_in

_TALLY_LOCK = threading.Lock()


# ---------------------------------------------------------------------------------------------- hostile side


def _hostile_worker(kind: str, port: int, source: str, stop: Any, tally: collections.Counter[str]) -> None:
    """One hostile connection, over and over until ``stop``: what the receiver answered is counted by status."""
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0)) as conn:
                conn.settimeout(1.0)
                answer = _attack(kind, conn, stop)
        except OSError:
            answer = "refused"
        with _TALLY_LOCK:
            tally[f"{kind} {answer}"] += 1
        time.sleep(0.01)


def _attack(kind: str, conn: socket.socket, stop: Any) -> str:
    if kind == "oversize":
        conn.sendall(
            b"POST /gh-webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issue_comment\r\n"
            b"Content-Type: application/json\r\nContent-Length: 31457280\r\n\r\n"
        )
    elif kind == "flood":
        conn.sendall(b"POST /gh-webhook HTTP/1.1\r\nHost: x\r\n")
    chunk = b"x" * 16384 if kind == "oversize" else b"X-Flood: " + b"a" * 200 + b"\r\n"
    while not stop.is_set():
        try:
            if kind != "idle":
                conn.sendall(chunk)
            data = conn.recv(4096) if kind == "idle" else _peek(conn)
        except TimeoutError:
            continue
        except OSError:
            return "reset"
        if data == b"":
            return "closed"
        if data:
            return data.split(b"\r\n", 1)[0].decode("latin-1", "replace").split(" ", 2)[1]
    return "held to the end"


def _peek(conn: socket.socket) -> bytes | None:
    conn.setblocking(False)
    try:
        return conn.recv(4096)
    except BlockingIOError:
        return None
    finally:
        conn.settimeout(1.0)


def hostile(port: int, counts: dict[str, int], seconds: float, answers: Any, stop: Any) -> None:
    """The hostile process: one thread per hostile connection."""
    sources = {"idle": "127.0.0.2", "flood": "127.0.0.3", "oversize": "127.0.0.4"}
    tally: collections.Counter[str] = collections.Counter()
    threads = [
        threading.Thread(target=_hostile_worker, args=(kind, port, sources[kind], stop, tally), daemon=True)
        for kind, count in counts.items()
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    stop.wait(seconds + 5)
    for thread in threads:
        thread.join(timeout=3)
    with _TALLY_LOCK:
        answers.update(tally)


# ------------------------------------------------------------------------------------------------- good side


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--idle", type=int, default=32, help="idle sockets, from one address (default 32)")
    parser.add_argument("--flooders", type=int, default=8, help="endless-header senders (default 8)")
    parser.add_argument("--oversize", type=int, default=4, help="oversized-body senders (default 4)")
    parser.add_argument("--rate", type=int, default=400, help="deliveries made ready per second of soak")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the state root (default: a temp dir)")
    args = parser.parse_args()

    items = deliveries(int(args.seconds * args.rate))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root, process, url, drain = receiver_in(tmp)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        drain.__enter__()
        manager = multiprocessing.Manager()
        answers, stop = manager.dict(), manager.Event()
        counts = {"idle": args.idle, "flood": args.flooders, "oversize": args.oversize}
        attacker = multiprocessing.Process(target=hostile, args=(port, counts, args.seconds, answers, stop))
        memory: list[float] = []
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                memory.append(rss_mb(process.pid))
                time.sleep(0.25)

        start_rss = rss_mb(process.pid)
        sampler = threading.Thread(target=sample, daemon=True)
        try:
            print(
                f"receiver {url}; {args.senders} senders; hostile: {args.idle} idle, {args.flooders} "
                f"header flooders, {args.oversize} oversized bodies; {args.seconds:g} s"
            )
            sampler.start()
            attacker.start()
            time.sleep(1.0)  # the hostile sockets are in place before the first delivery
            latencies, wall, accepted, other = drive(url, items, args.senders, args.seconds)
            stop.set()
            attacker.join(timeout=30)
            time.sleep(2.0)  # what the receiver still holds after the attack ends
        finally:
            sampling.set()
            sampler.join()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=15)
            drain.__exit__()
        pending = [json.loads(p.read_text())["key"] for p in (root / ".the-loop" / "local" / "inbox").glob("*.json")]
        hostile_answers = dict(answers)
        manager.shutdown()

    stored = collections.Counter(drain.keys + pending)
    doubled = sum(1 for count in stored.values() if count > 1)
    print(
        f"senders: {accepted} accepted of {accepted + other} in {wall:.1f} s ({accepted / wall:.0f}/s), "
        f"p50 {statistics.median(latencies):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms; not 202: {other}"
    )
    print("hostile answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(hostile_answers.items())))
    peak, end = max(memory), memory[-1]
    print(f"receiver RSS: start {start_rss:.0f} MB, peak {peak:.0f} MB (+{peak - start_rss:.0f}), end {end:.0f} MB")
    print(f"inbox: {len(stored)} distinct deliveries stored for {accepted} accepted; doubled {doubled}")
    met = other == 0 and peak - start_rss <= 100 and len(stored) == accepted and doubled == 0
    print(f"targets (every delivery 2xx, memory within 100 MB, none lost or doubled): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
