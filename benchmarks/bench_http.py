"""Webhook accept throughput and latency of core's HTTP server, over loopback only.

Run: ``.venv/bin/python benchmarks/bench_http.py [--requests N] [--threads T] [--max-seconds S]``. Starts a real
server (``the-loop daemon run gh-webhook``) on a free 127.0.0.1 port, with the test plugin's ``/echo`` route
(``tests/core/plugins_for_tests``) standing in for a webhook ingress, then drives ``GET /health`` and
``POST /echo`` (1 KiB body) from T threads, each with its own keep-alive httpx client. Each route gets N requests
in all, or stops after S seconds. Prints req/s, p50/p99 latency and the server's CPU time per request (the
clients share the same CPUs, so req/s is a floor on a small box).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from the_loop.testing import free_port

ROOT = Path(__file__).resolve().parent.parent
TEST_PLUGINS = ROOT / "tests" / "core"
BODY = b'{"action":"created","comment":{"id":1}}'.ljust(1024, b" ")


def start_server(
    workdir: Path, port: int, extra_env: dict[str, str] | None = None, secret: str = "bench-secret"
) -> subprocess.Popen[bytes]:
    """``the-loop daemon run gh-webhook`` on ``port`` with its state in ``workdir``, once ``/health`` answers.
    ``extra_env`` adds to its environment (by default the test plugin's ``/echo`` route)."""
    config = workdir / ".the-loop" / "cli-config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(f'version: "0.12.0"\nwebhooks: {{ghWebhook: {{enabled: true, port: {port}}}}}\n')
    plugins = {"PYTHONPATH": str(TEST_PLUGINS), "THE_LOOP_EXTRA_PLUGINS": "plugins_for_tests.loop_test_plugin"}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")},
        "HOME": str(workdir),
        "THE_LOOP_GH_WEBHOOK_SECRET": secret,
        **(plugins if extra_env is None else extra_env),
    }
    argv = [sys.executable, "-m", "the_loop", "-c", str(config), "daemon", "run", "gh-webhook"]
    process = subprocess.Popen(argv, cwd=workdir, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    with httpx.Client() as client:
        while time.monotonic() < deadline:
            try:
                if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return process
            except httpx.HTTPError:
                time.sleep(0.05)
    process.kill()
    raise SystemExit("the server did not come up within 20 s")


def drive(url: str, method: str, total: int, threads: int, max_seconds: float) -> tuple[list[float], float, int]:
    """Send ``total`` requests from ``threads`` keep-alive clients; return latencies (ms), wall time, errors."""
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    remaining = [total]
    deadline = time.monotonic() + max_seconds

    def worker() -> None:
        nonlocal errors
        mine: list[float] = []
        failed = 0
        with httpx.Client(timeout=10) as client:
            while time.monotonic() < deadline:
                with lock:
                    if remaining[0] <= 0:
                        break
                    remaining[0] -= 1
                began = time.perf_counter()
                try:
                    response = client.request(method, url, content=BODY if method == "POST" else None)
                    ok = response.status_code < 300
                except httpx.HTTPError:
                    ok = False
                mine.append((time.perf_counter() - began) * 1000)
                failed += not ok
        with lock:
            latencies.extend(mine)
            errors += failed

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    began = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return latencies, time.perf_counter() - began, errors


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000, help="requests per route (default 4000)")
    parser.add_argument("--threads", type=int, default=16, help="client threads (default 16)")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="time limit per route (default 30)")
    args = parser.parse_args()

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        process = start_server(Path(tmp), port)
        try:
            print(f"server: 127.0.0.1:{port}, {args.threads} keep-alive client threads, {os.cpu_count()} CPUs")
            for method, path in (("GET", "/health"), ("POST", "/echo")):
                url = f"http://127.0.0.1:{port}{path}"
                drive(url, method, min(200, args.requests), args.threads, args.max_seconds)  # warm up
                cpu_before = cpu_seconds(process.pid)
                latencies, wall, errors = drive(url, method, args.requests, args.threads, args.max_seconds)
                server_cpu = (cpu_seconds(process.pid) - cpu_before) / len(latencies) * 1000
                print(
                    f"{method:<4} {path:<8} {len(latencies):>6} req  {len(latencies) / wall:>8.0f} req/s  "
                    f"p50 {statistics.median(latencies):6.1f} ms  p99 {percentile(latencies, 0.99):6.1f} ms  "
                    f"server CPU {server_cpu:.2f} ms/req  errors {errors}"
                )
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=15)


if __name__ == "__main__":
    main()
