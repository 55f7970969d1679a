"""The web control plane: ``GET /api/v1/work-items`` at 1,000 and 10,000 work items, the dashboard list's first
paint at 1,000, and a keystroke's trip from the browser terminal's WebSocket to the pane and back.

Run: ``.venv/bin/python benchmarks/bench_web.py [--items 1000 10000] [--requests 200] [--parts api paint terminal]``.
Each part runs the real service (``the-loop daemon run service``) on a fresh state root:

- ``api``: the state root holds N work items (a third running, with session records; a third armed; a third
  ended), each a realistic ≈1 KB portable record; prints the first (cold) request, then p50 and p99 of a page of 50
  over ``--requests`` keep-alive requests, and of the ``waiting=true`` filter.
- ``paint``: headless Chromium (the system's, through Playwright) logs in and loads ``/`` at 1,000 work items;
  prints first-contentful-paint and the time until the rows are in the DOM, median of 5 loads.
- ``terminal``: a tmux session runs ``cat``; an operator's WebSocket sends one byte at a time and waits for its
  echo; prints p50 and p99 over 200 keystrokes (the pane's echo comes back through tmux attach and the pty).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from bench_state import sample_record  # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def record(number: int, kind: str) -> dict[str, Any]:
    """bench_state's realistic ≈1 KB record, ended for a third of them."""
    found = sample_record(number)
    if kind == "ended":
        found["ended"] = {
            "state": "closed",
            "reason": "completed",
            "at": "2026-08-01T10:00:00Z",
            "outcome": "completed",
        }
    return found


def session(number: int) -> dict[str, Any]:
    ref = f"github:octo/repo#{number}"
    minute = number % 60
    return {
        "version": 2,
        "workItem": ref,
        "sessions": {
            ref: {
                "harness": "claude",
                "harnessSessionId": f"00000000-0000-4000-8000-{number:012d}",
                "cwd": f"/work/octo-repo-{number}",
                "status": "active",
                "createdAt": "2026-08-01T09:00:00Z",
                "lastEventAt": f"2026-08-01T09:{minute:02d}:00Z",
                "tmuxTarget": f"loop-github-octo-repo-{number}",
                "recentDeliveries": [f"github:comment:IC_{number}_{i}" for i in range(20)],
                "model": "opus",
                "effort": "high",
            }
        },
    }


class Machine:
    """A state root with N work items and the real control plane on it."""

    def __init__(self, items: int) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-web-"))
        self.home = self.tmp / "home"
        self.home.mkdir()
        self.root = self.tmp / ".the-loop"
        (self.root / "portable").mkdir(parents=True)
        (self.root / "local").mkdir()
        self.port = free_port()
        self.socket = f"bench-web-{secrets.token_hex(4)}"
        config = {
            "service": {"enabled": True, "port": self.port},
            "routing": {"tmux": {"socketName": self.socket}},
            "web": {"maxStreams": 64},
        }
        (self.root / "cli-config.yaml").write_text(json.dumps(config))
        for number in range(1, items + 1):
            kind = ("running", "armed", "ended")[number % 3]
            (self.root / "portable" / f"github-octo-repo-{number}.json").write_text(json.dumps(record(number, kind)))
            if kind == "running":
                (self.root / "local" / f"github-octo-repo-{number}.json").write_text(json.dumps(session(number)))
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP")},
            "HOME": str(self.home),
            "THE_LOOP_CLI_CONFIG": str(self.root / "cli-config.yaml"),
        }
        self.operator = self.cli("web", "token", "create", "bench", "--role", "operator").strip()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "the_loop", "daemon", "run", "service"], env=self.env, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "the_loop", *args], env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        return done.stdout

    def tmux(self, *args: str) -> None:
        subprocess.run(["tmux", "-L", self.socket, *args], check=True, env=self.env)

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def api(items: int, requests: int) -> None:
    machine = Machine(items)
    try:
        headers = {"authorization": f"Bearer {machine.operator}"}
        with httpx.Client(base_url=machine.url, headers=headers, timeout=60) as client:
            start = time.perf_counter()
            first = client.get("/api/v1/work-items")
            cold = (time.perf_counter() - start) * 1000
            assert first.status_code == 200 and first.json()["total"] == items, first.text[:200]
            changed = machine.root / "portable" / "github-octo-repo-1.json"
            for query in ("", "?waiting=true", "?state=running&limit=50&offset=100", "changed"):
                times = []
                for index in range(requests):
                    if query == "changed":  # a record rewritten (atomically, as the-loop writes) before each request
                        fresh = changed.with_name(".bench.tmp")
                        fresh.write_text(json.dumps({**record(1, "armed"), "note": index}))
                        os.replace(fresh, changed)
                        time.sleep(0.06)
                    start = time.perf_counter()
                    answer = client.get(f"/api/v1/work-items{'' if query == 'changed' else query}")
                    times.append((time.perf_counter() - start) * 1000)
                    assert answer.status_code == 200
                label = {"": "(a page of 50)", "changed": "(a page of 50, a record changed)"}.get(query, query)
                print(
                    f"api work-items at {items:>6}: {label:<36} p50 {percentile(times, 0.5):7.1f} ms  "
                    f"p99 {percentile(times, 0.99):7.1f} ms  (first request {cold:.1f} ms)"
                )
    finally:
        machine.close()


