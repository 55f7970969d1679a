"""The GitHub tests' receiver handle and config writer: a running ``the-loop daemon run gh-webhook`` and helpers to
send it signed deliveries and read what it wrote, and the daemon processes and event log reader the GitHub world
shares with it (imported by name; ``conftest`` is ambiguous across plugins)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gh_payloads
import httpx
from fake_github import FakeGitHub

from the_loop.testing import LoopEnv, wait_for

AUTO_LABEL = "the-loop: auto-execute"


def github_config(env: LoopEnv, fake: FakeGitHub | None, **hook: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"version": "0.12.0"}
    if hook:
        config["webhooks"] = {"ghWebhook": hook}
    if fake is not None:
        config.update(fake.config())
    env.write_config(config)
    return config


def read_events(env: LoopEnv, name: str | None = None) -> list[dict[str, Any]]:
    """The records of ``env``'s event log, those named ``name`` when given."""
    path = env.root / "logs" / "events.jsonl"
    lines = path.read_text(encoding="utf-8").split("\n") if path.exists() else []  # never splitlines(): U+0085
    records = [json.loads(line) for line in lines if line.strip()]
    return [record for record in records if name is None or record["event"] == name]


def daemon(env: LoopEnv, service: str) -> subprocess.Popen[str]:
    """``the-loop daemon run SERVICE`` on ``env``'s config, in the background (its stderr kept)."""
    argv = [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "daemon", "run", service]
    return subprocess.Popen(argv, cwd=env.cwd, env=env.env, stderr=subprocess.PIPE, text=True)


def stop(process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` (when it still runs) and wait for it to exit."""
    process.send_signal(sig)
    process.wait(timeout=30)


@dataclass
class Receiver:
    """A running ``gh-webhook`` service and what it wrote."""

    env: LoopEnv
    port: int
    process: subprocess.Popen[str]

    @classmethod
    def start(cls, env: LoopEnv, port: int) -> Receiver:
        """The receiver on ``env``'s config (which names ``port``), once it answers ``/health``."""
        process = daemon(env, "gh-webhook")
        receiver = cls(env, port, process)
        wait_for(lambda: receiver.healthy() or process.poll() is not None, timeout=20)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        return receiver

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop(self.process, sig)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def inbox_dir(self) -> Path:
        return self.env.root / "local" / "inbox"

    def post(
        self,
        event: str,
        payload: dict[str, Any] | bytes,
        *,
        delivery: str | None = None,
        secret: str | None = gh_payloads.SECRET,
        headers: dict[str, Any] | None = None,
        client: httpx.Client | None = None,
        path: str = "/gh-webhook",
    ) -> httpx.Response:
        body = gh_payloads.encode(payload)
        sent = {**gh_payloads.headers(event, body, delivery=delivery, secret=secret), **(headers or {})}
        sent = {key: value for key, value in sent.items() if value is not None}
        if client is not None:
            return client.post(f"{self.url}{path}", content=body, headers=sent)
        return httpx.post(f"{self.url}{path}", content=body, headers=sent, timeout=10)

    def inbox(self) -> list[dict[str, Any]]:
        """Pending inbox entries (whole files), in arrival order."""
        if not self.inbox_dir.is_dir():
            return []
        entries = []
        for path in sorted(self.inbox_dir.glob("*.json")):
            try:
                entries.append(json.loads(path.read_text()))
            except FileNotFoundError:  # settled by the router between the listing and the read
                continue
        return entries

    def accepted_keys(self) -> list[str]:
        """Every key the inbox ever took: pending, or already settled by a worker."""
        keys = [entry["key"] for entry in self.inbox()]
        completed = self.inbox_dir / "completed.jsonl"
        if completed.exists():
            keys += [json.loads(line)["key"] for line in completed.read_text().splitlines() if line.strip()]
        return keys

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        return read_events(self.env, name)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False
