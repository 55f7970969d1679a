"""The GitHub tests' world: the operator's machine against the fake GitHub API, with the fake harness on a private
tmux server. The ``gh_world`` fixture makes one: ``gh_world(ingress, *, in_process, repositories, plugins, extra,
polling, **routing)``, the keyword arguments added to the config the ingress starts from.

- ``"webhook"`` (the default): the real receiver (``the-loop daemon run gh-webhook``) is running, routing on unless
  ``enabled=False``, against a fake holding ``octo/repo#15`` (labelled) and pull request ``octo/repo#20``; octocat is
  authorized. ``world.receiver`` is its handle, ``world.restart()`` restarts it, ``world.route()`` works the inbox
  once from ``gh_route_driver.py`` (which can kill itself at a named point).
- ``"poller"``: the poller against an empty fake, alice authorized and a label alone arming an item;
  ``world.cycle()`` runs ``daemon run poller --once``, ``world.start_poller()`` the daemon, and
  ``world.start_receiver()`` adds the receiver beside it. With ``in_process=True``, ``world.poll`` is the poll
  source, inbox worker and router in the test's process, the inbox's retry clock injected and tmux able to refuse
  new sessions.

The config writer and the readers (records, sessions, harnesses, the event log, tmux) are the same in every mode.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import gh_payloads
import pytest
from fake_github import BOT, TOKEN, FakeGitHub
from gh_receiver import AUTO_LABEL, Receiver, daemon, read_events, stop

import the_loop_github.plugin
from the_loop import events
from the_loop.config import load_config
from the_loop.inbox import Inbox
from the_loop.inbox.worker import InboxWorker
from the_loop.interfaces import ServiceContext
from the_loop.routing.router import Router
from the_loop.routing.service import inbox_handler
from the_loop.state import StateLayout
from the_loop.state.slugs import slug_of
from the_loop.testing import LoopEnv, fake_plugin, free_port, wait_for
from the_loop.testing.harness import FakeHarness
from the_loop.testing.host import TestHost
from the_loop_github.poll import GitHubPollSource

HERE = Path(__file__).parent
REF = "github:octo/repo#15"
TARGET = "loop-github-octo-repo-15"

Ingress = Literal["webhook", "poller"]
ROUTING: dict[Ingress, dict[str, Any]] = {
    "webhook": {"authorizedUsers": ["octocat"]},
    "poller": {"authorizedUsers": ["alice"], "control": {"requireStartCommand": False}},
}
"""Each ingress's routing defaults, on top of the fake harness and labelled spawns."""


