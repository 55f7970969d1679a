"""End to end with real processes: ``the-loop daemon run poller --once`` and the receiver (``daemon run gh-webhook``)
against the fake Jira, the real ``jira`` library, real tmux and the fake harness (E4, E5, E13; Jira-only install).

The GitHub plugin is disabled (``THE_LOOP_DISABLE_PLUGINS=github``): a Jira-only configuration loads, polls, spawns
in ``routing.spawnWorkdir`` and delivers comments, so nothing in core needs the GitHub plugin.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_jira import FakeJira
from jira_world import EMAIL, SECRET, TOKEN, base_config

from the_loop.ingress.signing import signature
from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for
from the_loop.testing.harness import FakeHarness

REF = "jira:jira.test/PROJ-12"
SLUG = "jira-jira.test-PROJ-12"
TARGET = "loop-jira-jira_test-PROJ-12"


class World:
    def __init__(self, env: LoopEnv, fake: FakeJira, socket: str, logs: Path, work: Path, port: int) -> None:
        self.env, self.fake, self.socket, self.logs, self.work, self.port = env, fake, socket, logs, work, port
        self.receiver: subprocess.Popen[str] | None = None

    def poll(self) -> None:
        result = self.env.run("daemon", "run", "poller", "--once", timeout=60)
        assert result.returncode == 0, result.stderr
        assert TOKEN not in result.stdout + result.stderr and EMAIL not in result.stdout + result.stderr

    def start_receiver(self) -> None:
        argv = [sys.executable, "-m", "the_loop", "-c", str(self.env.config_path), "daemon", "run", "gh-webhook"]
        self.receiver = subprocess.Popen(argv, cwd=self.env.cwd, env=self.env.env, stderr=subprocess.PIPE, text=True)

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(lambda: healthy() or self.receiver.poll() is not None, timeout=20)  # type: ignore[union-attr]
        assert self.receiver.poll() is None, self.receiver.stderr.read() if self.receiver.stderr else ""

    def ring(self, payload: dict[str, Any]) -> httpx.Response:
        body = json.dumps(payload).encode()
        headers = {"X-Hub-Signature": signature(SECRET, body), "Content-Type": "application/json"}
        return httpx.post(f"http://127.0.0.1:{self.port}/jira-webhook", content=body, headers=headers, timeout=10)

    def inbox_empty(self) -> bool:
        return not list((self.env.root / "local" / "inbox").glob("*.json"))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.env.events() if e["event"] == name]

    def local(self) -> dict[str, Any] | None:
        path = self.env.root / "local" / f"{SLUG}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def portable(self) -> dict[str, Any]:
        return json.loads((self.env.root / "portable" / f"{SLUG}.json").read_text())

    def harness(self) -> FakeHarness:
        session = (self.local() or {})["sessions"][REF]
        return FakeHarness(self.logs / f"{session['harnessSessionId']}.jsonl")

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10)


@pytest.fixture
def world(jira_env: LoopEnv, fake_jira: FakeJira) -> Iterator[World]:
    socket = f"the-loop-test-{secrets.token_hex(6)}"
    logs, work = jira_env.tmp / "harness-logs", jira_env.tmp / "work"
    logs.mkdir()
    work.mkdir()
    port = free_port()
    jira_env.env.update(
        THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin",
        THE_LOOP_DISABLE_PLUGINS="github",
        FAKE_HARNESS_LOG=str(logs / "{session}.jsonl"),
        THE_LOOP_JIRA_WEBHOOK_SECRET=SECRET,
    )
    config = base_config(
        fake_jira,
        routing={
            "enabled": True,
            "defaultHarness": "fake",
            "spawnWorkdir": str(work),
            "tmux": {"socketName": socket, "resumeProbeSeconds": 0.3},
        },
        webhook={"secretEnv": "THE_LOOP_JIRA_WEBHOOK_SECRET"},
    )
    config["polling"]["enabled"] = True
    config["webhooks"] = {"ghWebhook": {"enabled": True, "port": port}}
    jira_env.write_config(config)
    world = World(jira_env, fake_jira, socket, logs, work, port)
    yield world
    if world.receiver is not None and world.receiver.poll() is None:
        world.receiver.send_signal(signal.SIGTERM)
        world.receiver.wait(timeout=30)
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)
    kill_lock_holders(jira_env.root)


def test_e4_e5_e13_jira_only_start_deliver_dedupe_and_close(world: World, fake_jira: FakeJira) -> None:
    fake_jira.add_comment("PROJ-12", "hello", "acc-x")
    world.poll()  # E3: first sight baselines the thread
    assert world.local() is None and world.portable()["poll"]["seenComments"]

    # E4: an authorized start spawns the session in routing.spawnWorkdir
    fake_jira.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10012)
    world.poll()
    control = world.portable()["control"]
    assert (control["command"], control["source"], control["actor"]) == ("start", "comment", "acc-ok")
    assert world.tmux("has-session", "-t", TARGET).returncode == 0
    assert world.local()["sessions"][REF]["cwd"] == str(world.work)  # type: ignore[index]
    claims = json.loads((world.env.root / "local" / "control-deliveries.json").read_text())
    assert claims["deliveries"] == ["jira-comment-jira.test-10012"]
    assert list(claims["holders"]) == ["jira-comment-jira.test-10012"]  # the inbox entry that ran it
    harness = world.harness()
    harness.wait_ready(timeout=20)

    # a Jira comment reaches the session
    fake_jira.add_comment("PROJ-12", "please add a test for the widget", "acc-ok")
    world.poll()
    submitted = harness.wait_for_submitted(2, timeout=20)
    assert "please add a test for the widget" in submitted[-1]

    # E5: the same comment rung through the doorbell is not executed again — the inbox knows the key; and once
    # the inbox has forgotten it (beyond routing.dedupCacheSize), the control claim still holds
    world.start_receiver()
    doorbell = {"webhookEvent": "comment_created", "issue": {"key": "PROJ-12"}, "comment": {"id": 10012}}
    assert world.ring(doorbell).status_code == 202
    wait_for(lambda: world.events("webhook.received") and world.inbox_empty(), timeout=20)
    assert world.events("routing.dropped")[-1]["reason"] == "duplicate-delivery"
    (world.env.root / "local" / "inbox" / "completed.jsonl").write_text("")
    assert world.ring(doorbell).status_code == 202
    wait_for(lambda: any(e["reason"] == "already-processed" for e in world.events("dispatch.dropped")), timeout=20)
    assert len(world.events("control.command")) == 1
    assert len(world.events("session.spawned")) <= 1 and len(harness.records("ready")) == 1

    # E13: Done in Jira closes the session; nobody sent it, so cleanup is deferred
    fake_jira.issues["PROJ-12"].category = "done"
    world.receiver.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    world.receiver.wait(timeout=30)  # type: ignore[union-attr]
    world.poll()
    ended = world.portable()["ended"]
    assert ended["source"] == "poll"
    assert world.local()["sessions"][REF]["status"] == "closed"  # type: ignore[index]
    deferred = world.events("cleanup.deferred")
    assert deferred and deferred[-1]["reason"] == "no-actor"

    # no credential anywhere in the trail
    text = (world.env.root / "logs" / "events.jsonl").read_text()
    assert TOKEN not in text and EMAIL not in text


def test_e6_a7_issue_496_signatures_through_the_real_receiver(world: World, fake_jira: FakeJira) -> None:
    """The real server decodes header bytes itself: a non-ASCII signature must be a 401, never a 500."""
    world.start_receiver()
    body = json.dumps({"webhookEvent": "comment_created", "issue": {"key": "PROJ-12"}, "comment": {"id": 1}}).encode()
    url = f"http://127.0.0.1:{world.port}/jira-webhook"
    good = signature(SECRET, body)
    for header in (None, b"sha256=" + b"0" * 64, good[:-2].encode() + "é".encode()):
        headers = {"X-Atlassian-Webhook-Identifier": "g-e6", "X-The-Loop-Peer": "10.9.9.9"}  # a forged peer
        headers |= {"X-Hub-Signature": header} if header else {}
        assert httpx.post(url, content=body, headers=headers, timeout=10).status_code == 401
    rejected = world.events("webhook.rejected")
    assert [(e["reason"], e["provider"], e["delivery_id"], e["peer"]) for e in rejected] == [
        ("invalid-signature", "jira", "g-e6", "127.0.0.1")  # J21: the peer, as the server saw it
    ] * 3
    assert fake_jira.requests == [] and world.inbox_empty()
    world.receiver.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    world.receiver.wait(timeout=30)  # type: ignore[union-attr]

    del world.env.env["THE_LOOP_JIRA_WEBHOOK_SECRET"]  # no secret: no route, though the receiver runs
    world.start_receiver()
    assert httpx.post(url, content=body, headers={"X-Hub-Signature": good}, timeout=10).status_code == 404
    assert fake_jira.requests == []


def test_a6_a_moved_ticket_is_never_acted_on(world: World, fake_jira: FakeJira) -> None:
    """Once Jira answers PROJ-12 under another key, neither ingress delivers to, nor closes, PROJ-12's session."""
    world.poll()
    fake_jira.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10012)
    world.poll()
    harness = world.harness()
    harness.wait_ready(timeout=20)
    before = len(harness.submitted())

    moved = fake_jira.issues.pop("PROJ-12")
    moved.key = "PROJ-40"
    fake_jira.issues["PROJ-40"] = moved
    fake_jira.moved["PROJ-12"] = "PROJ-40"
    comment = fake_jira.add_comment("PROJ-40", "please keep going", "acc-ok")
    moved.category = "done"  # and done: still no closure for PROJ-12, whose key Jira no longer answers to

    world.start_receiver()
    doorbell = {"webhookEvent": "comment_created", "issue": {"key": "PROJ-12"}, "comment": {"id": comment}}
    assert world.ring(doorbell).status_code == 202
    wait_for(lambda: any(e["reason"] == "jira-ticket-moved" for e in world.events("routing.dropped")), timeout=20)
    world.poll()
    assert world.inbox_empty() and not world.events("poll.closure_detected")
    assert "ended" not in world.portable()
    assert world.local()["sessions"][REF]["status"] != "closed"  # type: ignore[index]
    assert world.tmux("has-session", "-t", TARGET).returncode == 0
    assert len(harness.submitted()) == before


