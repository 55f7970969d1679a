"""The GitHub poller (poller.md B §7 scenarios, §8 regressions) against the fake GitHub API over real HTTP, with the
real daemon (``the-loop daemon run poller``), real tmux on a private server and the fake harness.

Each ``--once`` run is one cycle in a fresh process, so every cycle here is also a restart: nothing may be forwarded
twice or lost across processes (B11). Cost scenarios (B26) run cycles in-process against one source. Budgets spent by
real failures (B7, B8) run source, inbox worker and router in-process, with real tmux refusing ``new-session`` and
the inbox's retry clock injected; the older B7/B8 tests keep the same budgets across ``--once`` restarts with the
inbox's abandoning simulated. A dispatch is held open for real by delaying its "started" reaction at the fake (B9,
B14).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fake_github import BOT, TOKEN, FakeGitHub
from gh_world import GitHubWorld, MakeWorld

from the_loop.testing import LoopEnv, wait_for
from the_loop.testing.harness import FakeHarness

AUTO = "the-loop: auto-execute"
REPO = "octo/repo"
REF1 = "github:octo/repo#1"
MARKER = "<!-- the-loop:agent-comment -->"


def body_count(world: GitHubWorld, number: int, text: str) -> int:
    """How many times ``text`` reached the session's harness log (each paste is one submitted message)."""
    return sum(text in line for line in world.pasted(number))


# ---------------------------------------------------------------------------------------------- first sight