def github_env(env: LoopEnv, monkeypatch: pytest.MonkeyPatch) -> LoopEnv:
    """``env`` with the fake's token and the webhook secret set (for subprocesses and this process), and no other
    GitHub token from the environment the tests run in."""
    for name in ("GH_TOKEN", "GITHUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
        env.env.pop(name, None)
    env.env["GH_TOKEN"] = TOKEN
    env.env["THE_LOOP_GH_WEBHOOK_SECRET"] = gh_payloads.SECRET
    monkeypatch.setenv("GH_TOKEN", TOKEN)
    return env


class MakeWorld(Protocol):
    """The ``gh_world`` fixture: a :class:`GitHubWorld`, its receiver started for ``"webhook"``, closed at teardown."""

    def __call__(
        self,
        ingress: Ingress = "webhook",
        *,
        in_process: bool = False,
        repositories: Sequence[str] | None = None,
        plugins: Sequence[str] = (),
        extra: dict[str, Any] | None = None,
        polling: dict[str, Any] | None = None,
        **routing: Any,
    ) -> GitHubWorld: ...


def add_items(fake: FakeGitHub) -> FakeGitHub:
    """``octo/repo#15`` (labelled) and pull request ``octo/repo#20``: what the webhook tests' deliveries name."""
    fake.add_issue("octo/repo", 15, title="Add a widget", labels=[AUTO_LABEL, "bug"])
    fake.add_issue("octo/repo", 20, title="Widget", pull_request=True)
    return fake


class GitHubWorld:
    """The operator's machine: the config, the fake, the tmux server, the harness logs and what runs on them."""

    def __init__(
        self,
        env: LoopEnv,
        ingress: Ingress,
        *,
        repositories: Sequence[str] | None = None,
        plugins: Sequence[str] = (),
        extra: dict[str, Any] | None = None,
        polling: dict[str, Any] | None = None,
        routing: dict[str, Any] | None = None,
    ) -> None:
        """Start the fake and write the config; nothing runs yet. ``plugins``: test plugin modules (from this folder)
        for the daemons, after the fake harness; ``extra``: more top-level config keys (``integrations`` added to the
        fake's); ``polling`` and ``routing``: more keys of those sections."""
        self.env, self.ingress = env, ingress
        self.fake = FakeGitHub(tokens={TOKEN: BOT}).start()
        if ingress == "webhook":
            add_items(self.fake)
        self.socket = f"the-loop-test-{secrets.token_hex(6)}"
        self.tmux_binary = shutil.which("tmux") or "tmux"
        self.logs = env.tmp / "harness-logs"
        self.logs.mkdir(exist_ok=True)
        (env.tmp / "work").mkdir(exist_ok=True)
        self.repositories = list(repositories if repositories is not None else ["octo/repo"])
        self.extra, self.polling, self.routing = extra or {}, polling or {}, routing or {}
        self.port = free_port() if ingress == "webhook" else None
        self.processes: list[subprocess.Popen[str]] = []
        self._receiver: Receiver | None = None
        self._comment_id = 9000
        env.env.update(
            THE_LOOP_EXTRA_PLUGINS=",".join(["the_loop.testing.fake_plugin", *plugins]),
            FAKE_HARNESS_LOG=str(self.logs / "{session}.jsonl"),
        )
        if plugins:
            env.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
        self._poll: InProcessPoll | None = None
        self.configure()

    # ------------------------------------------------------------------------------------------------ config

    def configure(self, **routing: Any) -> None:
        """Write the config; ``routing`` keys are kept for every later write."""
        self.routing.update(routing)
        config: dict[str, Any] = {"version": "0.12.0", "repositories": self.repositories}
        if self.port is not None:
            config["webhooks"] = {"ghWebhook": {"enabled": True, "port": self.port}}
        config["routing"] = {
            "enabled": True,
            "defaultHarness": "fake",
            "spawnOnUnmatched": "labeled",
            "spawnWorkdir": str(self.env.tmp / "work"),
            "tmux": {"socketName": self.socket, "resumeProbeSeconds": 0.3},
            **ROUTING[self.ingress],
            **self.routing,
        }
        if self.ingress == "poller":
            config["polling"] = {
                "enabled": True,
                "intervalSeconds": 1,
                "maxRetries": 3,
                "sources": [{"provider": "github"}],
                **self.polling,
            }
        integrations = {**self.fake.config()["integrations"], **self.extra.get("integrations", {})}
        self.env.write_config({**config, **self.extra, "integrations": integrations})

    # ---------------------------------------------------------------------------------------------- receiver

    @property
    def receiver(self) -> Receiver:
        assert self._receiver is not None, "no receiver was started"
        return self._receiver

    def start_receiver(self, **routing: Any) -> Receiver:
        """The receiver on the world's port (a world without one gets one, and the config a ``ghWebhook``);
        ``routing`` keys rewrite the config first."""
        fresh = self.port is None
        if fresh:
            self.port = free_port()
        if fresh or routing:
            self.configure(**routing)
        self._receiver = Receiver.start(self.env, self.port)
        self.processes.append(self._receiver.process)
        return self._receiver

    def restart(self, **routing: Any) -> Receiver:
        """Stop the receiver (SIGTERM) and start it again; ``routing`` keys rewrite the config in between."""
        self.receiver.stop()
        return self.start_receiver(**routing)

    def route(self, kill_at: str = "") -> subprocess.CompletedProcess[str]:
        """Work the inbox once from ``gh_route_driver.py``; ``kill_at`` is its ``<point>:<dedupe key>``."""
        env = {**self.env.env, "THE_LOOP_TEST_KILL_AT": kill_at}
        argv = [sys.executable, str(HERE / "gh_route_driver.py"), str(self.env.config_path)]
        return subprocess.run(argv, cwd=self.env.cwd, env=env, capture_output=True, text=True, timeout=60)

    def comment(
        self,
        body: str,
        *,
        login: str = "octocat",
        number: int = 15,
        delivery: str | None = None,
        repo: str = "octo/repo",
    ) -> Any:
        """A signed comment; issues 15 and 16 of octo/repo, and every issue of another repository, are labelled."""
        self._comment_id += 1
        labels = [AUTO_LABEL] if number in (15, 16) or repo != "octo/repo" else []
        payload = gh_payloads.adapt(
            gh_payloads.load("issue_comment.created"), repo=repo, number=number, body=body, login=login, labels=labels
        )
        payload = gh_payloads.new_comment(payload, self._comment_id)
        payload["issue"].pop("pull_request", None)
        response = self.receiver.post("issue_comment", payload, delivery=delivery)
        assert response.status_code == 202, response.text
        return payload

    def repost(self, payload: dict[str, Any]) -> None:
        assert self.receiver.post("issue_comment", payload).status_code == 202

    def close_issue(
        self, sender: str, *, repo: str = "octo/repo", number: int = 15, state_reason: str | None = None
    ) -> None:
        """A signed ``issues`` close by ``sender`` (as GitHub's ``state_reason`` says, when given), worked through."""
        payload = gh_payloads.adapt(
            gh_payloads.load("issues.reopened"), repo=repo, number=number, sender=sender, labels=[AUTO_LABEL]
        )
        payload["action"] = "closed"
        payload["issue"]["state"] = "closed"
        if state_reason is not None:
            payload["issue"]["state_reason"] = state_reason
        payload["issue"].pop("pull_request", None)
        assert self.receiver.post("issues", payload).status_code == 202
        self.settled()

    def start_work(self) -> FakeHarness:
        """``the-loop start`` on #15, its session spawned and ready, everything worked through."""
        self.comment("the-loop start")
        wait_for(lambda: self.local() is not None, timeout=20)
        harness = self.harness()
        harness.wait_ready(timeout=20)
        self.settled()
        return harness

    def reactions(self, payload: dict[str, Any], repo: str = "octo/repo") -> list[str]:
        """The reactions the-loop put on the comment of ``payload`` (R1), in order."""
        path = rf"/repos/{repo}/issues/comments/{payload['comment']['id']}/reactions"
        return [call.body["content"] for call in self.fake.calls("POST", path)]

    def pending(self) -> list[dict[str, Any]]:
        """The inbox entries not yet worked through."""
        return self.receiver.inbox()

    def settled(self, timeout: float = 20) -> None:
        """Wait until the router has worked through everything the receiver accepted."""
        wait_for(lambda: not self.pending(), timeout=timeout)

    # ------------------------------------------------------------------------------------------------ poller

    def cycle(self, times: int = 1) -> None:
        """Run ``times`` cycles, each one ``daemon run poller --once`` (a cycle, then its inbox routed)."""
        for _ in range(times):
            result = self.env.run("daemon", "run", "poller", "--once", timeout=90)
            assert result.returncode == 0, result.stderr

    def start_poller(self) -> subprocess.Popen[str]:
        self.processes.append(daemon(self.env, "poller"))
        return self.processes[-1]

    def stop(self, process: subprocess.Popen[str]) -> None:
        """SIGTERM, and wait for it to exit."""
        stop(process)

    @property
    def poll(self) -> InProcessPoll:
        assert self._poll is not None, "not a world made with in_process=True"
        return self._poll

    def run_in_process(self, host: TestHost, monkeypatch: pytest.MonkeyPatch) -> InProcessPoll:
        """Make :attr:`poll`: the poller's parts in this process, on the world's config."""
        self._poll = InProcessPoll(self, host, monkeypatch)
        return self._poll

    # ----------------------------------------------------------------------------------------------- readers

    def _slug(self, item: int | str) -> str:
        return f"github-octo-repo-{item}" if isinstance(item, int) else item

    def portable(self, item: int | str = 15) -> dict[str, Any]:
        """The portable record of ``item`` (a number in octo/repo, or a slug), or ``{}``."""
        path = self.env.root / "portable" / f"{self._slug(item)}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def add_sections(self, item: int | str = 15, **sections: Any) -> None:
        """Write portable sections by hand (what the poller or a grant would have written); the daemon reads them."""
        path = self.env.root / "portable" / f"{self._slug(item)}.json"
        path.write_text(json.dumps({**self.portable(item), **sections}))

    def local(self, item: int | str = 15) -> dict[str, Any] | None:
        """The local (session) record of ``item`` (a number in octo/repo, or a slug), or None."""
        path = self.env.root / "local" / f"{self._slug(item)}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def session(self, item: int | str = REF) -> dict[str, Any] | None:
        """The session entry of ``item`` (a number in octo/repo, or a ref) in its own local record, or None."""
        if isinstance(item, int):
            ref, record = f"github:octo/repo#{item}", self.local(item)
        else:
            ref, record = item, self.local(slug_of(StateLayout(self.env.root), item))
        return None if record is None else record["sessions"].get(ref)

    def own(self, item: int | str = REF) -> dict[str, Any]:
        """:meth:`session`, which must be there."""
        session = self.session(item)
        assert session is not None, f"no session for {item}"
        return session

    def harness(self, item: int | str = REF) -> FakeHarness:
        return self._harness(self.own(item))

    def _harness(self, session: dict[str, Any]) -> FakeHarness:
        return FakeHarness(self.logs / f"{session['harnessSessionId']}.jsonl")

    def pasted(self, item: int | str = REF) -> list[str]:
        """Every message submitted to the item's harness (a paste is one submitted message); none without a session."""
        session = self.session(item)
        return [] if session is None else self._harness(session).submitted()

    def ledger(self, item: int | str = 15) -> dict[str, Any]:
        """The poller's ledger (``poll``) in the portable record of ``item``."""
        return self.portable(item).get("poll") or {}

    def heartbeat(self) -> dict[str, Any]:
        return json.loads((self.env.root / "poll-status.json").read_text())

    def clocks(self) -> dict[str, Any]:
        path = self.env.root / "local" / "poll-clocks.json"
        return json.loads(path.read_text())["clocks"] if path.exists() else {}

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        return read_events(self.env, name)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``tmux -L <the world's server> ARGS``."""
        return subprocess.run([self.tmux_binary, "-L", self.socket, *args], capture_output=True, text=True, timeout=10)

    def close(self) -> None:
        """Stop what still runs (SIGTERM), the tmux server and the fake."""
        for process in self.processes:
            stop(process)
        self.tmux("kill-server")
        if self._poll is not None:
            events.configure(None, "test")
        self.fake.stop()


@dataclass
class Clock:
    """The inbox's clock, moved by hand."""

    now: float = field(default_factory=time.time)

    def __call__(self) -> float:
        return self.now


class InProcessPoll:
    """Poll source, inbox worker and router in this process, on the world's config: real tmux (the world's server)
    behind a wrapper first on ``PATH``, the fake harness, and the inbox's retry clock injected, so a round of failed
    attempts takes no wall time. Events go to the world's event log."""

    def __init__(self, world: GitHubWorld, host: TestHost, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmux_binary = world.tmux_binary
        host.register(the_loop_github.plugin, "github")
        host.register(fake_plugin, "fake")
        bin_dir = world.env.tmp / "bin"
        bin_dir.mkdir()
        self.wrapper = bin_dir / "tmux"
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_HARNESS_LOG", str(world.logs / "{session}.jsonl"))
        events.configure(world.env.root / "logs" / "events.jsonl", "poller")
        config = load_config(world.env.config_path, host)
        self.clock = Clock()
        inbox = Inbox(config.state, completed_limit=config.core.routing.dedup_cache_size, clock=self.clock)
        self.worker = InboxWorker(inbox, inbox_handler(Router(config)), clock=self.clock)
        self.source = GitHubPollSource(config)
        self.context = ServiceContext(config=config, should_stop=lambda: False)
        self.refuse_new_sessions(False)

    def cycle(self) -> dict[str, Any]:
        return dict(self.source.poll_once(self.context))

    def route_round(self) -> None:
        """What the router does with every pending entry until it settles or is abandoned (all its attempts)."""
        for _ in range(self.worker.inbox.max_attempts):
            self.worker.run_once()
            self.clock.now += self.worker.inbox.backoff_cap + 1  # past any backoff

    def refuse_new_sessions(self, refuse: bool) -> None:
        """Make tmux itself refuse ``new-session`` (every spawn fails for real), or stop refusing."""
        self.wrapper.write_text(
            "#!/bin/sh\n"
            + ('for arg in "$@"; do [ "$arg" = new-session ] && exit 1; done\n' if refuse else "")
            + f'exec {self.tmux_binary} "$@"\n'
        )
        self.wrapper.chmod(0o755)