def test_e11_a_failing_call_in_the_real_poller_leaks_no_credential(world: World, fake_jira: FakeJira) -> None:
    """Jira answers 500 echoing the request headers: the poller's output and the event log name the failure,
    never the token, the e-mail, their base64 pair or the Authorization header."""
    import base64

    fake_jira.fail("GET", "search/jql", 500, echo_headers=True)
    result = world.env.run("daemon", "run", "poller", "--once", timeout=60)
    trail = result.stdout + result.stderr + (world.env.root / "logs" / "events.jsonl").read_text()
    assert "injected 500" in trail
    pair = base64.b64encode(f"{EMAIL}:{TOKEN}".encode()).decode()
    for secret in (TOKEN, EMAIL, pair):
        assert secret not in trail
    assert fake_jira.seen("GET", "search/jql")[0].headers["authorization"] == f"Basic {pair}"  # it was sent


def test_j16_j17_done_rung_through_the_webhook_closes_with_source_webhook(world: World, fake_jira: FakeJira) -> None:
    world.poll()
    fake_jira.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10012)
    world.poll()
    world.harness().wait_ready(timeout=20)
    fake_jira.issues["PROJ-12"].category = "done"
    world.start_receiver()
    assert world.ring({"webhookEvent": "jira:issue_updated", "issue": {"key": "PROJ-12"}}).status_code == 202
    wait_for(lambda: "ended" in world.portable(), timeout=20)
    assert world.portable()["ended"]["source"] == "webhook"
    assert world.local()["sessions"][REF]["status"] == "closed"  # type: ignore[index]  # closed before ended is stamped
    wait_for(lambda: world.events("cleanup.deferred"), timeout=20)  # the last step of the close path
    assert world.events("cleanup.deferred")[-1]["reason"] == "no-actor"


