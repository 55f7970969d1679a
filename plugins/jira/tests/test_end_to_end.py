"""End to end with real processes: ``the-loop daemon run poller --once`` and the receiver (``daemon run gh-webhook``)
against the fake Jira, the real ``jira`` library, real tmux and the fake harness (E4, E5, E13; Jira-only install).

The GitHub plugin is disabled (``THE_LOOP_DISABLE_PLUGINS=github``): a Jira-only configuration loads, polls, spawns
in ``routing.spawnWorkdir`` and delivers comments, so nothing in core needs the GitHub plugin.
"""

from __future__ import annotations

import json

import httpx
import pytest
from jira_world import EMAIL, REF, SECRET, TARGET, TOKEN, JiraWorld, comment_created, issue_updated

from the_loop.ingress.signing import signature
from the_loop.testing import wait_for


@pytest.fixture
def world(world: JiraWorld) -> JiraWorld:
    """The world with the config the real services run on."""
    world.configure_services()
    return world


def test_e4_e5_e13_jira_only_start_deliver_dedupe_and_close(world: JiraWorld) -> None:
    world.fake.add_comment("PROJ-12", "hello", "acc-x")
    world.poll()  # E3: first sight baselines the thread
    assert world.local() is None and world.portable()["poll"]["seenComments"]

    # E4: an authorized start spawns the session in routing.spawnWorkdir
    world.fake.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10012)
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
    world.fake.add_comment("PROJ-12", "please add a test for the widget", "acc-ok")
    world.poll()
    submitted = harness.wait_for_submitted(2, timeout=20)
    assert "please add a test for the widget" in submitted[-1]

    # E5: the same comment rung through the doorbell is not executed again — the inbox knows the key; and once
    # the inbox has forgotten it (beyond routing.dedupCacheSize), the control claim still holds
    world.start_receiver()
    doorbell = comment_created(10012)
    assert world.ring_receiver(doorbell).status_code == 202
    wait_for(lambda: world.events("webhook.received") and world.inbox_empty(), timeout=20)
    assert world.events("routing.dropped")[-1]["reason"] == "duplicate-delivery"
    (world.env.root / "local" / "inbox" / "completed.jsonl").write_text("")
    assert world.ring_receiver(doorbell).status_code == 202
    wait_for(lambda: any(e["reason"] == "already-processed" for e in world.events("dispatch.dropped")), timeout=20)
    assert len(world.events("control.command")) == 1
    assert len(world.events("session.spawned")) <= 1 and len(harness.records("ready")) == 1

    # E13: Done in Jira closes the session; nobody sent it, so cleanup is deferred
    world.fake.issues["PROJ-12"].category = "done"
    world.stop_receiver()
    world.poll()
    ended = world.portable()["ended"]
    assert ended["source"] == "poll"
    assert ended["outcome"] == "closed-externally"  # Done is a person's word: nothing merged on record
    assert world.local()["sessions"][REF]["status"] == "closed"  # type: ignore[index]
    deferred = world.events("cleanup.deferred")
    assert deferred and deferred[-1]["reason"] == "no-actor"

    # no credential anywhere in the trail
    text = world.events_text()
    assert TOKEN not in text and EMAIL not in text


def test_e6_a7_issue_496_signatures_through_the_real_receiver(world: JiraWorld) -> None:
    """The real server decodes header bytes itself: a non-ASCII signature must be a 401, never a 500."""
    world.start_receiver()
    body = json.dumps(comment_created(1)).encode()
    url = world.receiver_url
    good = signature(SECRET, body)
    for header in (None, b"sha256=" + b"0" * 64, good[:-2].encode() + "é".encode()):
        headers = {"X-Atlassian-Webhook-Identifier": "g-e6", "X-The-Loop-Peer": "10.9.9.9"}  # a forged peer
        headers |= {"X-Hub-Signature": header} if header else {}
        assert httpx.post(url, content=body, headers=headers, timeout=10).status_code == 401
    rejected = world.events("webhook.rejected")
    assert [(e["reason"], e["provider"], e["delivery_id"], e["peer"]) for e in rejected] == [
        ("invalid-signature", "jira", "g-e6", "127.0.0.1")  # J21: the peer, as the server saw it
    ] * 3
    assert world.fake.requests == [] and world.inbox_empty()
    world.stop_receiver()

    del world.env.env["THE_LOOP_JIRA_WEBHOOK_SECRET"]  # no secret: no route, though the receiver runs
    world.start_receiver()
    assert httpx.post(url, content=body, headers={"X-Hub-Signature": good}, timeout=10).status_code == 404
    assert world.fake.requests == []


