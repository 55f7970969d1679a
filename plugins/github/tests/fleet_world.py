"""A fleet on one machine for the tests: a real ``nats-server``, a gateway (the real receiver, ``daemon run
gh-webhook``) and workers (``daemon run fleet-worker``) as separate processes, each with its own state root and
private tmux server, against one fake GitHub, with the fake harness.

``FleetWorld.create(tmp, nats, workers=3)`` writes every machine's config; ``start()`` runs them; ``arm(numbers)``
posts ``the-loop start`` on each issue; ``comment(number, body)`` posts a signed comment to the gateway;
``owner(number)`` is the worker whose state root holds a live session of the item; ``pasted(number)`` what that
session received.

``workers=0`` is the single machine beside it (``nats`` unused, may be None): one ``daemon run gh-webhook`` with
routing and no ``instance``/``fleet`` sections, the same fake GitHub, payloads and harness; it is then both
``gateway`` and the one entry of ``workers``.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gh_payloads
import httpx
from fake_github import BOT, TOKEN, FakeGitHub
from gh_receiver import AUTO_LABEL

from the_loop.refs import parse_ref, slug_for
from the_loop.state import StateLayout
from the_loop.testing import free_port, wait_for
from the_loop.testing.harness import FakeHarness

REPO = "octo/repo"


@dataclass
class Machine:
    """One machine of the fleet: its name, config, state root, tmux socket and the process running on it."""

    name: str
    root: Path
    config: dict[str, Any]
    env: dict[str, str]
    socket: str
    service: str
    process: subprocess.Popen[str] | None = None
    log: Path = field(default=Path())

    @property
    def config_path(self) -> Path:
        return self.root / "cli-config.yaml"

    def write(self) -> None:
        import yaml

        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False), encoding="utf-8")

    def start(self) -> None:
        argv = [sys.executable, "-m", "the_loop", "-c", str(self.config_path), "daemon", "run", self.service]
        self.log = self.root / f"{self.service}.stderr"
        handle = self.log.open("a")
        self.process = subprocess.Popen(argv, cwd=self.root, env=self.env, stderr=handle, stdout=handle, text=True)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        path = self.root / "logs" / "events.jsonl"
        lines = path.read_text(encoding="utf-8").split("\n") if path.exists() else []
        records = [json.loads(line) for line in lines if line.strip()]
        return [record for record in records if name is None or record["event"] == name]

    def local(self, number: int) -> dict[str, Any] | None:
        path = self.root / "local" / f"{slug_for(parse_ref(f'github:{REPO}#{number}'))}.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return None

    def session(self, number: int) -> dict[str, Any] | None:
        record = self.local(number)
        return None if record is None else record["sessions"].get(f"github:{REPO}#{number}")

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "the_loop", "-c", str(self.config_path), *args]
        return subprocess.run(argv, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [shutil.which("tmux") or "tmux", "-L", self.socket, *args], capture_output=True, text=True
        )


class FleetWorld:
    def __init__(self, tmp: Path, nats: Any, fake: FakeGitHub, machines: list[Machine], logs: Path, port: int) -> None:
        self.tmp, self.nats, self.fake, self.machines, self.logs, self.port = tmp, nats, fake, machines, logs, port
        self._comment_ids = itertools.count(50_001)  # next() is atomic: comments may come from several threads

    @classmethod
    def create(
        cls,
        tmp: Path,
        nats: Any,
        *,
        workers: int = 3,
        capacity: int = 12,
        lease_seconds: float = 3,
        numbers: range = range(101, 131),
    ) -> FleetWorld:
        fake = FakeGitHub(tokens={TOKEN: BOT}).start()
        for number in numbers:
            fake.add_issue(REPO, number, title=f"Item {number}", labels=[AUTO_LABEL])
        logs = tmp / "harness-logs"
        logs.mkdir(parents=True, exist_ok=True)
        (tmp / "work").mkdir(exist_ok=True)
        home = tmp / "home"
        home.mkdir(exist_ok=True)
        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("THE_LOOP_") and k not in ("GH_TOKEN", "GITHUB_TOKEN")
        }
        base_env.update(
            HOME=str(home),
            GH_CONFIG_DIR=str(home / ".config" / "gh"),
            GH_TOKEN=TOKEN,
            THE_LOOP_GH_WEBHOOK_SECRET=gh_payloads.SECRET,
            THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin",
            FAKE_HARNESS_LOG=str(logs / "{session}.jsonl"),
            THE_LOOP_STOP_TIMEOUT="10",
        )
        port = free_port()
        fleet = {"nats": {"servers": [nats.url]}, "leaseSeconds": lease_seconds} if workers else None
        machines = []
        for index in range(workers + 1):
            name = "solo" if fleet is None else "gateway" if index == 0 else f"w{index}"
            socket = f"the-loop-fleet-{secrets.token_hex(5)}"
            config: dict[str, Any] = {
                "version": "0.12.0",
                "state": {"root": str(tmp / name)},
                "repositories": [REPO],
                "routing": {
                    "enabled": True,
                    "defaultHarness": "fake",
                    "spawnOnUnmatched": "labeled",
                    "spawnWorkdir": str(tmp / "work"),
                    "authorizedUsers": ["octocat"],
                    "tmux": {"socketName": socket, "resumeProbeSeconds": 0.3},
                    "announce": {"enabled": False},
                    "reactions": {"enabled": False},
                },
                "instance": {
                    "name": name,
                    "role": "gateway" if index == 0 else "worker",
                    "host": f"{name}.example.internal",
                    "capacity": {"sessions": capacity},
                },
                "fleet": fleet,
                **fake.config(),
            }
            if fleet is None:
                del config["instance"], config["fleet"]
            if index == 0:
                config["webhooks"] = {"ghWebhook": {"enabled": True, "port": port}}
            machine = Machine(
                name,
                tmp / name,
                config,
                {**base_env, "HOME": str(home)},
                socket,
                "gh-webhook" if index == 0 else "fleet-worker",
            )
            machine.write()
            machines.append(machine)
        return cls(tmp, nats, fake, machines, logs, port)

    @property
    def gateway(self) -> Machine:
        return self.machines[0]

    @property
    def workers(self) -> list[Machine]:
        return self.machines[1:] or self.machines  # the single machine holds its sessions itself

    def start(self) -> None:
        for machine in self.machines[1:]:
            machine.start()
        self.gateway.start()
        wait_for(self.healthy, timeout=30)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        for machine in self.machines:
            machine.stop()
            machine.tmux("kill-server")
        self.fake.stop()

    # ---------------------------------------------------------------------------------------------- events

    def comment(
        self, number: int, body: str, *, login: str = "octocat", client: httpx.Client | None = None
    ) -> httpx.Response:
        """POST a signed comment to the gateway (over ``client``'s keep-alive connection when given)."""
        payload = gh_payloads.adapt(
            gh_payloads.load("issue_comment.created"),
            repo=REPO,
            number=number,
            body=body,
            login=login,
            labels=[AUTO_LABEL],
        )
        payload = gh_payloads.new_comment(payload, next(self._comment_ids))
        payload["issue"].pop("pull_request", None)
        body_bytes = gh_payloads.encode(payload)
        headers = gh_payloads.headers("issue_comment", body_bytes, delivery=None, secret=gh_payloads.SECRET)
        sent = {key: value for key, value in headers.items() if value is not None}
        url = f"http://127.0.0.1:{self.port}/gh-webhook"
        if client is not None:
            return client.post(url, content=body_bytes, headers=sent, timeout=15)
        return httpx.post(url, content=body_bytes, headers=sent, timeout=15)

    def arm(self, numbers: range | list[int]) -> None:
        for number in numbers:
            response = self.comment(number, "the-loop start")
            assert response.status_code == 202, response.text

    # ---------------------------------------------------------------------------------------------- reading

    def owners(self, number: int) -> list[Machine]:
        """The workers holding a live session of ``number``."""
        found = []
        for machine in self.workers:
            session = machine.session(number)
            if session is not None and session.get("status") in ("active", "waiting_for_input"):
                found.append(machine)
        return found

    def owner(self, number: int) -> Machine | None:
        found = self.owners(number)
        return found[0] if len(found) == 1 else None

    def pasted(self, machine: Machine, number: int) -> list[str]:
        session = machine.session(number)
        if session is None:
            return []
        return FakeHarness(self.logs / f"{session['harnessSessionId']}.jsonl").submitted()

    def boot_prompt(self, machine: Machine, number: int) -> str:
        session = machine.session(number)
        assert session is not None
        return (FakeHarness(self.logs / f"{session['harnessSessionId']}.jsonl").submitted() or [""])[0]


def layout(machine: Machine) -> StateLayout:
    return StateLayout(machine.root)
