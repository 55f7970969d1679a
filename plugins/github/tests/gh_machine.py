"""A machine for routing tests: the real ``gh-webhook`` daemon on a config with the fake harness, a private tmux
server and the fake GitHub API, started with routing on or off, plus ``gh_route_driver.py`` to route the inbox from a
separate process (imported by name, like ``gh_receiver``)."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gh_payloads
from fake_github import FakeGitHub
from gh_receiver import AUTO_LABEL, Receiver

from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for
from the_loop.testing.harness import FakeHarness

HERE = Path(__file__).parent
REF = "github:octo/repo#15"


class Machine:
    def __init__(self, env: LoopEnv, fake: FakeGitHub, socket: str, logs: Path) -> None:
        self.env, self.fake, self.socket, self.logs = env, fake, socket, logs
        self.port = free_port()
        self.receiver: Receiver | None = None
        self.comment_id = 7000

    def configure(self, *, routing: bool, **overrides: Any) -> None:
        self.env.write_config(
            {
                "version": "0.12.0",
                "repositories": ["octo/repo"],
                "webhooks": {"ghWebhook": {"enabled": True, "port": self.port}},
                "routing": {
                    "enabled": routing,
                    "defaultHarness": "fake",
                    "spawnOnUnmatched": "labeled",
                    "authorizedUsers": ["octocat"],
                    "spawnWorkdir": str(self.env.tmp / "work"),
                    "reactions": {"enabled": False},
                    "tmux": {"socketName": self.socket, "resumeProbeSeconds": 0.3},
                    **overrides,
                },
                **self.fake.config(),
            }
        )

    def start(self, *, routing: bool, **overrides: Any) -> Receiver:
        """The receiver; ``overrides`` are more ``routing`` keys."""
        self.configure(routing=routing, **overrides)
        argv = [sys.executable, "-m", "the_loop", "-c", str(self.env.config_path), "daemon", "run", "gh-webhook"]
        process = subprocess.Popen(argv, cwd=self.env.cwd, env=self.env.env, stderr=subprocess.PIPE, text=True)
        self.receiver = Receiver(self.env, self.port, process)
        wait_for(lambda: self.receiver.healthy() or process.poll() is not None, timeout=20)  # type: ignore[union-attr]
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        return self.receiver

    def stop(self, sig: int = signal.SIGTERM) -> None:
        assert self.receiver is not None
        self.receiver.process.send_signal(sig)
        self.receiver.process.wait(timeout=30)

    def comment(self, body: str) -> dict[str, Any]:
        self.comment_id += 1
        payload = gh_payloads.adapt(
            gh_payloads.load("issue_comment.created"), number=15, body=body, login="octocat", labels=[AUTO_LABEL]
        )
        payload = gh_payloads.new_comment(payload, self.comment_id)
        payload["issue"].pop("pull_request", None)
        assert self.receiver is not None
        response = self.receiver.post("issue_comment", payload)
        assert response.status_code == 202, response.text
        return payload

    def route(self, kill_at: str = "") -> subprocess.CompletedProcess[str]:
        env = {**self.env.env, "THE_LOOP_TEST_KILL_AT": kill_at}
        argv = [sys.executable, str(HERE / "gh_route_driver.py"), str(self.env.config_path)]
        return subprocess.run(argv, cwd=self.env.cwd, env=env, capture_output=True, text=True, timeout=60)

    def harness(self) -> FakeHarness:
        record = json.loads((self.env.root / "local" / "github-octo-repo-15.json").read_text())
        return FakeHarness(self.logs / f"{record['sessions'][REF]['harnessSessionId']}.jsonl")

    def pending(self) -> list[dict[str, Any]]:
        assert self.receiver is not None
        return self.receiver.inbox()


@contextmanager
def machine_for(env: LoopEnv, fake: FakeGitHub) -> Iterator[Machine]:
    socket = f"the-loop-test-{secrets.token_hex(6)}"
    logs = env.tmp / "harness-logs"
    logs.mkdir(exist_ok=True)
    (env.tmp / "work").mkdir(exist_ok=True)
    env.env.update(
        THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin", FAKE_HARNESS_LOG=str(logs / "{session}.jsonl")
    )
    found = Machine(env, fake, socket, logs)
    try:
        yield found
    finally:
        if found.receiver is not None and found.receiver.process.poll() is None:
            found.stop()
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)
        kill_lock_holders(env.root)