def test_a6_a_moved_ticket_is_never_acted_on(world: JiraWorld) -> None:
    """Once Jira answers PROJ-12 under another key, neither ingress delivers to, nor closes, PROJ-12's session."""
    world.poll()
    world.fake.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10012)
    world.poll()
    harness = world.harness()
    harness.wait_ready(timeout=20)
    before = len(harness.submitted())

    moved = world.fake.issues.pop("PROJ-12")
    moved.key = "PROJ-40"
    world.fake.issues["PROJ-40"] = moved
    world.fake.moved["PROJ-12"] = "PROJ-40"
    comment = world.fake.add_comment("PROJ-40", "please keep going", "acc-ok")
    moved.category = "done"  # and done: still no closure for PROJ-12, whose key Jira no longer answers to

    world.start_receiver()
    doorbell = comment_created(comment)
    assert world.ring_receiver(doorbell).status_code == 202
    wait_for(lambda: any(e["reason"] == "jira-ticket-moved" for e in world.events("routing.dropped")), timeout=20)
    world.poll()
    assert world.inbox_empty() and not world.events("poll.closure_detected")
    assert "ended" not in world.portable()
    assert world.local()["sessions"][REF]["status"] != "closed"  # type: ignore[index]
    assert world.tmux("has-session", "-t", TARGET).returncode == 0
    assert len(harness.submitted()) == before


def test_e11_a_failing_call_in_the_real_poller_leaks_no_credential(world: JiraWorld) -> None:
    """Jira answers 500 echoing the request headers: the poller's output and the event log name the failure,
    never the token, the e-mail, their base64 pair or the Authorization header."""
    import base64

    world.fake.fail("GET", "search/jql", 500, echo_headers=True)
    result = world.run("daemon", "run", "poller", "--once", timeout=60)
    trail = result.stdout + result.stderr + world.events_text()
    assert "injected 500" in trail
    pair = base64.b64encode(f"{EMAIL}:{TOKEN}".encode()).decode()
    for secret in (TOKEN, EMAIL, pair):
        assert secret not in trail
    assert world.fake.seen("GET", "search/jql")[0].headers["authorization"] == f"Basic {pair}"  # it was sent


def test_j16_j17_done_rung_through_the_webhook_closes_with_source_webhook(world: JiraWorld) -> None:
    world.poll()
    world.fake.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10012)
    world.poll()
    world.harness().wait_ready(timeout=20)
    world.fake.issues["PROJ-12"].category = "done"
    world.start_receiver()
    assert world.ring_receiver(issue_updated()).status_code == 202
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


def test_l16c_a_refused_start_on_a_jira_ticket_gets_one_marked_explanation_and_disarms(world: JiraWorld) -> None:
    from the_loop_jira.markup import AGENT_MARKER

    hooks = world.env.config_path.parent / "hooks"
    hooks.mkdir()
    (hooks / "roster.py").write_text(ROSTER)
    world.env.edit_config(
        lambda c: c.update(hooks=[{"name": "roster", "path": "hooks/roster.py", "on": ["work_item_start"]}])
    )

    world.poll()  # first sight baselines the thread
    world.fake.add_comment("PROJ-12", "the-loop start", "acc-ok")
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
        c for c in world.fake.issues["PROJ-12"].comments if c["author"]["accountId"] == world.fake.myself["accountId"]
    ]
    assert len(posted) == 1
    text = json.dumps(posted[0]["body"])
    assert "not on the release roster" in text and AGENT_MARKER in text

    world.fake.add_comment("PROJ-12", "please get going", "acc-ok")
    world.poll()
    assert world.local() is None and len(world.events("hooks.refused")) == 1  # not asked again without an arming
