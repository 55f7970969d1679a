"""The Jira tests' world: one operator machine against the fake Jira (:class:`JiraWorld`, the ``world`` fixture of
this folder's conftest). ``loop_env``'s throw-away machine with the Jira credentials set, the fake Jira REST API and the
E §A.6 config pointing at it; driven in this process (the config loaded with the Jira plugin: a poll cycle, the doorbell
route, the ticket provider) or through the real services (``the-loop daemon run poller --once``, the receiver, the fake
harness on a private tmux server); readers of the event log, the inbox and the records. A uniquely named module (not
``conftest``) so test modules can import it beside other plugins' test folders."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_jira import FakeJira

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.ingress.poller import run_cycle
from the_loop.ingress.signing import signature
from the_loop.interfaces import ServiceContext, WebhookResponse
from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for
from the_loop.testing.harness import FakeHarness
from the_loop.testing.host import TestHost
from the_loop_jira.poll import JiraPollSource
from the_loop_jira.ticketing import JiraTicketProvider
from the_loop_jira.webhook import JiraWebhook

EMAIL = "bot@example.test"
TOKEN = "jira-secret-token-9f8e7d"
LABEL = "the-loop:auto-execute"
SECRET = "jira-webhook-secret"
SECRET_ENV = "THE_LOOP_JIRA_WEBHOOK_SECRET"
"""The variable the doorbell's ``webhook.secretEnv`` names."""
REF = "jira:jira.test/PROJ-12"
"""The armed work item; the readers are about it unless told otherwise."""
TARGET = "loop-jira-jira_test-PROJ-12"
"""REF's session's tmux target."""


def comment_created(comment_id: Any, key: str = "PROJ-12", **claims: Any) -> dict[str, Any]:
    """A ``comment_created`` doorbell for comment ``comment_id`` on ticket ``key``; ``claims`` are more comment
    fields, which a doorbell may carry but Jira is asked for instead."""
    return {"webhookEvent": "comment_created", "issue": {"key": key}, "comment": {"id": comment_id, **claims}}


def issue_updated(key: str = "PROJ-12") -> dict[str, Any]:
    """A ``jira:issue_updated`` doorbell for ticket ``key``."""
    return {"webhookEvent": "jira:issue_updated", "issue": {"key": key}}