ROSTER = """
from the_loop.hooks.lifecycle import LifecycleHooks, WorkItemStart


class Roster(LifecycleHooks):
    def work_item_start(self, ctx: WorkItemStart) -> object:
        return {"proceed": False, "reason": "not on the release roster"}
"""


def test_l16c_a_refused_start_on_a_jira_ticket_gets_one_marked_explanation_and_disarms(
    world: World,
    fake_jira: FakeJira,
) -> None:
    from the_loop_jira.markup import AGENT_MARKER

    hooks = world.env.config_path.parent / "hooks"
    hooks.mkdir()
    (hooks / "roster.py").write_text(ROSTER)
    world.env.edit_config(
        lambda c: c.update(hooks=[{"name": "roster", "path": "hooks/roster.py", "on": ["work_item_start"]}])
    )

    world.poll()  # first sight baselines the thread
    fake_jira.add_comment("PROJ-12", "the-loop start", "acc-ok")
    world.poll()

    assert world.local() is None and world.tmux("has-session", "-t", "loop-jira-jira_test-PROJ-12").returncode != 0
    refused = [e for e in world.events("hooks.refused") if e.get("point") == "work_item_start"]
    assert len(refused) == 1 and refused[0]["reason"] == "not on the release roster"
    settled = [e for e in world.events("dispatch.dropped") + world.events("control.rejected")]
    assert any(e.get("reason") == "hook-refused" for e in settled)
    portable = world.portable()
    assert (portable.get("control") or {}).get("command") != "start"  # disarmed: a later comment spawns nothing
    assert "lifecycle" not in portable

    posted = [
        c for c in fake_jira.issues["PROJ-12"].comments if c["author"]["accountId"] == fake_jira.myself["accountId"]
    ]
    assert len(posted) == 1
    text = json.dumps(posted[0]["body"])
    assert "not on the release roster" in text and AGENT_MARKER in text

    fake_jira.add_comment("PROJ-12", "please get going", "acc-ok")
    world.poll()
    assert world.local() is None and len(world.events("hooks.refused")) == 1  # not asked again without an arming