def test_b1_first_sight_baselines_the_thread_and_spawns_once(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    w.fake.add_issue(REPO, 1, title="Widget", labels=[AUTO], author="alice")
    ids = [w.fake.add_comment(REPO, 1, f"old remark {n}", login="alice") for n in range(3)]
    w.cycle(2)
    session = w.session(1)
    assert session is not None and session["tmuxTarget"] == "loop-github-octo-repo-1"
    w.harness(1).wait_ready(timeout=20)
    assert all(body_count(w, 1, f"old remark {n}") == 0 for n in range(3))
    ledger = w.ledger(1)
    own = {f"IC_fake{c['id']}" for c in w.fake.comments_on(REPO, 1) if MARKER in c["body"]}  # the announcement
    assert sorted(ledger["seenComments"]) == sorted({f"IC_fake{i}" for i in ids} | own)
    assert ledger["commentAttempts"] == {}
    assert ledger["spawn"] == {}  # reset once the session exists
    assert len(w.events("routing.routed")) == 1  # one presence sent
    assert ledger["title"] == "Widget"


def test_b2_b11_new_comment_is_pasted_exactly_once_across_restarts(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    w.cycle(2)
    w.harness(1).wait_ready(timeout=20)
    cid = w.fake.add_comment(REPO, 1, "please fix the widget", login="alice")
    started = w.heartbeat()["startedAt"]
    w.cycle(3)  # three processes: every one of them a restart
    assert w.heartbeat()["startedAt"] != started
    wait_for(lambda: body_count(w, 1, "please fix the widget") == 1, timeout=20)
    forwarded = w.events("poll.comment_forwarded")
    assert [(e["comment_id"], e["attempt"]) for e in forwarded] == [(f"IC_fake{cid}", 1)]
    ledger = w.ledger(1)
    assert f"IC_fake{cid}" in ledger["seenComments"] and ledger["commentAttempts"] == {}
    time.sleep(0.5)
    assert body_count(w, 1, "please fix the widget") == 1
    assert len([p for p in w.env.root.glob("local/github-octo-repo-*.json")]) == 1  # no second session


def test_b3_strangers_and_self_marked_comments_are_baselined_without_an_attempt(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    w.cycle(2)
    w.harness(1).wait_ready(timeout=20)
    stranger = w.fake.add_comment(REPO, 1, "mallory says run rm", login="mallory")
    own = w.fake.add_comment(REPO, 1, f"status update\n{MARKER}", login="alice")
    w.cycle(1)
    ledger = w.ledger(1)
    assert {f"IC_fake{stranger}", f"IC_fake{own}"} <= set(ledger["seenComments"])
    assert ledger["commentAttempts"] == {}
    assert not w.events("poll.comment_forwarded")
    assert body_count(w, 1, "mallory") == 0 and body_count(w, 1, "status update") == 0


def established(w: GitHubWorld, number: int = 1, *, pull: bool = False) -> FakeHarness:
    """Item ``number`` by alice, labelled, with a live session (first sight and its spawn)."""
    w.fake.add_issue(REPO, number, labels=[AUTO], author="alice", pull_request=pull)
    w.cycle(2)
    harness = w.harness(number)
    harness.wait_ready(timeout=20)
    return harness


def test_b4_pull_request_surfaces_reviews_and_inline_comments(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 2, pull=True)
    w.fake.add_review(REPO, 2, "fix X", "COMMENTED", login="alice")
    w.fake.add_review(REPO, 2, "", "APPROVED", login="alice")
    w.fake.add_review(REPO, 2, "draft thoughts", "PENDING", login="alice")
    w.fake.add_inline_comment(REPO, 2, "rename this", "a.py", 7, login="alice")
    w.cycle(2)
    wait_for(lambda: len([t for t in w.pasted(2) if "poll-comment-" in t]) == 2, timeout=20)
    pasted = [t for t in w.pasted(2) if "poll-comment-" in t]
    assert any("fix X" in t for t in pasted)
    inline = next(t for t in pasted if "rename this" in t)
    assert "a.py" in inline and "7" in inline
    assert not any("draft thoughts" in t for t in w.pasted(2))
    keys = [e["delivery_id"] for e in w.events("dispatch.succeeded") if "review" in e["delivery_id"]]
    assert keys and all(k.startswith(("github:review:PRR_", "github:review-comment:PRRC_")) for k in keys)


def test_b5_start_posted_before_first_sight_is_executed(gh_world: MakeWorld) -> None:
    w = gh_world("poller", control={"requireStartCommand": True})
    w.fake.add_issue(REPO, 3, labels=[AUTO], author="alice")
    w.fake.add_comment(REPO, 3, "chatter one", login="alice")
    w.fake.add_comment(REPO, 3, "the-loop start", login="alice")
    w.fake.add_comment(REPO, 3, "chatter two", login="alice")
    w.cycle(1)
    assert w.session(3) is not None
    assert w.portable(3)["control"]["command"] == "start" and w.portable(3)["control"]["actor"] == "alice"
    w.cycle(1)
    assert not w.events("poll.spawn_failed")
    assert all("chatter" not in text for text in w.pasted(3))


def test_b6_issue_opened_by_a_stranger_waits_for_a_start(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    w.fake.add_issue(REPO, 4, labels=[AUTO], author="mallory")
    w.cycle(2)
    assert w.session(4) is None
    assert [e["actor"] for e in w.events("poll.unauthorized")] == ["mallory"]  # once, not every cycle
    w.fake.add_comment(REPO, 4, "the-loop start", login="alice")
    w.cycle(1)
    assert w.session(4) is not None


# ------------------------------------------------------------------------------------------------ closure


def closure_questions(w: GitHubWorld, number: int) -> int:
    return len(w.fake.calls("GET", f"/repos/octo/repo/issues/{number}"))


def test_b15_closed_issue_ends_through_the_close_path(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    w.fake.close(REPO, 1, by="bob", reason="completed")
    w.cycle(1)
    detected = w.events("poll.closure_detected")
    assert [(e["state"], e["kind"]) for e in detected] == [("closed", "issue")]
    ended = w.portable(1)["ended"]
    assert (ended["state"], ended["reason"], ended["source"], ended["actor"]) == (
        "closed",
        "issue-closed",
        "poll",
        "bob",
    )
    assert ended["outcome"] == "closed-externally"  # closed as completed, but nothing merged on record
    assert [e["reason"] for e in w.events("cleanup.deferred")] == ["unauthorized-actor"]
    assert "poll" not in w.portable(1)
    assert REF1 not in w.clocks()
    has = w.tmux("has-session", "-t", "=loop-github-octo-repo-1")
    assert has.returncode == 0  # kept for a person to read: the closer was not authorized to clean up
    asked = closure_questions(w, 1)
    w.cycle(2)
    assert closure_questions(w, 1) == asked  # never asked again


def test_a_polled_closure_carries_the_state_reason_into_the_outcome(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    w.fake.close(REPO, 1, by="bob", reason="not_planned")
    w.cycle(1)
    assert w.portable(1)["ended"]["outcome"] == "cancelled"


def test_s4_an_item_answering_404_twice_ends_as_deleted_without_cleanup(gh_world: MakeWorld) -> None:
    """§4 item-level faults: one 404 may be a blip (the session stays); two in a row close the item as ``deleted``
    through the one close path, and nobody closed it, so cleanup waits for a person."""
    w = gh_world("poller")
    established(w, 1)
    with w.fake.lock:
        del w.fake.items[("octo/repo", 1)]  # deleted upstream: gone from the listing, 404 when asked
    w.cycle(1)
    assert "ended" not in w.portable(1) and w.session(1)["status"] == "active"
    assert [e["work_item"] for e in w.events("poll.item_error")] == [REF1]
    w.cycle(1)
    ended = w.portable(1)["ended"]
    assert (ended["state"], ended["reason"], ended["kind"], ended["actor"]) == ("deleted", "deleted", "issue", "")
    assert [(e["state"], e["reason"]) for e in w.events("poll.closure_detected")] == [("deleted", "not-found")]
    assert w.session(1)["status"] == "closed"
    assert [e["reason"] for e in w.events("cleanup.deferred")] == ["no-actor"]
    asked = closure_questions(w, 1)
    w.cycle(1)
    assert closure_questions(w, 1) == asked  # ended: never asked again


def test_b16_merged_pull_request_ends_as_merged(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 2, pull=True)
    w.fake.items[("octo/repo", 2)].merged = True
    w.fake.close(REPO, 2, by="alice")
    w.cycle(1)
    ended = w.portable(2)["ended"]
    assert (ended["state"], ended["reason"], ended["kind"]) == ("merged", "pr-merged", "pull-request")
    assert ended["outcome"] == "completed"
    assert [(e["state"], e["kind"]) for e in w.events("poll.closure_detected")] == [("merged", "pull-request")]


def test_b17_failed_listing_never_closes(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    w.fake.close(REPO, 1, by="alice")
    w.fake.fault("GET", "/repos/octo/repo/issues", status=500)
    w.cycle(1)
    assert closure_questions(w, 1) == 0
    assert w.session(1)["status"] == "active"
    failed = w.heartbeat()["lastCycle"]["scopesFailed"]
    assert failed[0]["scope"] == "octo/repo" and failed[0]["permanent"] is False
    assert w.events("poll.scope_error")


def test_b19_label_removed_still_open_is_asked_every_cycle_and_kept(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    w.fake.items[("octo/repo", 1)].labels = []
    w.cycle(3)
    assert closure_questions(w, 1) == 3
    assert w.session(1)["status"] == "active" and "ended" not in w.portable(1)


def test_b21_reopened_item_is_first_sight_again(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    before = w.session(1)["harnessSessionId"]
    w.fake.close(REPO, 1, by="bob")
    w.cycle(1)
    assert "ended" in w.portable(1)
    w.fake.add_comment(REPO, 1, "said while closed", login="alice")
    item = w.fake.items[("octo/repo", 1)]
    item.state, item.updated_at = "open", w.fake.stamp()
    w.cycle(2)
    assert [e["source"] for e in w.events("work_item.reopened")] == ["poll"]
    assert "ended" not in w.portable(1)
    assert not w.events("poll.comment_forwarded")  # re-baselined, no replay
    wait_for(lambda: (w.session(1) or {}).get("harnessSessionId") not in (None, before), timeout=20)
    assert all("said while closed" not in text for text in w.pasted(1))


def test_b20_ledger_only_records_are_asked_lazily(gh_world: MakeWorld) -> None:
    from the_loop.state import atomic_write_json

    w = gh_world("poller")
    portable = w.env.root / "portable"
    portable.mkdir(parents=True, exist_ok=True)
    clocks = {}
    for offset, number in enumerate(range(101, 126)):
        w.fake.add_issue(REPO, number)  # open, unlabelled: never listed
        ref = f"github:octo/repo#{number}"
        atomic_write_json(portable / f"github-octo-repo-{number}.json", {"ref": ref, "poll": {"seenComments": []}})
        age = 7200 - offset * 60  # 101 is the longest absent
        clocks[ref] = {"lastPolledAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - age))}
    (w.env.root / "local").mkdir(parents=True, exist_ok=True)
    atomic_write_json(w.env.root / "local" / "poll-clocks.json", {"clocks": clocks})

    def asked() -> list[int]:
        return [int(r.path.rsplit("/", 1)[1]) for r in w.fake.calls("GET", r"/repos/octo/repo/issues/\d+")]

    w.cycle(1)
    assert asked() == list(range(101, 121))  # twenty, oldest first
    w.cycle(1)
    assert asked() == list(range(101, 126))  # the other five
    w.cycle(1)
    assert len(asked()) == 25  # open ones are not asked again within sixty cycles' worth
    assert all("closureCheckedAt" in entry for entry in w.clocks().values())
    (w.env.root / "local" / "poll-clocks.json").unlink()
    w.cycle(1)
    assert len(asked()) == 45  # due again, at most twenty per cycle
    assert not w.events("poll.comment_forwarded") and not w.events("routing.routed")


# ------------------------------------------------------------------------------------------- process, lock


def wait_cycles(w: GitHubWorld, count: int, timeout: float = 30) -> None:
    wait_for(lambda: len(w.events("poll.cycle")) >= count, timeout=timeout)


def test_b18_issues_disabled_is_quarantined_per_repository(gh_world: MakeWorld) -> None:
    w = gh_world("poller", repositories=["octo/a", "octo/b"], enabled=False)
    w.fake.add_issue("octo/a", 1, labels=[AUTO], author="alice")
    w.fake.add_issue("octo/b", 2, labels=[AUTO], author="alice", pull_request=True)
    w.fake.fault("GET", "/repos/octo/b/issues", status=410, message="Issues are disabled for this repo")
    process = w.start_poller()
    wait_cycles(w, 5)
    w.stop(process)
    cycles = len(w.events("poll.cycle"))
    assert len(w.fake.calls("GET", "/repos/octo/a/issues")) == cycles  # a: every cycle
    assert len(w.fake.calls("GET", "/repos/octo/b/issues")) == 1  # b's issues: asked once
    assert len(w.fake.calls("GET", "/repos/octo/b/pulls")) == cycles  # b's pull requests: still every cycle
    assert len(w.events("poll.scope_degraded")) == 1
    last = w.heartbeat()["lastCycle"]
    assert last["scopesSkipped"] == ["octo/b"] and last["scopesPolled"] == 2
    b_record = json.loads((w.env.root / "portable" / "github-octo-b-2.json").read_text())
    assert "seenComments" in b_record["poll"]  # b's labelled pull request was still polled
    first = w.events("poll.cycle")[0]
    assert first["scopes_failed"] == 1
    status = w.env.run("status").stdout
    assert "degraded:   octo/b — skipped" in status and "before it stopped" in status


def test_b12_second_poller_is_blocked_and_a_stale_pidfile_is_taken(gh_world: MakeWorld) -> None:
    w = gh_world("poller", enabled=False, polling={"intervalSeconds": 60})  # the first sleeps after one cycle …
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    process = w.start_poller()
    wait_cycles(w, 1)
    requests = len(w.fake.requests)
    began = time.monotonic()
    second = w.env.run("daemon", "run", "poller", timeout=30)
    assert second.returncode != 0 and time.monotonic() - began < 5
    assert [e["holder"] for e in w.events("poller.blocked")] == [process.pid]
    assert len(w.fake.requests) == requests  # … so any request now would be the blocked one's: there is none
    assert len(w.events("poll.cycle")) == 1
    w.stop(process)
    pidfile = w.env.root / "poll.pid"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pidfile.write_text(f"{dead.pid}\n")
    started = w.env.run("start", timeout=60)
    assert started.returncode == 0, started.stdout + started.stderr
    holder = int(pidfile.read_text().strip())
    assert holder != dead.pid
    stopped = w.env.run("stop", timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def test_b13_b22_heartbeat_shape_status_and_graceful_stop(gh_world: MakeWorld) -> None:
    w = gh_world("poller", enabled=False)
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    w.fake.fault("GET", "/repos/octo/repo/issues", delay=2.0, times=1)  # the first cycle takes a while
    process = w.start_poller()
    beat_path = w.env.root / "poll-status.json"
    wait_for(beat_path.exists, timeout=20)
    beat = w.heartbeat()
    assert beat["lastCycleAt"] == "" and beat["lastCycle"] == {} and beat["startedAt"] and "pid" not in beat
    wait_for(lambda: w.heartbeat()["lastCycleAt"], timeout=20)
    last = w.heartbeat()["lastCycle"]
    assert last["itemsSeen"] == 1 and last["scopesPolled"] == 1 and last["scopesFailed"] == []
    status = w.env.run("status", "--format", "json")
    assert status.returncode == 0, status.stdout + status.stderr
    row = next(r for r in json.loads(status.stdout)["services"] if r["service"] == "poller")
    assert row["running"] and row["pid"] == process.pid
    text = w.env.run("status").stdout
    assert "last cycle:" in text and "started:" in text
    stopped = w.env.run("stop", timeout=60)
    assert stopped.returncode == 0 and process.wait(timeout=5) == 0
    assert not (w.env.root / "poll.pid").exists() and beat_path.exists()
    assert w.events("poller.stopped")


def test_b24_missing_token_refuses_before_the_lock(gh_world: MakeWorld) -> None:
    w = gh_world("poller", enabled=False)
    w.env.env.pop("GH_TOKEN", None)
    result = w.env.run("daemon", "run", "poller", "--once", GH_TOKEN="", GITHUB_TOKEN="")
    assert result.returncode == 1
    assert "GH_TOKEN" in result.stderr and "GITHUB_TOKEN" in result.stderr
    assert not (w.env.root / "poll.pid").exists() and not w.fake.requests


def test_b25_rate_limit_stops_every_call_until_the_reset(gh_world: MakeWorld) -> None:
    w = gh_world("poller", enabled=False)
    established_ledger = w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    assert established_ledger
    reset = str(int(time.time()) + 120)
    w.fake.fault(
        "GET",
        "/repos/octo/repo/issues",
        status=403,
        times=1,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset},
        message="API rate limit exceeded",
    )
    process = w.start_poller()
    wait_cycles(w, 4)
    w.stop(process)
    assert len(w.fake.requests) == 1  # the one that was told to wait
    failed = w.heartbeat()["lastCycle"]["scopesFailed"]
    assert failed and "rate-limited" in failed[0]["error"] and failed[0]["permanent"] is False
    assert not w.events("poll.closure_detected") and not w.ledger(1)


def test_kill_mid_cycle_loses_nothing_and_delivers_nothing_twice(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    established(w, 2)
    w.fake.add_comment(REPO, 2, "second item words", login="alice")
    w.fake.add_comment(REPO, 1, "first item words", login="alice")  # #1 is newer: processed first
    w.fake.fault("GET", "/repos/octo/repo/issues/2/comments", delay=5.0, times=1)
    process = w.start_poller()
    wait_for(lambda: w.fake.calls("GET", "/repos/octo/repo/issues/2/comments"), timeout=30)
    time.sleep(0.3)
    process.send_signal(signal.SIGKILL)  # mid-cycle: #1 handled, #2 being read
    process.wait(timeout=10)
    w.cycle(3)
    wait_for(lambda: body_count(w, 1, "first item words") == 1 and body_count(w, 2, "second item words") == 1, 30)
    time.sleep(0.5)
    assert body_count(w, 1, "first item words") == 1 and body_count(w, 2, "second item words") == 1
    assert w.ledger(1)["commentAttempts"] == {} and w.ledger(2)["commentAttempts"] == {}


def test_b27_a_comment_seen_by_webhook_and_poller_is_pasted_once(gh_world: MakeWorld) -> None:
    import gh_payloads

    w = gh_world("poller")
    established(w, 1)
    cid = w.fake.add_comment(REPO, 1, "said on both ingresses", login="alice")
    receiver = w.start_receiver()  # the config gets a ghWebhook: the receiver routes beside the poller
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"), number=1, body="said on both ingresses", login="alice", labels=[AUTO]
    )
    payload["issue"].pop("pull_request", None)
    payload["comment"].update(id=cid, node_id=f"IC_fake{cid}")
    assert receiver.post("issue_comment", payload).status_code == 202
    wait_for(lambda: body_count(w, 1, "said on both ingresses") == 1, timeout=20)
    w.cycle(2)
    time.sleep(1.0)
    assert body_count(w, 1, "said on both ingresses") == 1
    assert f"IC_fake{cid}" in w.ledger(1)["seenComments"]
    receiver.stop()


def test_b8_comment_give_up_posts_one_notice_without_the_text(gh_world: MakeWorld) -> None:
    """The inbox abandoning a round (every attempt failed) is simulated by moving its entry to ``abandoned/``,
    exactly where :meth:`Inbox.release` puts an entry after its last attempt."""
    w = gh_world("poller", enabled=False)
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    w.cycle(1)
    cid = w.fake.add_comment(REPO, 1, "secret plan do not echo", login="alice")
    inbox = w.env.root / "local" / "inbox"

    def abandon_pending() -> None:
        (inbox / "abandoned").mkdir(exist_ok=True)
        moved = 0
        for entry in inbox.glob("*.json"):
            if json.loads(entry.read_text())["key"] == f"github:comment:IC_fake{cid}":
                entry.rename(inbox / "abandoned" / entry.name)
                moved += 1
        assert moved == 1

    for _ in range(3):
        w.cycle(1)
        abandon_pending()
    w.cycle(2)
    attempts = [e["attempt"] for e in w.events("poll.comment_forwarded")]
    assert attempts == [1, 2, 3]
    failed = w.events("poll.comment_failed")
    assert len(failed) == 1 and failed[0]["attempts"] == 3
    from the_loop import __version__

    ledger = w.ledger(1)
    assert ledger["gaveUp"] == {"comments": [f"IC_fake{cid}"], "version": __version__}
    assert f"IC_fake{cid}" in ledger["seenComments"] and ledger["commentAttempts"] == {}
    posts = [r.body["body"] for r in w.fake.calls("POST", "/repos/octo/repo/issues/1/comments")]
    assert len(posts) == 1 and f"IC_fake{cid}" in posts[0] and MARKER in posts[0]
    assert all("secret plan" not in post for post in posts)
    assert len(w.events("poll.giveup_reported")) == 1


def test_b10_a_comment_settled_while_paused_is_never_pasted(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    paused = w.env.run("sessions", "pause", "--work-item", REF1)
    assert paused.returncode == 0, paused.stderr
    cid = w.fake.add_comment(REPO, 1, "while you were paused", login="alice")
    w.cycle(2)
    ledger = w.ledger(1)
    assert f"IC_fake{cid}" in ledger["seenComments"] and ledger["commentAttempts"] == {}
    settled = [e for e in w.env.events() if e["event"] == "poll.comment_settled"]
    assert [(e["comment_id"], e["outcome"]) for e in settled] == [(f"IC_fake{cid}", "session-paused")]
    assert w.env.run("sessions", "resume", "--work-item", REF1).returncode == 0
    w.cycle(1)
    time.sleep(0.5)
    assert body_count(w, 1, "while you were paused") == 0


# ----------------------------------------------------------------------------------------------------- cost


def in_process_source(env: LoopEnv, host: Any, fake: FakeGitHub, repositories: list[str], **settings: Any) -> Any:
    """A :class:`GitHubPollSource` in this process (routing off: events stay in the inbox); ``settings`` go into
    its ``polling.sources[]`` entry."""
    import the_loop_github.plugin
    from the_loop.config import load_config
    from the_loop_github.poll import GitHubPollSource

    host.register(the_loop_github.plugin, "github")
    env.write_config(
        {
            "version": "0.12.0",
            "repositories": repositories,
            "routing": {"authorizedUsers": ["alice"]},
            "polling": {"enabled": True, "intervalSeconds": 1, "sources": [{"provider": "github", **settings}]},
            **fake.config(),
        }
    )
    return GitHubPollSource(load_config(env.config_path, host))


def test_b26_idle_cycles_are_conditional_hits_with_no_comment_reads(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        fake.add_comment(REPO, 1, "hello", login="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        source.poll_once(context)
        first = len(fake.requests)
        assert any(r.path.endswith("/comments") for r in fake.requests[:first])
        source.poll_once(context)
        source.poll_once(context)
        later = fake.requests[first:]
        assert len(later) == 2  # one listing per cycle, nothing else
        assert all(r.headers.get("If-None-Match") and r.status == 304 for r in later)
        assert not any("/comments" in r.path for r in later)
        cid = fake.add_comment(REPO, 1, "news", login="alice")
        mark = len(fake.requests)
        result = source.poll_once(context)
        busy = fake.requests[mark:]
        assert [r.status for r in busy] == [200, 200]  # the listing moved; one comment read, with since=
        assert "since=" in busy[1].query
        assert result["commentsForwarded"] == 1
        assert f"IC_fake{cid}" in source.store.read("github:octo/repo#1")["poll"]["commentAttempts"]


def test_r13_only_items_with_every_required_label_are_kept(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        fake.add_issue(REPO, 2, labels=[], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO, "OCTO/repo"])
        result = source.poll_once(ServiceContext(config=source.config, should_stop=lambda: False))
        assert result["itemsSeen"] == 1 and result["scopesPolled"] == 1  # de-duplicated, case-insensitively
        listing = fake.calls("GET", "/repos/octo/repo/issues")[0]
        assert "labels=the-loop" in listing.query and "state=open" in listing.query
        assert source.store.read("github:octo/repo#2") is None


def test_pagination_follows_link_and_caps_the_listing(
    gh_env: LoopEnv, plugin_host: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        for number in range(1, 231):
            fake.add_issue(REPO, number, labels=[AUTO], author="mallory")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        result = source.poll_once(ServiceContext(config=source.config, should_stop=lambda: False))
        assert result["itemsSeen"] == 200  # LIST_LIMIT per repository
        assert len(fake.calls("GET", "/repos/octo/repo/issues")) == 2
        source.poll_once(ServiceContext(config=source.config, should_stop=lambda: False))
        warnings = [line for line in capsys.readouterr().err.splitlines() if "at least 200" in line]
        assert len(warnings) == 1 and "octo/repo" in warnings[0]  # said once, not every cycle


# ------------------------------------------------------------------------------------------ retry budgets


def abandon(w: GitHubWorld, key_prefix: str) -> int:
    """Move the pending inbox entries whose key starts with ``key_prefix`` to ``abandoned/``, where the inbox puts
    an entry after its last failed attempt (the fault a spawn that cannot start produces, minus the backoff)."""
    inbox = w.env.root / "local" / "inbox"
    (inbox / "abandoned").mkdir(parents=True, exist_ok=True)
    moved = 0
    for entry in inbox.glob("*.json"):
        if json.loads(entry.read_text())["key"].startswith(key_prefix):
            entry.rename(inbox / "abandoned" / entry.name)
            moved += 1
    return moved


def test_b7_spawn_give_up_and_rearm_by_a_new_comment(gh_world: MakeWorld) -> None:
    w = gh_world("poller", enabled=False)
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    for _ in range(3):
        w.cycle(1)
        assert abandon(w, "poll-presence-github:octo/repo#1-") == 1
    w.cycle(2)
    presences = {p.name for p in (w.env.root / "local" / "inbox" / "abandoned").glob("*.json")}
    assert len(presences) == 3  # exactly three attempts, each with a fresh delivery id
    failed = w.events("poll.spawn_failed")
    assert [e["attempts"] for e in failed] == [3]
    assert w.ledger(1)["spawn"]["gaveUp"] is True
    assert w.heartbeat()["lastCycle"]["failures"] == 0  # counted once, in the cycle that gave up
    w.fake.add_comment(REPO, 1, "try again please", login="alice")
    w.cycle(1)
    assert w.ledger(1)["spawn"] == {}  # re-armed: the comment itself goes to the router, which spawns
    assert [e["attempt"] for e in w.events("poll.comment_forwarded")] == [1]


def test_b9_an_attempt_in_flight_spends_nothing(gh_world: MakeWorld) -> None:
    w = gh_world("poller", enabled=False)  # nothing routes: the entry stays pending (in flight)
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    w.cycle(1)
    cid = w.fake.add_comment(REPO, 1, "slow to deliver", login="alice")
    w.cycle(4)
    assert w.ledger(1)["commentAttempts"] == {f"IC_fake{cid}": 1}
    assert len(w.events("poll.comment_forwarded")) == 1
    keys = [json.loads(p.read_text())["key"] for p in (w.env.root / "local" / "inbox").glob("*.json")]
    assert keys.count(f"github:comment:IC_fake{cid}") == 1


def test_r29_comments_given_up_by_another_version_get_a_fresh_budget(gh_world: MakeWorld) -> None:
    w = gh_world("poller", enabled=False)
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    w.cycle(1)
    cid = w.fake.add_comment(REPO, 1, "failed under the old version", login="alice")
    record_path = w.env.root / "portable" / "github-octo-repo-1.json"
    record = json.loads(record_path.read_text())
    record["poll"]["seenComments"].append(f"IC_fake{cid}")
    record["poll"]["gaveUp"] = {"comments": [f"IC_fake{cid}"], "version": "0.0.1"}
    record_path.write_text(json.dumps(record))
    w.cycle(1)
    assert [(e["comments"], e["version"] != "0.0.1") for e in w.events("poll.rearmed")] == [(1, True)]
    assert w.ledger(1)["gaveUp"] == {} and w.ledger(1)["commentAttempts"] == {f"IC_fake{cid}": 1}
    w.cycle(1)
    assert len(w.events("poll.rearmed")) == 1  # each process re-arms once, and only for another version


def test_404_is_a_permanent_scope_failure_not_an_endless_retry(gh_world: MakeWorld) -> None:
    w = gh_world("poller", repositories=["octo/repo", "octo/gone"], enabled=False)
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    process = w.start_poller()
    wait_cycles(w, 3)
    w.stop(process)
    assert len(w.fake.calls("GET", "/repos/octo/gone/issues")) == 1
    beats = w.events("poll.cycle")
    assert beats[0]["scopes_failed"] == 1 and beats[0]["scopes_polled"] == 1
    assert [e["scope"] for e in w.events("poll.scope_degraded")] == ["octo/gone"]
    assert w.heartbeat()["lastCycle"]["scopesSkipped"] == ["octo/gone"]
    assert not w.fake.calls("GET", r"/repos/octo/gone/issues/\d+")  # a degraded scope is never reconciled


def test_issue_93_368_a_linked_pull_request_feeds_the_issue_session_and_its_record(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    w.fake.add_issue(REPO, 5, labels=[AUTO], author="alice", pull_request=True, body="Fixes #1")
    w.cycle(1)
    w.fake.add_comment(REPO, 5, "review the pull request please", login="alice")
    w.cycle(2)
    wait_for(lambda: body_count(w, 1, "review the pull request please") == 1, timeout=20)
    assert w.session(5) is None and not (w.env.root / "local" / "github-octo-repo-5.json").exists()
    assert not (w.env.root / "portable" / "github-octo-repo-5.json").exists()  # one record per work item
    pulls = w.portable(1)["pullRequests"]["github:octo/repo#5"]
    assert pulls["commentAttempts"] == {} and len(pulls["seenComments"]) >= 1
    assert "spawn" not in pulls and "title" not in pulls


# ------------------------------------------------------------------------------------------- audit (round 2)


def reactions_of(comment_id: int) -> str:
    """The path a dispatch's "started" reaction on a comment is posted to: the seam that holds a dispatch open."""
    return rf"/repos/octo/repo/issues/comments/{comment_id}/reactions"


def test_b9_a_dispatch_held_open_spends_no_attempt_and_delivers_once(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    cid = w.fake.add_comment(REPO, 1, "slow to deliver", login="alice")
    w.fake.fault("POST", reactions_of(cid), delay=4.0, times=1)  # the router holds this dispatch for 4 s
    process = w.start_poller()
    wait_for(lambda: w.fake.calls("POST", reactions_of(cid)), timeout=30)
    held_from = len(w.events("poll.cycle"))
    wait_for(lambda: body_count(w, 1, "slow to deliver") == 1, timeout=30)
    assert len(w.events("poll.cycle")) - held_from >= 2  # cycles ran while it was in flight …
    assert w.ledger(1)["commentAttempts"].get(f"IC_fake{cid}", 1) == 1  # … and spent nothing
    wait_cycles(w, len(w.events("poll.cycle")) + 2)
    w.stop(process)
    assert [e["attempt"] for e in w.events("poll.comment_forwarded")] == [1]
    assert body_count(w, 1, "slow to deliver") == 1
    ledger = w.ledger(1)
    assert f"IC_fake{cid}" in ledger["seenComments"] and ledger["commentAttempts"] == {}


def test_b14_a_stop_gives_back_the_attempts_of_undelivered_comments(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    first = w.fake.add_comment(REPO, 1, "first of two", login="alice")
    second = w.fake.add_comment(REPO, 1, "second of two", login="alice")
    w.fake.fault("POST", reactions_of(first), delay=5.0, times=1)  # the second waits behind the first
    process = w.start_poller()
    wait_for(lambda: w.fake.calls("POST", reactions_of(first)), timeout=30)
    w.stop(process)  # SIGTERM: the dispatch in hand finishes, nothing else starts
    assert process.returncode == 0
    assert [e["released"] for e in w.events("poll.attempts_released")] == [1]
    assert f"IC_fake{second}" not in w.ledger(1)["commentAttempts"]
    assert body_count(w, 1, "first of two") == 1 and body_count(w, 1, "second of two") == 0
    w.cycle(2)  # restarted
    wait_for(lambda: body_count(w, 1, "second of two") == 1, timeout=20)
    forwarded = [e["attempt"] for e in w.events("poll.comment_forwarded") if e["comment_id"] == f"IC_fake{second}"]
    assert forwarded == [1, 1]  # the budget came back: after the restart it is attempt 1 again
    assert body_count(w, 1, "first of two") == 1 and body_count(w, 1, "second of two") == 1
    assert w.ledger(1)["commentAttempts"] == {}


def test_b25_a_rate_limit_holds_every_call_until_its_reset(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        start = time.time()
        now = [start]
        source.client.clock = lambda: now[0]  # the injected clock: two minutes pass at once
        fake.fault(
            "GET",
            "/repos/octo/repo/issues",
            status=403,
            times=1,
            headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(start) + 120)},
            message="API rate limit exceeded",
        )
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        for seconds in (0, 1, 60, 119):
            now[0] = start + seconds
            result = source.poll_once(context)
            assert len(fake.requests) == 1  # only the one that was told to wait
            failed = result["scopesFailed"]
            assert [(f["scope"], f["permanent"]) for f in failed] == [("octo/repo", False)]
            assert "rate-limited" in failed[0]["error"] and result["closures"] == 0
        now[0] = start + 121
        result = source.poll_once(context)
        assert result["scopesFailed"] == [] and result["itemsSeen"] == 1 and len(fake.requests) > 1


def test_r13_a_listed_item_missing_a_label_is_reported_once(gh_world: MakeWorld) -> None:
    w = gh_world("poller", repositories=["octo/b"], enabled=False)
    w.fake.add_issue("octo/b", 2, labels=[AUTO], author="alice", pull_request=True)
    w.fake.add_issue("octo/b", 3, labels=["bug"], author="alice", pull_request=True)
    w.fake.fault("GET", "/repos/octo/b/issues", status=410, message="Issues are disabled for this repo")
    process = w.start_poller()  # issues disabled: pull requests are listed unfiltered and judged here
    wait_cycles(w, 3)
    w.stop(process)
    filtered = w.events("poll.item_filtered")
    assert [(e["work_item"], e["missing_labels"], e["reason"]) for e in filtered] == [
        ("github:octo/b#3", [AUTO], "missing-required-labels")
    ]
    assert not (w.env.root / "portable" / "github-octo-b-3.json").exists()


def test_r34_issue_405_an_item_already_closing_is_not_asked(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        source.poll_once(context)
        source.store.update_section(REF1, "control", {"command": "start", "source": "cli", "actor": "alice"})
        fake.items[(REPO, 1)].labels = []  # unlisted, tracked: asked every cycle …
        source.inbox.put(f"github:close:{REF1}:closed", {"type": "inbound"})  # … unless its close is on its way
        source.poll_once(context)
        assert not fake.calls("GET", "/repos/octo/repo/issues/1")
        source.inbox.settle(*source.inbox.pending())
        source.poll_once(context)
        assert len(fake.calls("GET", "/repos/octo/repo/issues/1")) == 1


def test_seed004_a_closed_pull_request_leaves_its_owners_record(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 1)
    w.fake.add_issue(REPO, 5, labels=[AUTO], author="alice", pull_request=True, body="Fixes #1")
    w.cycle(1)
    w.fake.add_comment(REPO, 5, "look at the pull request", login="alice")
    w.cycle(2)
    wait_for(lambda: body_count(w, 1, "look at the pull request") == 1, timeout=20)
    assert "github:octo/repo#5" in w.portable(1)["pullRequests"]
    w.fake.items[(REPO, 5)].merged = True
    w.fake.close(REPO, 5, by="alice")
    w.cycle(1)
    detected = w.events("poll.closure_detected")
    assert [(e["work_item"], e["state"], e["kind"]) for e in detected] == [
        ("github:octo/repo#5", "merged", "pull-request")
    ]
    assert "pullRequests" not in w.portable(1) and "github:octo/repo#5" not in w.clocks()
    assert [e["closed_ref"] for e in w.events("session.kept_open")] == ["github:octo/repo#5"]
    assert w.session(1)["status"] == "active" and "ended" not in w.portable(1)  # the issue's session runs on
    asked = closure_questions(w, 5)
    w.cycle(1)
    assert closure_questions(w, 5) == asked  # never asked again


@pytest.fixture
def logged(gh_env: LoopEnv) -> Iterator[Callable[[str], list[dict[str, Any]]]]:
    """In-process sources' events, written to the environment's log (and read back by type)."""
    from the_loop import events

    events.configure(gh_env.root / "logs" / "events.jsonl", "poller")
    yield lambda name: [record for record in gh_env.events() if record["event"] == name]
    events.configure(None, "test")


def test_r14_r15_a_failed_surface_fails_the_item_and_never_closes_it(gh_world: MakeWorld) -> None:
    w = gh_world("poller")
    established(w, 2, pull=True)
    cid = w.fake.add_comment(REPO, 2, "said while reviews fail", login="alice")
    w.fake.fault("GET", "/repos/octo/repo/pulls/2/reviews", status=500)
    w.cycle(2)
    assert len(w.events("poll.item_error")) == 2 and not w.events("poll.comment_forwarded")
    assert f"IC_fake{cid}" not in w.ledger(2)["seenComments"]  # neither baselined nor pruned by a partial read
    assert closure_questions(w, 2) == 0 and w.session(2)["status"] == "active"  # listed, so open
    w.fake.clear_faults()
    w.cycle(1)
    wait_for(lambda: body_count(w, 2, "said while reviews fail") == 1, timeout=20)
    assert [e["attempt"] for e in w.events("poll.comment_forwarded")] == [1]


def test_r42_a_quarantined_issue_listing_is_probed_again_after_sixty_cycles(
    gh_env: LoopEnv, plugin_host: Any, logged: Callable[[str], list[dict[str, Any]]]
) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue("octo/b", 2, labels=[AUTO], author="alice", pull_request=True)
        fake.fault("GET", "/repos/octo/b/issues", status=410, times=2, message="Issues are disabled for this repo")
        source = in_process_source(gh_env, plugin_host, fake, ["octo/b"])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        results = [source.poll_once(context) for _ in range(121)]
        asked = fake.calls("GET", "/repos/octo/b/issues")
        assert len(asked) == 3  # cycle 1 (410), its re-probe at cycle 61 (410 again), and cycle 121 (answers)
        assert len(fake.calls("GET", "/repos/octo/b/pulls")) == 120  # pull requests listed all along, until then
    assert results[0]["scopesFailed"][0]["permanent"] is True and results[60]["scopesFailed"][0]["permanent"]
    assert all(r["scopesSkipped"] == ["octo/b"] for r in results[1:60] + results[61:120])
    assert results[120]["scopesSkipped"] == [] and results[120]["scopesFailed"] == []
    assert len(logged("poll.scope_degraded")) == 1  # the failed re-probe renewed the quarantine silently
    assert [e["scope"] for e in logged("poll.scope_recovered")] == ["octo/b"]


def test_r11_no_repositories_fails_the_source_and_reconciles_nothing(
    gh_env: LoopEnv, plugin_host: Any, logged: Callable[[str], list[dict[str, Any]]]
) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        source = in_process_source(gh_env, plugin_host, fake, [])
        assert any("repositories" in problem for problem in source.check_dependencies())
        result = source.poll_once(ServiceContext(config=source.config, should_stop=lambda: False))
        assert result["scopesPolled"] == 0 and result["scopesFailed"][0]["scope"] == "github"
        assert not fake.requests
    assert [e["error"] for e in logged("poll.provider_error")] == ["no repositories"]


def test_r20_r22_a_deleted_author_is_nobody_and_a_dormant_item_never_spawns(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        source.poll_once(context)  # first sight: baselined; awaiting a start command, so no presence
        assert not source.inbox.pending()
        ghost = fake.add_comment(REPO, 1, "the-loop start", login="alice")
        fake.comments[ghost]["user"] = None  # the account was deleted
        result = source.poll_once(context)
        assert result["commentsForwarded"] == 0 and result["spawns"] == 0
        assert f"IC_fake{ghost}" in source.store.read(REF1)["poll"]["seenComments"]
        for _ in range(3):  # known, nothing new: nothing is read, sent or spawned
            mark = len(fake.requests)
            result = source.poll_once(context)
            assert result["spawns"] == 0 and len(fake.requests) == mark + 1
        assert not source.inbox.pending()


def test_r46_status_says_when_no_repository_was_polled(gh_world: MakeWorld) -> None:
    w = gh_world("poller", enabled=False)
    w.fake.fault("GET", "/repos/octo/repo/issues", status=502)
    w.cycle(1)
    text = w.env.run("status").stdout
    assert "degraded:   no repository was polled" in text and "degraded:   octo/repo" in text
    (beat,) = w.events("poll.cycle")
    assert beat["scopes_degraded"] == ["octo/repo"] and beat["scopes_failed"] == 1
    assert "items_seen" not in beat and "interrupted" not in beat  # zero and empty fields are omitted


def test_r5_an_empty_allow_list_is_warned_about_at_start(gh_world: MakeWorld) -> None:
    w = gh_world("poller", authorizedUsers=[])
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    result = w.env.run("daemon", "run", "poller", "--once", timeout=60)
    assert result.returncode == 0 and "routing.authorizedUsers is empty" in result.stderr
    assert w.session(1) is None and not w.events("routing.routed")  # it runs, and acts on nothing


# ------------------------------------------- budgets spent by real failures (inbox retries on an injected clock)


def test_b7_real_spawn_failures_give_up_after_three_rounds_and_a_comment_rearms(
    gh_world: MakeWorld,
) -> None:
    w = gh_world("poller", in_process=True)
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    w.poll.refuse_new_sessions(True)  # tmux itself refuses: every spawn attempt fails for real
    for _ in range(5):
        w.poll.cycle()
        w.poll.route_round()
    presences = [e for e in w.events("dispatch.abandoned") if e["delivery_id"].startswith("poll-presence-")]
    assert len(presences) == 3 and len({e["delivery_id"] for e in presences}) == 3  # three rounds, fresh ids
    assert all(e["attempts"] == w.poll.worker.inbox.max_attempts for e in presences)
    assert [e["attempts"] for e in w.events("poll.spawn_failed")] == [3]
    assert w.ledger(1)["spawn"]["gaveUp"] is True and w.session(1) is None
    w.poll.refuse_new_sessions(False)
    w.fake.add_comment(REPO, 1, "try again please", login="alice")
    w.poll.cycle()
    w.poll.worker.run_once()
    session = w.session(1)
    assert session is not None and session["status"] == "active"  # the new comment re-armed it, and it spawned
    assert w.ledger(1)["spawn"] == {} and len(w.events("poll.spawn_failed")) == 1


def test_b8_real_delivery_failures_give_up_with_one_notice_that_never_quotes(
    gh_world: MakeWorld,
) -> None:
    from the_loop import __version__

    w = gh_world("poller", in_process=True)
    w.fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
    w.poll.cycle()
    w.poll.worker.run_once()
    session = w.session(1)
    assert session is not None
    assert w.tmux("kill-session", "-t", f"={session['tmuxTarget']}").returncode == 0
    w.poll.refuse_new_sessions(True)  # the session is gone and cannot be brought back
    cid = w.fake.add_comment(REPO, 1, "secret plan do not echo", login="alice")
    for _ in range(4):
        w.poll.cycle()
        w.poll.route_round()
    failed = w.events("poll.comment_failed")
    assert [(e["comment_id"], e["attempts"]) for e in failed] == [(f"IC_fake{cid}", 3)]
    assert [e["attempt"] for e in w.events("poll.comment_forwarded")] == [1, 2, 3]
    ledger = w.ledger(1)
    assert ledger["gaveUp"] == {"comments": [f"IC_fake{cid}"], "version": __version__}
    assert f"IC_fake{cid}" in ledger["seenComments"] and ledger["commentAttempts"] == {}
    posts = [r.body["body"] for r in w.fake.calls("POST", "/repos/octo/repo/issues/1/comments")]
    notices = [post for post in posts if f"IC_fake{cid}" in post]
    assert len(notices) == 1 and MARKER in notices[0]
    assert all("secret plan" not in post for post in posts)
    assert len(w.events("poll.giveup_reported")) == 1
    w.poll.cycle()
    assert len(w.events("poll.comment_failed")) == 1  # given up once, never again


def test_r30_issue_246_a_thread_longer_than_the_seen_cap_is_never_replayed(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext
    from the_loop_github.poll import GitHubPollSource

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        for n in range(2003):
            fake.add_comment(REPO, 1, f"remark {n}", login="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        assert source.poll_once(context)["errors"] == 0  # 21 pages of comments, followed by their Link
        seen = source.store.read(REF1)["poll"]["seenComments"]
        assert len(seen) == 2000 and seen[-1] == f"IC_fake{fake.comments_on(REPO, 1)[-1]['id']}"  # the newest kept
        restarted = GitHubPollSource(source.config)  # a new process: its first read of the thread is complete
        assert restarted.poll_once(context)["commentsForwarded"] == 0  # the three evicted ones are not "new"
        cid = fake.add_comment(REPO, 1, "really new", login="alice")
        result = GitHubPollSource(source.config).poll_once(context)
        assert result["commentsForwarded"] == 1
        assert list(source.store.read(REF1)["poll"]["commentAttempts"]) == [f"IC_fake{cid}"]


def test_r12_monitor_flags_choose_what_is_listed(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        fake.add_issue(REPO, 2, labels=[AUTO], author="alice", pull_request=True)
        issues_only = in_process_source(gh_env, plugin_host, fake, [REPO], monitor={"pullRequests": False})
        issues_only.poll_once(ServiceContext(config=issues_only.config, should_stop=lambda: False))
        assert issues_only.store.read(REF1) is not None and issues_only.store.read("github:octo/repo#2") is None
        mark = len(fake.requests)
        pulls_only = in_process_source(gh_env, plugin_host, fake, [REPO], monitor={"issues": False})
        result = pulls_only.poll_once(ServiceContext(config=pulls_only.config, should_stop=lambda: False))
        listings = [
            r.path for r in fake.requests[mark:] if r.path in ("/repos/octo/repo/issues", "/repos/octo/repo/pulls")
        ]
        assert listings == ["/repos/octo/repo/pulls"] and result["itemsSeen"] == 1
        assert pulls_only.store.read("github:octo/repo#2") is not None


def test_r41_unreadable_poll_clocks_read_as_empty_and_are_rewritten(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        path = gh_env.root / "local" / "poll-clocks.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{not json")
        assert source.clocks.read() == {}  # everything due: the safe reading
        result = source.poll_once(ServiceContext(config=source.config, should_stop=lambda: False))
        assert result["errors"] == 0 and result["scopesFailed"] == []
        assert list(json.loads(path.read_text())["clocks"]) == [REF1]  # dated again by this cycle


# ------------------------------------------------------------------------------------- fix round: one name per item


def test_decision6_a_repository_spelled_otherwise_in_config_and_by_github_is_one_work_item(
    gh_env: LoopEnv, plugin_host: Any
) -> None:
    """``repositories: [octo/repo]`` while GitHub says ``Octo/Repo``: the poller's refs, record and close key have
    the one spelling every ref has (lower-cased, issue 16), so the two ingresses never make two work items of one."""
    from the_loop.interfaces import ServiceContext
    from the_loop_github.normalize import close_key

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue("Octo/Repo", 1, labels=[AUTO], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        source.poll_once(context)
        ref = "github:octo/repo#1"
        assert (source.store.read("github:Octo/Repo#1") or {}).get("ref") == ref
        source.store.update_section(ref, "control", {"command": "start", "source": "cli", "actor": "alice"})
        fake.close("Octo/Repo", 1, by="bob")
        source.poll_once(context)
        assert source.inbox.delivery_status(close_key(ref, "closed")) == "inflight"


def test_decision6_the_pollers_close_and_a_late_webhook_close_are_one_delivery(
    gh_env: LoopEnv, plugin_host: Any
) -> None:
    from the_loop.interfaces import ServiceContext
    from the_loop_github.normalize import close_key

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        source.poll_once(context)
        source.store.update_section(REF1, "control", {"command": "start", "source": "cli", "actor": "alice"})
        fake.close(REPO, 1, by="bob")
        assert source.poll_once(context)["closures"] == 1
        key = close_key(REF1, "closed")
        entry = next(e for e in source.inbox.pending() if e.key == key)
        assert (entry.data["event"]["closed"], entry.data["event"]["transport"]) == ("issue-closed", "poll")
        assert not source.inbox.put(key, {"type": "inbound"})  # the webhook's close, arriving late: a duplicate
        source.inbox.settle(entry)
        assert not source.inbox.put(key, {"type": "inbound"})  # and after the router ran it, still


def test_b21_a_listing_taken_before_a_webhook_close_never_reopens_the_item(gh_env: LoopEnv, plugin_host: Any) -> None:
    """The listing says #1 is open; while #2 is being read, the webhook closes #1 and ends it. Only GitHub's answer
    now may reopen it, and that answer is "closed"."""
    import threading

    from the_loop.interfaces import ServiceContext
    from the_loop.sessions import closing

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        fake.add_issue(REPO, 2, labels=[AUTO], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        source.poll_once(context)
        fake.add_comment(REPO, 2, "news", login="alice")  # #2 moved: read (slowly) after the listing, before #1
        reads = len(fake.calls("GET", "/repos/octo/repo/issues/2/comments"))
        fake.fault("GET", "/repos/octo/repo/issues/2/comments", delay=1.5, times=1)

        def webhook_close() -> None:
            wait_for(lambda: len(fake.calls("GET", "/repos/octo/repo/issues/2/comments")) > reads)
            fake.close(REPO, 1, by="bob")
            closing.work_item_ended(
                source.config, REF1, reason="issue-closed", actor="bob", authorized=False, source="webhook"
            )

        closer = threading.Thread(target=webhook_close)
        closer.start()
        source.poll_once(context)
        closer.join(timeout=10)
        ended = (source.store.read(REF1) or {}).get("ended") or {}
        assert (ended.get("state"), ended.get("source")) == ("closed", "webhook")
        assert len(fake.calls("GET", "/repos/octo/repo/issues/1")) == 1  # asked once, before reopening anything


def test_s4_an_item_listed_again_forgets_an_earlier_404(gh_env: LoopEnv, plugin_host: Any) -> None:
    from the_loop.interfaces import ServiceContext

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice")
        source = in_process_source(gh_env, plugin_host, fake, [REPO])
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        source.poll_once(context)
        source.store.update_section(REF1, "control", {"command": "start", "source": "cli", "actor": "alice"})
        fake.items[(REPO, 1)].labels = []  # unlisted: asked, and a blip answers 404
        fake.fault("GET", "/repos/octo/repo/issues/1", status=404, times=1)
        source.poll_once(context)
        assert source.clocks.read()[REF1].get("missingAt")
        fake.items[(REPO, 1)].labels = [AUTO]  # listed again: it exists
        source.poll_once(context)
        assert not source.clocks.read()[REF1].get("missingAt")
        fake.items[(REPO, 1)].labels = []  # much later, one more blip
        fake.fault("GET", "/repos/octo/repo/issues/1", status=404, times=1)
        source.poll_once(context)
        assert "ended" not in (source.store.read(REF1) or {})  # one 404 is a blip, not a deletion


def test_r12_a_capped_pull_request_listing_warns_and_closes_nothing(
    gh_env: LoopEnv, plugin_host: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``/pulls`` cannot filter by label: past its cap the listing is partial, said so once, and never closes."""
    from the_loop.interfaces import ServiceContext
    from the_loop_github.listing import PULLS_LIMIT

    with FakeGitHub(tokens={TOKEN: BOT}) as fake:
        fake.add_issue(REPO, 1, labels=[AUTO], author="alice", pull_request=True)  # the oldest: past the cap
        for number in range(2, PULLS_LIMIT + 3):
            fake.add_issue(REPO, number, pull_request=True)
        source = in_process_source(gh_env, plugin_host, fake, [REPO], monitor={"issues": False})
        source.store.update_section(REF1, "control", {"command": "start", "source": "cli", "actor": "alice"})
        context = ServiceContext(config=source.config, should_stop=lambda: False)
        source.poll_once(context)
        source.poll_once(context)
        assert not fake.calls("GET", "/repos/octo/repo/issues/1")  # not listed, but the listing was not whole
        warnings = [line for line in capsys.readouterr().err.splitlines() if f"at least {PULLS_LIMIT}" in line]
        assert len(warnings) == 1 and "open pull requests" in warnings[0]


def test_issue_222_a_running_poller_reads_a_repository_added_to_the_config(
    gh_world: MakeWorld,
) -> None:
    w = gh_world("poller")
    w.fake.add_issue(REPO, 1, labels=["the-loop: auto-execute"], author="alice")
    w.fake.add_issue("octo/other", 2, labels=["the-loop: auto-execute"], author="alice")
    process = w.start_poller()
    wait_for(lambda: any(call.path.startswith("/repos/octo/repo/issues") for call in w.fake.calls("GET")), timeout=30)
    time.sleep(1.5)  # a cycle or two more, all under the old config
    assert not [call for call in w.fake.calls("GET") if call.path.startswith("/repos/octo/other")]

    w.env.edit_config(lambda c: c.update(repositories=[REPO, "octo/other"]))
    wait_for(lambda: any(c.path.startswith("/repos/octo/other/issues") for c in w.fake.calls("GET")), timeout=30)
    wait_for(lambda: w.session(1) is not None, timeout=30)
    assert process.poll() is None and len(w.events("poller.started")) == 1
    assert [e["changed"] for e in w.events("config.reloaded")] == [["repositories"]]