class JiraWorld:
    """One operator machine against the fake Jira: ``env`` (config file, state root, the subprocesses' environment)
    and ``fake``. In this process :meth:`load` writes the config and loads it with the Jira plugin on the test's
    plugin host (:attr:`config` loads the base config on first use); :meth:`configure_services` writes the config the
    real services run on instead; :meth:`close` stops what they left running."""

    __test__ = False

    def __init__(self, env: LoopEnv, fake: FakeJira, host: TestHost, monkeypatch: pytest.MonkeyPatch) -> None:
        """A world on ``env`` and ``fake``; :meth:`create` also sets the credentials and registers the plugin."""
        self.env = env
        self.fake = fake
        self.host = host
        self.monkeypatch = monkeypatch
        self.logs = env.tmp / "harness-logs"
        self.work = env.tmp / "work"
        self.socket = f"the-loop-test-{secrets.token_hex(6)}"
        self.port = 0
        self.receiver: subprocess.Popen[str] | None = None
        self._services = False
        self._config: LoadedConfig | None = None
        self._hook: JiraWebhook | None = None

    @classmethod
    def create(cls, env: LoopEnv, fake: FakeJira, host: TestHost, monkeypatch: pytest.MonkeyPatch) -> JiraWorld:
        """A world with the Jira credentials set (here and for subprocesses) and the Jira plugin registered on
        ``host``."""
        import the_loop_jira.plugin

        for name, value in (("JIRA_EMAIL", EMAIL), ("JIRA_API_TOKEN", TOKEN)):
            monkeypatch.setenv(name, value)
            env.env[name] = value
        host.register(the_loop_jira.plugin, "jira")
        return cls(env, fake, host, monkeypatch)

    # ---------------------------------------------------------------------------------------------- config

    def document(self, *, routing: dict[str, Any] | None = None, **jira: Any) -> dict[str, Any]:
        """The base config (E §A.6) pointing at the fake: ``routing`` keys added to ``routing:``, ``jira`` keys to
        ``integrations.jira``."""
        return {
            "version": "0.12.0",
            "polling": {"sources": [{"provider": "jira", "projects": ["PROJ"]}]},
            "routing": {
                "spawnOnUnmatched": "labeled",
                "authorizedUsers": [{"github": "octocat", "jira": "acc-ok"}],
                **(routing or {}),
            },
            "integrations": {
                "jira": {
                    "site": "jira.test",
                    "deployment": "cloud",
                    "serverUrl": self.fake.url,
                    "api": {"emailEnv": ["JIRA_EMAIL"], "tokenEnv": ["JIRA_API_TOKEN"]},
                    "projects": {"PROJ": {"repository": "octo/repo"}, "OPS": {}},
                    **jira,
                }
            },
        }

    def write(self, config: dict[str, Any] | None = None, **jira: Any) -> Path:
        """Write ``config``, or the base config with ``jira`` overrides (see :meth:`document`)."""
        return self.env.write_config(config if config is not None else self.document(**jira))

    def load(self, config: dict[str, Any] | None = None, **jira: Any) -> LoadedConfig:
        """:meth:`write` the config and load it in this process, the event log pointed at its state (as the
        poller's)."""
        self.write(config, **jira)
        self._config = load_config(self.env.config_path, self.host)
        events.configure(self._config.state.events_path, "poller", enabled=True)
        return self._config

    @property
    def config(self) -> LoadedConfig:
        """The config :meth:`load` loaded last (the base config, loaded now, if it never ran)."""
        return self._config if self._config is not None else self.load()

    def configure_services(self) -> None:
        """Write the config of a Jira-only install running the real services: the fake harness (the GitHub plugin
        disabled), routing on into ``work/`` on a private tmux server, polling on, the receiver on a free port with
        the doorbell's secret set."""
        self.logs.mkdir()
        self.work.mkdir()
        self.port = free_port()
        self._services = True
        self.env.env.update(
            {
                "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin",
                "THE_LOOP_DISABLE_PLUGINS": "github",
                "FAKE_HARNESS_LOG": str(self.logs / "{session}.jsonl"),
                SECRET_ENV: SECRET,
            }
        )
        config = self.document(
            routing={
                "enabled": True,
                "defaultHarness": "fake",
                "spawnWorkdir": str(self.work),
                "tmux": {"socketName": self.socket, "resumeProbeSeconds": 0.3},
            },
            webhook={"secretEnv": SECRET_ENV},
        )
        config["polling"]["enabled"] = True
        config["webhooks"] = {"ghWebhook": {"enabled": True, "port": self.port}}
        self.env.write_config(config)

    # ------------------------------------------------------------------------------------------ in process

    def cycle(self) -> dict[str, Any]:
        """One cycle of core's poll loop over the Jira poll source on :attr:`config`; its result."""
        return run_cycle(ServiceContext(config=self.config, should_stop=lambda: False), [JiraPollSource(self.config)])

    def provider(self) -> JiraTicketProvider:
        """The Jira ticket provider on :attr:`config`."""
        return JiraTicketProvider(self.config)

    def doorbell(self, *, secret: bool = True) -> JiraWebhook:
        """The Jira doorbell route on a config whose ``webhook.secretEnv`` names SECRET_ENV, that variable set to the
        secret (or unset: no route); :meth:`ring` rings it."""
        if secret:
            self.monkeypatch.setenv(SECRET_ENV, SECRET)
        else:
            self.monkeypatch.delenv(SECRET_ENV, raising=False)
        self._hook = JiraWebhook(self.load(webhook={"secretEnv": SECRET_ENV}))
        return self._hook

    @property
    def hook(self) -> JiraWebhook:
        """The route :meth:`doorbell` made last."""
        assert self._hook is not None, "no doorbell: call world.doorbell() first"
        return self._hook

    def ring(self, payload: Any, *, sign: str | None = None, guid: str = "g-1") -> WebhookResponse:
        """Deliver ``payload`` to :attr:`hook` as core's server calls a route: delivery ``guid``, signed with the
        secret unless ``sign`` is the signature header to send."""
        body = json.dumps(payload).encode()
        headers = {"X-Atlassian-Webhook-Identifier": guid, "X-Hub-Signature": sign or signature(SECRET, body)}
        return self.hook.handle(headers, body)

    # -------------------------------------------------------------------------------------- real processes

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``the-loop ARGS`` in a subprocess on this machine's config."""
        return self.env.run(*args, timeout=timeout)

    def poll(self) -> None:
        """``the-loop daemon run poller --once``, which must succeed without a credential in its output."""
        result = self.run("daemon", "run", "poller", "--once", timeout=60)
        assert result.returncode == 0, result.stderr
        assert TOKEN not in result.stdout + result.stderr and EMAIL not in result.stdout + result.stderr

    def start_receiver(self) -> None:
        """``the-loop daemon run gh-webhook`` in the background, once it answers its health check."""
        argv = [sys.executable, "-m", "the_loop", "-c", str(self.env.config_path), "daemon", "run", "gh-webhook"]
        self.receiver = subprocess.Popen(argv, cwd=self.env.cwd, env=self.env.env, stderr=subprocess.PIPE, text=True)

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(lambda: healthy() or self.receiver.poll() is not None, timeout=20)  # type: ignore[union-attr]
        assert self.receiver.poll() is None, self.receiver.stderr.read() if self.receiver.stderr else ""

    def stop_receiver(self) -> None:
        """SIGTERM the receiver and wait for it to exit."""
        assert self.receiver is not None
        self.receiver.send_signal(signal.SIGTERM)
        self.receiver.wait(timeout=30)

    @property
    def receiver_url(self) -> str:
        """The receiver's Jira doorbell."""
        return f"http://127.0.0.1:{self.port}/jira-webhook"

    def ring_receiver(self, payload: dict[str, Any]) -> httpx.Response:
        """POST ``payload`` to the receiver's doorbell, signed with the secret."""
        body = json.dumps(payload).encode()
        headers = {"X-Hub-Signature": signature(SECRET, body), "Content-Type": "application/json"}
        return httpx.post(self.receiver_url, content=body, headers=headers, timeout=10)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``tmux ARGS`` on this machine's private server."""
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10)

    def close(self) -> None:
        """Stop the receiver if it still runs; after the real services, kill the tmux server and any lock holder."""
        if self.receiver is not None and self.receiver.poll() is None:
            self.stop_receiver()
        if self._services:
            subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
            kill_lock_holders(self.env.root)

    # --------------------------------------------------------------------------------------------- readers

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The event log in order: every event, or those called ``name``."""
        return [e for e in self.env.events() if name is None or e["event"] == name]

    def events_text(self) -> str:
        """The event log as written, for a search of the whole trail."""
        return (self.env.root / "logs" / "events.jsonl").read_text()

    def inbox(self) -> list[dict[str, Any]]:
        """The events waiting in the durable inbox, in the order of their entry files."""
        directory = self.env.root / "local" / "inbox"
        return [json.loads(p.read_text())["entry"]["event"] for p in sorted(directory.glob("*.json"))]

    def inbox_keys(self) -> list[str]:
        """The keys of the entries waiting in the durable inbox, sorted."""
        directory = self.env.root / "local" / "inbox"
        return sorted(json.loads(p.read_text())["key"] for p in directory.glob("*.json"))

    def inbox_empty(self) -> bool:
        """No entry waits in the durable inbox."""
        return not list((self.env.root / "local" / "inbox").glob("*.json"))

    def record_path(self, half: str, key: str = "PROJ-12") -> Path:
        """Where the ``half`` (``local`` or ``portable``) record of jira.test's ticket ``key`` is kept."""
        return self.env.root / half / f"jira-jira.test-{key}.json"

    def local(self, key: str = "PROJ-12") -> dict[str, Any] | None:
        """The local record of ticket ``key`` (None when there is none)."""
        path = self.record_path("local", key)
        return json.loads(path.read_text()) if path.exists() else None

    def portable(self, key: str = "PROJ-12") -> dict[str, Any]:
        """The portable record of ticket ``key``, which must exist."""
        return json.loads(self.record_path("portable", key).read_text())

    def harness(self) -> FakeHarness:
        """The fake harness of REF's session as its local record names it."""
        session = (self.local() or {})["sessions"][REF]
        return FakeHarness(self.logs / f"{session['harnessSessionId']}.jsonl")