def paint(items: int) -> None:
    from playwright.sync_api import sync_playwright

    machine = Machine(items)
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, args=args)
            page = browser.new_page()
            page.goto(f"{machine.url}/login")
            page.fill("input[name=token]", machine.operator)
            page.press("input[name=token]", "Enter")
            page.wait_for_url(f"{machine.url}/")
            paints, rows = [], []
            for _ in range(5):
                start = time.perf_counter()
                page.goto(f"{machine.url}/")
                page.wait_for_selector("tbody tr")
                rows.append((time.perf_counter() - start) * 1000)
                fcp = page.evaluate(
                    "() => (performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime"
                )
                paints.append(float(fcp))
            browser.close()
        print(
            f"dashboard list at {items}: first-contentful-paint {statistics.median(paints):.0f} ms, "
            f"rows in the DOM {statistics.median(rows):.0f} ms (median of 5 loads)"
        )
    finally:
        machine.close()


def terminal(keystrokes: int = 200) -> None:
    import websockets

    machine = Machine(3)
    try:
        machine.tmux("new-session", "-d", "-s", "loop-github-octo-repo-3", "-x", "80", "-y", "24", "cat")
        machine.tmux("set-option", "-g", "status", "off")  # the clock would redraw letters of its own
        record = session(3)
        record["sessions"]["github:octo/repo#3"]["tmuxTarget"] = "loop-github-octo-repo-3"
        (machine.root / "local" / "github-octo-repo-3.json").write_text(json.dumps(record))
        ref = quote("github:octo/repo#3", safe="")
        url = f"ws://127.0.0.1:{machine.port}/api/v1/work-items/{ref}/terminal"

        async def run() -> list[float]:
            headers = {"authorization": f"Bearer {machine.operator}"}
            async with websockets.connect(url, additional_headers=headers, max_size=None) as sock:
                await sock.send(json.dumps({"type": "resize", "cols": 80, "rows": 24}))
                await asyncio.sleep(1.0)  # the first screen
                while True:
                    try:
                        await asyncio.wait_for(sock.recv(), 0.3)
                    except TimeoutError:
                        break
                times = []
                for index in range(keystrokes):
                    key = "abcdefghijklmnopqrstuvwxyz"[index % 26]
                    start = time.perf_counter()
                    await sock.send(key.encode())
                    seen = b""
                    while key.encode() not in seen:
                        frame = await asyncio.wait_for(sock.recv(), 5)
                        seen += frame if isinstance(frame, bytes) else frame.encode()
                    times.append((time.perf_counter() - start) * 1000)
                    if index % 60 == 59:
                        await sock.send(b"\r")
                        await asyncio.sleep(0.05)
                return times

        times = asyncio.run(run())
        typed = subprocess.run(
            ["tmux", "-L", machine.socket, "capture-pane", "-p", "-t", "=loop-github-octo-repo-3:"],
            capture_output=True,
            text=True,
            env=machine.env,
        ).stdout
        assert "abcdefghijklmnopqrstuvwxyz" in typed, typed  # every key reached the pane
        print(
            f"terminal keystroke → pane echo: p50 {percentile(times, 0.5):.1f} ms  "
            f"p99 {percentile(times, 0.99):.1f} ms ({len(times)} keystrokes)"
        )
    finally:
        machine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--parts", nargs="+", default=["api", "paint", "terminal"], choices=["api", "paint", "terminal"]
    )
    options = parser.parse_args()
    if "api" in options.parts:
        for items in options.items:
            api(items, options.requests)
    if "paint" in options.parts:
        paint(1000)
    if "terminal" in options.parts:
        terminal()


if __name__ == "__main__":
    main()
