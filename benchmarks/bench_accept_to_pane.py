"""Accept → submitted into a live pane: a signed GitHub comment POSTed to the real receiver, until the fake harness in
the work item's tmux session logs it as submitted (through the inbox, the router and the dispatcher).

Run: ``.venv/bin/python benchmarks/bench_accept_to_pane.py [--events N]``. Starts ``the-loop daemon run gh-webhook``
with ``routing.enabled`` on a free 127.0.0.1 port, the fake GitHub API, the fake harness
(``the_loop.testing.fake_plugin``) on a private tmux server; starts the work item with a ``the-loop start`` comment,
then posts N comments one at a time and times each from the POST to the harness's ``submit`` record (both clocks
are ``time.monotonic``, shared by every process on Linux). Prints p50/p95/p99. Target: p50 ≤ 25 ms. Cleans up its
tmux server and temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "github" / "tests"))

import gh_payloads  # noqa: E402
from fake_github import BOT, TOKEN, FakeGitHub  # noqa: E402

from the_loop.testing import free_port, wait_for  # noqa: E402
from the_loop.testing.harness import FakeHarness  # noqa: E402

LABEL = "the-loop: auto-execute"


def comment(body: str, comment_id: int) -> bytes:
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"), number=15, body=body, login="octocat", labels=[LABEL]
    )
    payload["issue"].pop("pull_request", None)
    return gh_payloads.encode(gh_payloads.new_comment(payload, comment_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="the-loop-bench-"))
    socket = f"the-loop-bench-{secrets.token_hex(4)}"
    logs = work / "logs"
    logs.mkdir()
    (work / "cwd").mkdir()
    process = None
    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue("octo/repo", 15, title="Bench", labels=[LABEL])
        port = free_port()
        config = work / "cfg" / ".the-loop" / "cli-config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text(
            yaml.safe_dump(
                {
                    "repositories": ["octo/repo"],
                    "webhooks": {"ghWebhook": {"enabled": True, "port": port}},
                    "routing": {
                        "enabled": True,
                        "defaultHarness": "fake",
                        "spawnOnUnmatched": "labeled",
                        "authorizedUsers": ["octocat"],
                        "spawnWorkdir": str(work / "cwd"),
                        "reactions": {"enabled": False},
                        "tmux": {"socketName": socket},
                    },
                    **fake.config(),
                }
            )
        )
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")},
            "HOME": str(work),
            "GH_TOKEN": TOKEN,
            "THE_LOOP_GH_WEBHOOK_SECRET": gh_payloads.SECRET,
            "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin",
            "FAKE_HARNESS_LOG": str(logs / "{session}.jsonl"),
        }
        argv = [sys.executable, "-m", "the_loop", "-c", str(config), "daemon", "run", "gh-webhook"]
        process = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}/gh-webhook"
        try:
            with httpx.Client(timeout=10) as client:
                wait_for(lambda: _healthy(client, port), timeout=20)

                def post(body: bytes) -> None:
                    response = client.post(url, content=body, headers=gh_payloads.headers("issue_comment", body))
                    assert response.status_code == 202, response.text

                post(comment("the-loop start", 1))
                record = config.parent / "local" / "github-octo-repo-15.json"
                wait_for(record.exists, timeout=30)
                session_id = json.loads(record.read_text())["sessions"]["github:octo/repo#15"]["harnessSessionId"]
                harness = FakeHarness(logs / f"{session_id}.jsonl")
                harness.wait_ready(timeout=30)
                latencies = []
                for n in range(args.events):
                    marker = f"bench-{n}"
                    sent = time.monotonic()
                    post(comment(marker, 100 + n))
                    deadline = sent + 10
                    while True:
                        done = [r for r in harness.records("submit") if marker in r["text"]]
                        if done:
                            latencies.append((done[0]["t"] - sent) * 1000)
                            break
                        if time.monotonic() > deadline:
                            raise SystemExit(f"{marker} never reached the pane")
                        time.sleep(0.001)
        finally:
            if process is not None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)
            shutil.rmtree(work, ignore_errors=True)
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))]

    print(f"accept → submitted in the pane, {len(latencies)} comments one at a time (ms):")
    print(f"  p50 {statistics.median(latencies):.1f}  p95 {pct(95):.1f}  p99 {pct(99):.1f}  max {latencies[-1]:.1f}")
    print(f"  target p50 ≤ 25 ms: {'met' if statistics.median(latencies) <= 25 else 'NOT met'}")


def _healthy(client: httpx.Client, port: int) -> bool:
    try:
        return client.get(f"http://127.0.0.1:{port}/health").status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
