"""End to end: a signed GitHub delivery → the receiver's inbox → the router → a live tmux session running the fake
harness, with the real PyGithub client against the fake GitHub API (ingress-routing.md §6, A…).

The world (``gh_world``, webhook ingress) runs the real receiver (``the-loop daemon run gh-webhook``) with
``routing.enabled``; the harness is the fake one (``the_loop.testing.fake_plugin`` through
``THE_LOOP_EXTRA_PLUGINS``), on a private tmux server.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gh_payloads
import pytest
import yaml
from gh_receiver import AUTO_LABEL
from gh_world import REF, TARGET, GitHubWorld, MakeWorld

from the_loop.plugins import get_host
from the_loop.state import StateLayout
from the_loop.state.slugs import slug_of
from the_loop.testing import LoopEnv, wait_for
from the_loop.testing.harness import FakeHarness


def test_a4_a_start_comment_spawns_the_session_announces_and_reacts(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    assert world.own()["tmuxTarget"] == TARGET and world.tmux("has-session", "-t", f"={TARGET}").returncode == 0
    boot = harness.submitted()[0]
    assert REF in boot and '"body": "the-loop start"' in boot and '"author": "octocat"' in boot
    # the boot prompt is the positional argument of `--session-id <the recorded uuid> … -- <prompt>`, never pasted
    [start] = harness.records("start")
    assert start["mode"] == "fresh" and start["session_id"] == world.own()["harnessSessionId"]
    assert uuid.UUID(start["session_id"]) and start["argv"][-1] == boot
    assert "the-loop comment --work-item github:octo/repo#15" in boot and "untrusted" in boot  # decision 15
    portable = json.loads((world.env.root / "portable" / "github-octo-repo-15.json").read_text())
    assert portable["control"]["command"] == "start" and portable["control"]["source"] == "comment"
    assert portable["url"] == "https://github.com/octo/repo/issues/15"
    announced = [c for c in world.fake.comments_on("octo/repo", 15) if f"attach -t {TARGET}" in c["body"]]
    assert len(announced) == 1 and "<!-- the-loop:agent-comment -->" in announced[0]["body"]
    reactions = [call for call in world.fake.calls("POST", r".*/reactions")]
    assert [call.body["content"] for call in reactions] == ["eyes", "hooray"]


def test_a5_a6_a_comment_arrives_once_as_json_even_when_redelivered_and_after_a_restart(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    harness = world.start_work()
    payload = world.comment("please add tests")
    message = harness.wait_for_submitted(2, timeout=20)[-1]
    fenced = json.loads(message.split("```json\n", 1)[1].rsplit("\n```", 1)[0])
    assert fenced["comment"]["body"] == "please add tests" and fenced["comment"]["author"] == "octocat"
    assert "user" not in json.dumps(fenced) and "sender" not in json.dumps(fenced)
    world.repost(payload)  # GitHub redelivers the same comment under a new delivery id
    world.restart()
    world.repost(payload)
    world.settled()
    assert harness.submitted().count(message) == 1
    # decision 6: the comment's own key, kept by the inbox across the restart, makes both redeliveries duplicates
    duplicates = [e for e in world.events("routing.dropped") if e["reason"] == "duplicate-delivery"]
    assert [e["dedupe_key"] for e in duplicates] == [f"github:comment:{payload['comment']['node_id']}"] * 2


@pytest.mark.parametrize("node_id", [None, "not a node id!"])
def test_issue_16_a_comment_replayed_without_its_node_id_is_pasted_once(
    gh_world: MakeWorld, node_id: str | None
) -> None:
    """Issue 16 (6): a signed comment whose node id is missing or invalid, replayed under new delivery ids, is one
    comment: its numeric id is its key."""
    world = gh_world()
    harness = world.start_work()
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"), number=15, body="only once, please", login="octocat"
    )
    payload = gh_payloads.new_comment(payload, 7777)
    payload["issue"].pop("pull_request", None)
    if node_id is None:
        payload["comment"].pop("node_id")
    else:
        payload["comment"]["node_id"] = node_id
    for _ in range(3):
        assert world.receiver.post("issue_comment", payload).status_code == 202  # a new delivery id each time
    world.settled()
    assert sum("only once, please" in text for text in harness.submitted()) == 1
    duplicates = [e for e in world.events("routing.dropped") if e["reason"] == "duplicate-delivery"]
    assert [e["dedupe_key"] for e in duplicates] == ["github:comment:id:7777"] * 2


def test_a7_strangers_and_marked_comments_never_reach_the_session(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    stranger = world.comment("rm -rf everything", login="mallory")
    marked = world.comment("my own reply\n\n<!-- the-loop:agent-comment -->")
    world.settled()
    reasons = [e["reason"] for e in world.events("routing.dropped")]
    assert "unauthorized-actor" in reasons and "self-authored" in reasons
    assert len(harness.submitted()) == 1
    assert world.reactions(stranger) == [] and world.reactions(marked) == []  # no mark for what is not routed


def test_issue_64_104_what_the_loop_and_its_agent_post_never_comes_back_as_input(gh_world: MakeWorld) -> None:
    """The announce comment and a comment the agent posts with ``the-loop comment`` (in the session's environment)
    come back from GitHub as webhooks, posted by the-loop's own account: both are dropped as self-authored, never
    pasted, whoever GitHub says wrote them."""
    world = gh_world()
    harness = world.start_work()
    env = {"THE_LOOP_WORK_ITEM": REF, "THE_LOOP_CLI_CONFIG": str(world.env.config_path)}
    reply = world.env.run("comment", "--body", "Tests added.", config=False, **env)
    assert reply.returncode == 0, reply.stderr
    posted = world.fake.comments_on("octo/repo", 15)
    assert len(posted) == 2 and all("<!-- the-loop:agent-comment -->" in c["body"] for c in posted)
    for number, comment in enumerate(posted):  # announce first, then the agent's reply
        for login in ("the-loop-bot", "octocat"):
            payload = gh_payloads.adapt(
                gh_payloads.load("issue_comment.created"), number=15, body=comment["body"], login=login
            )
            payload = gh_payloads.new_comment(payload, 8000 + 10 * number + len(login))
            payload["issue"].pop("pull_request", None)
            assert world.receiver.post("issue_comment", payload).status_code == 202
    world.settled()
    assert [e["reason"] for e in world.events("routing.dropped")] == ["self-authored"] * 4
    assert len(harness.submitted()) == 1


def test_a8_a_comment_before_the_start_is_never_replayed(gh_world: MakeWorld) -> None:
    world = gh_world()
    early = world.comment("hello before the start")
    world.settled()
    assert world.local() is None
    assert [e["reason"] for e in world.events("dispatch.dropped")] == ["awaiting-start"]
    assert world.reactions(early) == ["eyes"]  # issue-371: a suppression keeps only its started mark
    harness = world.start_work()
    assert all("hello before the start" not in text for text in harness.submitted())


def test_a9_an_unlabelled_start_is_refused(gh_world: MakeWorld) -> None:
    world = gh_world()
    world.fake.add_issue("octo/repo", 17, title="Unlabelled")
    world.comment("the-loop start", number=17)
    world.settled()
    assert world.events("control.rejected")[0]["reason"] == "spawn-policy"
    assert not (world.env.root / "portable" / "github-octo-repo-17.json").exists()
    # issue-106: the label alone never starts work, and the refused start left nothing for it to activate
    labeled = gh_payloads.adapt(
        gh_payloads.load("issues.labeled"), number=17, sender="octocat", labels=["bug", AUTO_LABEL]
    )
    labeled["label"]["name"] = AUTO_LABEL
    labeled["issue"].pop("pull_request", None)
    assert world.receiver.post("issues", labeled).status_code == 202
    world.settled()
    assert world.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"
    assert world.local("github-octo-repo-17") is None and not world.events("session.spawned")
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-17").returncode != 0


def test_a11_a12_pause_resume_and_stop(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    pause = world.comment("the-loop pause")
    paused = world.comment("while paused")
    world.comment("the-loop resume")
    world.comment("after resume")
    harness.wait_for_submitted(2, timeout=20)
    world.settled()
    assert "after resume" in harness.submitted()[-1]
    assert all("while paused" not in text for text in harness.submitted())
    assert world.reactions(pause) == ["eyes", "hooray"] and world.reactions(paused) == ["eyes"]  # issue-371
    world.comment("the-loop stop")
    world.settled()
    assert world.own()["status"] == "closed"
    wait_for(lambda: "dead" in world.tmux("list-panes", "-t", f"={TARGET}", "-F", "#{?pane_dead,dead,live}").stdout)
    world.comment("anyone there?")
    world.settled()
    assert world.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"


def test_a17_an_undeclared_repository_is_dropped_without_an_api_call(gh_world: MakeWorld) -> None:
    world = gh_world()
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"), repo="octo/other", number=3, body="the-loop start", login="octocat"
    )
    before = len(world.fake.calls())
    assert world.receiver.post("issue_comment", payload).status_code == 202
    world.settled()
    dropped = world.events("routing.dropped")
    assert dropped[-1]["reason"] == "undeclared-repository"
    assert len(world.fake.calls()) == before


def test_a20_a_killed_session_resumes_its_conversation_on_the_next_comment(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    session_id = world.own()["harnessSessionId"]
    world.tmux("kill-session", "-t", f"={TARGET}")
    world.comment("still there?")
    starts = harness.wait_for("start", 2, timeout=20)
    assert starts[1]["mode"] == "resume" and starts[1]["session_id"] == session_id
    assert "still there?" in starts[1]["argv"][-1]  # the event prompt is the positional argument of the resume
    world.settled()
    announced = [c for c in world.fake.comments_on("octo/repo", 15) if f"attach -t {TARGET}" in c["body"]]
    assert len(announced) == 1


def test_a18_an_enterprise_host_gets_its_own_ref_and_tmux_name(gh_world: MakeWorld) -> None:
    world = gh_world()
    world.receiver.stop()
    config = yaml.safe_load(world.env.config_path.read_text())
    config["repositories"] = ["ghe.example/octo/repo"]
    world.env.write_config(config)
    world.restart()
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"),
        host="ghe.example",
        number=15,
        body="the-loop start",
        login="octocat",
        labels=[AUTO_LABEL],
    )
    payload["issue"].pop("pull_request", None)
    assert world.receiver.post("issue_comment", payload).status_code == 202
    ref = "github:ghe.example/octo/repo#15"
    wait_for(lambda: world.local("github-ghe.example-octo-repo-15") is not None, timeout=20)
    world.settled()
    assert world.own(ref)["tmuxTarget"] == "loop-github-ghe_example-octo-repo-15"
    assert world.tmux("has-session", "-t", "=loop-github-ghe_example-octo-repo-15").returncode == 0


def test_a19_a_hostile_comment_arrives_as_one_escaped_capped_message(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    world.comment("\x1b[201~\rrm -rf /" + "x" * 10_000)
    message = harness.wait_for_submitted(2, timeout=20)[-1]
    world.settled()
    assert len(harness.submitted()) == 2  # exactly one new message
    assert "\x1b" not in message and "\\u001b[201~\\rrm -rf /" in message
    body = json.loads(message.split("```json\n", 1)[1].rsplit("\n```", 1)[0])["comment"]["body"]
    assert body.endswith("… (truncated)")


def test_a21_a_missing_harness_binary_fails_the_spawn_and_keeps_the_delivery_for_a_retry(
    gh_world: MakeWorld, gh_env: LoopEnv
) -> None:
    gh_env.env["FAKE_HARNESS_PYTHON"] = "/nonexistent/python"
    world = gh_world()
    world.comment("the-loop start")
    failed = wait_for(lambda: world.events("session.spawn_failed"), timeout=20)
    assert failed[0]["will_retry"] is True and "not found on PATH" in failed[0]["error"]
    assert world.tmux("list-sessions").returncode != 0  # no tmux session was created
    pending = wait_for(lambda: [e for e in world.receiver.inbox() if e.get("attempts") == 1], timeout=20)
    assert pending and pending[0]["key"].startswith("github:comment:")  # released for a retry, not lost


def test_a10_prose_and_quotes_are_delivered_and_two_commands_execute_nothing(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    for body in ("I will say the-loop start later", "> the-loop stop", "the-loop start\nthe-loop stop"):
        world.comment(body)
    harness.wait_for_submitted(4, timeout=20)
    world.settled()
    assert world.events("control.ambiguous")[0]["commands"] == ["start", "stop"]
    assert world.own()["status"] == "active"


def test_a24_cleanup_releases_everything_and_later_comments_do_not_spawn(gh_world: MakeWorld) -> None:
    world = gh_world()
    world.start_work()
    world.comment("the-loop cleanup")
    world.settled()
    assert world.events("control.command")[-1]["effect"] == "cleaned"
    assert world.local() is None  # the local record is gone
    assert world.tmux("has-session", "-t", f"={TARGET}").returncode != 0  # every tmux session killed
    portable = json.loads((world.env.root / "portable" / "github-octo-repo-15.json").read_text())
    assert portable["control"]["command"] == "cleanup"  # kept, and disarming
    world.comment("one more thing")
    world.settled()
    assert world.local() is None
    assert world.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"


def test_a24_cleanup_without_a_session_removes_a_stale_checkout(gh_world: MakeWorld, gh_env: LoopEnv) -> None:
    """A24 as written: a checkout left behind under ``routing.workspace.root`` (a real git worktree of a local bare
    repository), no session at all; ``the-loop cleanup`` removes it and disarms the item."""
    from the_loop.config import load_config
    from the_loop.refs import parse_ref
    from the_loop.sessions import workspace
    from the_loop.testing import bare_repository

    bare_repository(gh_env.tmp)
    world = gh_world(workspace={"root": str(gh_env.tmp / "ws"), "cloneUrlBase": f"file://{gh_env.tmp / 'remote'}"})
    config = load_config(gh_env.config_path, get_host())
    ref = parse_ref(REF)
    stale = workspace.prepare(config, ref).path  # what a crashed earlier run left behind
    assert workspace.checkout_paths(config, ref) and world.local() is None
    world.comment("the-loop cleanup")
    world.settled()
    command = world.events("control.command")[-1]
    assert (command["command"], command["effect"], command["actor"]) == ("cleanup", "cleaned", "octocat")
    assert not stale.exists() and workspace.checkout_paths(config, ref) == []
    assert world.portable()["control"]["command"] == "cleanup"
    world.comment("and now?")
    world.settled()
    assert world.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"
    assert world.local() is None and not world.events("session.spawned")


def test_a26_a_comment_sent_just_before_a_stop_is_delivered_first(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    world.comment("C1: last words")
    world.comment("the-loop stop")
    world.settled()
    assert "C1: last words" in harness.submitted()[-1]
    assert world.own()["status"] == "closed"


def test_a16_closing_the_issue_by_an_authorized_user_kills_its_session_and_keeps_the_portable_record(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    harness = world.start_work()
    world.add_sections(
        poll={"seenComments": ["1"], "commentAttempts": {}},
        collaborators={"users": [{"login": "dana", "addedBy": "octocat"}]},
        collaborationChannels={"channels": [{"ref": "slack@C0TMP375", "type": "slack", "target": "C0TMP375"}]},
    )
    world.close_issue("octocat")
    assert world.events("session.autoclosed")[0]["reason"] == "issue-closed"
    [cleaned] = world.events("session.cleaned")
    assert (cleaned["work_item"], cleaned["actor"], cleaned["source"]) == (REF, "octocat", "webhook")
    assert world.tmux("has-session", "-t", f"={TARGET}").returncode != 0
    assert world.local() is None
    portable = world.portable()
    ended = portable["ended"]
    assert (ended["state"], ended["kind"], ended["reason"], ended["source"], ended["actor"]) == (
        "closed",
        "issue",
        "issue-closed",
        "webhook",
        "octocat",
    )
    # seed 004: a close clears what was asked, seen and granted; cleanup then records itself as the last command
    assert not {"poll", "collaborators", "collaborationChannels", "lifecycle"} & set(portable)
    assert portable["control"]["command"] == "cleanup"
    # closed by hand with nothing merged on record; the terminal was read from the checkout before it went
    assert ended["outcome"] == "closed-externally" and ended["terminal"]["workItem"] == REF
    assert len(harness.submitted()) == 1  # issue-94: the close was never pasted as a prompt


def test_a16_a_close_by_a_stranger_closes_the_session_but_defers_cleanup(gh_world: MakeWorld) -> None:
    world = gh_world()
    world.start_work()
    world.close_issue("mallory")
    assert world.events("cleanup.deferred")[0]["reason"] == "unauthorized-actor"
    assert world.own()["status"] == "closed"
    assert world.tmux("has-session", "-t", f"={TARGET}").returncode == 0  # kept readable


def _comment_on_pull_request(world: GitHubWorld, body: str, pull_body: str, comment_id: int) -> None:
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"), number=20, body=body, login="octocat", pull_request=True
    )
    payload = gh_payloads.new_comment(payload, comment_id)
    payload["issue"]["body"] = pull_body
    assert world.receiver.post("issue_comment", payload).status_code == 202
    world.settled()


def test_a13_a14_a_pull_request_comment_reaches_the_issue_it_fixes_and_keeps_going_there(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    harness = world.start_work()
    _comment_on_pull_request(world, "PR looks good, please rebase", "Fixes #15", 501)
    assert "PR looks good, please rebase" in harness.wait_for_submitted(2, timeout=20)[-1]
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-20").returncode != 0  # no second session
    record = world.local()
    assert record is not None and "github:octo/repo#20" in record["sessions"]
    assert world.events("session.pr_linked")[0]["pull_request"] == "github:octo/repo#20"
    _comment_on_pull_request(world, "one more review note", "", 502)  # the keyword is gone: the record routes
    assert "one more review note" in harness.wait_for_submitted(3, timeout=20)[-1]


def test_a16_merging_a_linked_pull_request_keeps_the_issue_session_open(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    _comment_on_pull_request(world, "ready to merge", "Fixes #15", 601)
    ledger = {"seenComments": ["1"], "commentAttempts": {}}
    world.add_sections(
        poll=ledger, pullRequests={"github:octo/repo#20": ledger, "github:octo/repo#21": ledger}
    )  # what the poller keeps for #15 and the two pull requests delivering it
    payload = gh_payloads.adapt(gh_payloads.load("pull_request.closed"), number=20, sender="octocat", merged=True)
    payload["pull_request"]["body"] = "Fixes #15"
    assert world.receiver.post("pull_request", payload).status_code == 202
    world.settled()
    kept = world.events("session.kept_open")
    assert kept and kept[0]["closed_ref"] == "github:octo/repo#20" and kept[0]["reason"] == "pr-merged"
    assert world.own()["status"] == "active"
    assert world.local()["sessions"]["github:octo/repo#20"]["status"] == "closed"  # type: ignore[index]
    assert not world.events("session.autoclosed")
    assert world.tmux("has-session", "-t", f"={TARGET}").returncode == 0
    assert len(harness.records("exit")) == 0
    portable = world.portable()  # seed 004: the merged pull request's ledger is dropped, the others stay
    assert portable["pullRequests"] == {"github:octo/repo#21": ledger} and portable["poll"] == ledger
    assert "ended" not in portable


@pytest.mark.parametrize(
    ("state_reason", "outcome"),
    [("not_planned", "cancelled"), ("duplicate", "cancelled"), ("completed", "closed-externally")],
)
def test_an_issue_closed_as_not_planned_ends_cancelled(gh_world: MakeWorld, state_reason: str, outcome: str) -> None:
    """GitHub's ``state_reason`` travels in the close's excerpt and decides ``ended.outcome`` (issue-452)."""
    world = gh_world()
    world.start_work()
    world.close_issue("octocat", state_reason=state_reason)
    assert world.portable()["ended"]["outcome"] == outcome
    assert world.events("work_item.ended")[-1]["outcome"] == outcome


def test_l4_a_reopened_item_loses_its_ended_stamp_and_an_authorized_start_spawns_it_again(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    world.start_work()
    world.close_issue("mallory")  # closed, cleanup deferred: the session record stays (closed)
    assert world.portable()["ended"]["reason"] == "issue-closed" and "control" not in world.portable()
    payload = gh_payloads.adapt(gh_payloads.load("issues.reopened"), number=15, sender="octocat", labels=[AUTO_LABEL])
    payload["issue"].pop("pull_request", None)
    assert world.receiver.post("issues", payload).status_code == 202
    world.settled()
    assert "ended" not in world.portable()
    assert world.events("work_item.reopened")[0]["work_item"] == REF
    assert world.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"  # the close disarmed it
    assert world.own()["status"] == "closed"
    world.comment("the-loop start")
    wait_for(lambda: world.own()["status"] == "active", timeout=20)
    world.settled()
    assert len(world.events("session.spawned")) == 2
    assert world.portable()["control"]["command"] == "start"

    # closed again: the same close key as the first close, forgotten at the reopen, so this close is acted on
    world.close_issue("octocat")
    closes = world.events("session.autoclosed")
    assert len(closes) == 2 and closes[-1]["reason"] == "issue-closed"
    assert world.portable()["ended"]["actor"] == "octocat"
    assert world.tmux("has-session", "-t", f"={TARGET}").returncode != 0  # octocat closed it: cleaned up


def test_issue_94_an_event_list_without_closes_is_warned_about_at_start(start_receiver: Callable[..., Any]) -> None:
    receiver = start_receiver(events=["issue_comment", "pull_request_review"])
    receiver.stop()
    stderr = receiver.process.stderr.read() if receiver.process.stderr else ""
    assert "warning: webhooks.ghWebhook.events omits issues and pull_request" in stderr


def test_f4_g4_an_empty_repository_bound_or_allow_list_is_warned_about_at_start(gh_world: MakeWorld) -> None:
    def warnings(world: GitHubWorld) -> list[str]:
        world.receiver.stop()
        stderr = world.receiver.process.stderr.read() if world.receiver.process.stderr else ""
        return [line for line in stderr.splitlines() if line.startswith("warning:")]

    assert warnings(gh_world()) == []
    found = warnings(gh_world(repositories=(), authorizedUsers=[]))
    assert "warning: repositories is empty: events from every repository are routed" in found
    assert any(line.startswith("warning: routing.authorizedUsers is empty") for line in found)


def test_r2_an_announcement_github_answers_404_for_is_reported_and_the_session_kept(gh_world: MakeWorld) -> None:
    world = gh_world()
    world.comment("the-loop start", number=16)  # labelled in the payload; the fake API has no #16 (404)
    wait_for(lambda: world.local("github-octo-repo-16") is not None, timeout=20)
    world.settled()
    [missing] = wait_for(lambda: world.events("session.work_item_missing"), timeout=20)
    assert (missing["work_item"], missing["level"]) == ("github:octo/repo#16", "error")
    assert world.events("session.announce_failed") and not world.events("session.announced")
    assert world.own("github:octo/repo#16")["status"] == "active"
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-16").returncode == 0


def test_d4_a_command_redelivered_after_the_inbox_forgot_it_never_runs_again(gh_world: MakeWorld) -> None:
    """The inbox remembers only the newest ``routing.dedupCacheSize`` keys; an executed command's comment is also
    claimed in ``local/control-deliveries.json``, so GitHub redelivering an old `the-loop stop` stops nothing."""
    world = gh_world(dedupCacheSize=1)
    world.start_work()
    stop = world.comment("the-loop stop")
    world.settled()
    assert world.own()["status"] == "closed"
    world.comment("the-loop start")
    wait_for(lambda: world.own()["status"] == "active", timeout=20)
    world.comment("filler")  # the stop's key is long gone from the inbox's memory
    world.settled()
    world.repost(stop)
    world.settled()
    assert world.events("dispatch.dropped")[-1]["reason"] == "already-processed"
    assert world.own()["status"] == "active" and world.portable()["control"]["command"] == "start"
    assert [e["command"] for e in world.events("control.command")] == ["start", "stop", "start"]


def test_s2_an_armed_item_stays_armed_across_a_restart_and_a_stop_disarms_it_durably(gh_world: MakeWorld) -> None:
    world = gh_world()
    world.comment("the-loop start")
    wait_for(lambda: world.local() is not None, timeout=20)
    world.settled()
    world.tmux("kill-server")  # the machine rebooted: no tmux, and the local record lost too
    (world.env.root / "local" / "github-octo-repo-15.json").unlink()
    world.restart()
    assert world.portable()["control"]["command"] == "start"  # the portable record is what survives
    world.comment("carry on")
    wait_for(lambda: world.local() is not None, timeout=20)
    world.settled()
    assert "carry on" in world.harness().wait_for_submitted(1, timeout=20)[0]  # spawned, not awaiting-start
    world.comment("the-loop stop")
    world.settled()
    world.restart()
    world.comment("still there?")
    world.settled()
    assert world.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"
    assert len(world.events("session.spawned")) == 2


# ------------------------------------------------------------------ config edits while the daemon runs (A25)


def test_a25_dropping_a_user_from_the_config_applies_to_their_next_comment_without_a_restart(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    harness = world.start_work()
    pid = world.receiver.process.pid

    world.env.edit_config(lambda c: c["routing"].update(authorizedUsers=["hubot"]))
    world.comment("please add tests")
    world.settled()
    dropped = [e for e in world.events("routing.dropped") if e["reason"] == "unauthorized-actor"]
    assert [e["actor"] for e in dropped] == ["octocat"]
    assert len(harness.submitted()) == 1  # only the boot prompt
    assert [e["changed"] for e in world.events("config.reloaded")] == [["routing"]]

    # A broken edit is reported once and changes nothing: octocat stays dropped under the last good config.
    world.env.config_path.write_text(world.env.config_path.read_text() + "routing: [unclosed\n")
    world.comment("still there?")
    world.settled()
    failed = world.events("config.reload-failed")
    assert len(failed) == 1 and str(world.env.config_path) in failed[0]["error"]
    assert len([e for e in world.events("routing.dropped") if e["reason"] == "unauthorized-actor"]) == 2

    # Putting octocat back lets the next comment through, into the same live session.
    edit_config_text = world.env.config_path.read_text().replace("routing: [unclosed\n", "")
    world.env.config_path.write_text(edit_config_text.replace("- hubot", "- octocat"))
    world.comment("welcome back")
    assert "welcome back" in harness.wait_for_submitted(2, timeout=20)[-1]
    assert world.receiver.process.pid == pid and world.receiver.process.poll() is None
    assert len(world.events("daemon.started")) == 1


# ------------------------------------------------------------------ issue 16: look-alike refs, one work item each


def _started(world: GitHubWorld, ref: str, repo: str, number: int = 1) -> FakeHarness:
    world.comment("the-loop start", repo=repo, number=number)
    layout = StateLayout(world.env.root)
    wait_for(lambda: ref in ((world.local(slug_of(layout, ref)) or {}).get("sessions") or {}), timeout=20)
    harness = world.harness(ref)
    harness.wait_ready(timeout=20)
    world.settled()
    return harness


def _pane(world: GitHubWorld, target: str) -> str:
    return world.tmux("list-panes", "-t", f"={target}", "-F", "#{?pane_dead,dead,live}").stdout.strip()


def test_issue_16_look_alike_repositories_are_two_work_items_that_never_act_on_each_other(
    gh_world: MakeWorld,
) -> None:
    """``acme/web-app#1`` and ``acme-web/app#1`` share the plain slug: a pause, a comment and a stranger's close of
    the second never reach the first's session or record."""
    world = gh_world(repositories=("acme/web-app", "acme-web/app"))
    web_app, acme_web = "github:acme/web-app#1", "github:acme-web/app#1"
    first = _started(world, web_app, "acme/web-app")
    second = _started(world, acme_web, "acme-web/app")
    target = world.own(web_app)["tmuxTarget"]
    assert target == "loop-github-acme-web-app-1" and world.own(acme_web)["tmuxTarget"] != target

    world.comment("the-loop pause", repo="acme-web/app", number=1)
    world.comment("only for web-app", repo="acme/web-app", number=1)
    world.comment("only for app", repo="acme-web/app", number=1)  # paused: kept from its session
    first.wait_for_submitted(2, timeout=20)
    world.settled()
    assert world.own(web_app)["status"] == "active" and world.own(acme_web)["status"] == "paused"
    assert "only for web-app" in first.submitted()[-1]
    assert not any("only for" in text for text in second.submitted())

    world.close_issue("mallory", repo="acme-web/app", number=1)
    assert world.own(acme_web)["status"] == "closed" and world.own(web_app)["status"] == "active"
    assert _pane(world, target) == "live"  # web-app's agent is still running
    record = world.portable("github-acme-web-app-1")
    assert record["ref"] == web_app and record["control"]["command"] == "start"
    assert not world.events("state.record_foreign")


def test_issue_16_names_tmux_spells_alike_get_two_sessions_and_a_retained_pane_is_never_taken(
    gh_world: MakeWorld,
) -> None:
    world = gh_world(repositories=("octo/a.b", "octo/a_b"))
    dotted, underscored = "github:octo/a.b#1", "github:octo/a_b#1"
    _started(world, dotted, "octo/a.b")
    world.comment("the-loop stop", repo="octo/a.b", number=1)
    world.settled()
    target = world.own(dotted)["tmuxTarget"]
    wait_for(lambda: _pane(world, target) == "dead")  # retained, its harness ended

    harness = _started(world, underscored, "octo/a_b")
    assert world.own(underscored)["tmuxTarget"] != target and _pane(world, target) == "dead"
    world.comment("for a_b", repo="octo/a_b", number=1)
    assert "for a_b" in harness.wait_for_submitted(2, timeout=20)[-1]
    own = world.own(underscored)["tmuxTarget"]
    world.close_issue("octocat", repo="octo/a_b", number=1)  # authorized: cleaned up, its session killed
    wait_for(lambda: world.tmux("has-session", "-t", f"={own}").returncode != 0)
    assert _pane(world, target) == "dead" and world.own(dotted)["tmuxTarget"] == target  # a.b's, untouched


def test_issue_16_a_signed_start_spelled_in_another_case_reaches_the_same_session(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    world.comment("the-loop start", repo="OCTO/REPO")
    world.comment("shouting", repo="Octo/Repo")
    assert "shouting" in harness.wait_for_submitted(2, timeout=20)[-1]
    world.settled()
    assert world.tmux("list-sessions", "-F", "#{session_name}").stdout.split() == [TARGET]
    assert [p.name for p in (world.env.root / "local").glob("github-*.json")] == ["github-octo-repo-15.json"]
    assert [p.name for p in (world.env.root / "portable").glob("github-*.json")] == ["github-octo-repo-15.json"]
    assert len(world.events("session.spawned")) == 1


def test_the_real_claude_from_a_fresh_home_takes_a_signed_start_comments_a_crash_and_a_lost_transcript(
    gh_world: MakeWorld, gh_env: LoopEnv, claude_binary: Path
) -> None:
    """Issue 15, "done when": the real Claude Code TUI behind the real receiver, offline against the fake Anthropic
    API, from a fresh HOME with ANTHROPIC_API_KEY exported. The oracle is what the model received."""
    from the_loop.testing.conformance import hermetic_path, process_running
    from the_loop.testing.fake_anthropic import FakeAnthropic
    from the_loop_claude import transcript
    from the_loop_claude.conformance import BYPASS_ARGS, TEST_API_KEY

    api = FakeAnthropic(gh_env.tmp / "anthropic-api.jsonl").start()
    try:
        gh_env.env.update(
            ANTHROPIC_BASE_URL=api.url,
            ANTHROPIC_API_KEY=TEST_API_KEY,
            PATH=hermetic_path(gh_env.tmp / "sysbin"),
        )
        claude = {"binary": str(claude_binary), "sandbox": os.geteuid() == 0}
        world = gh_world(
            defaultHarness="claude", harnessArgs={"claude": BYPASS_ARGS}, extra={"integrations": {"claude": claude}}
        )

        world.comment("the-loop start")
        boot = api.wait_for_turn(REF)
        assert len(boot) == 1 and '"body": "the-loop start"' in boot[0]  # the first prompt reached the model
        wait_for(world.local, timeout=30)  # recorded once the session is ready for input
        world.settled()
        own = world.own()
        assert own["harness"] == "claude" and uuid.UUID(own["harnessSessionId"])

        world.comment("please add a test for the widget")
        later = api.wait_for_turn("please add a test for the widget")
        assert len(later) == 2 and REF in later[0]  # its own turn, after the boot prompt

        world.tmux("kill-server")
        world.comment("what did I ask you before?")
        after_crash = api.wait_for_turn("what did I ask you before?")
        assert any("please add a test for the widget" in text for text in after_crash[:-1])  # history resumed
        world.settled()
        assert world.own()["harnessSessionId"] == own["harnessSessionId"]
        assert [e["resumed"] for e in world.events("session.respawned")] == [True]

        world.tmux("kill-server")
        wait_for(lambda: not process_running(own["harnessSessionId"]), timeout=20)  # its last writes are done
        path = transcript.find(own["harnessSessionId"], Path(own["cwd"]))
        assert path is not None
        path.unlink()
        world.comment("a comment after the transcript was lost")
        fresh = api.wait_for_turn("a comment after the transcript was lost")
        world.settled()
        assert not any("widget" in text for text in fresh)  # a fresh conversation, booted with the comment
        assert [e["resumed"] for e in world.events("session.respawned")] == [True, False]
        assert world.events("session.resume_failed")[-1]["harness_session_id"] == own["harnessSessionId"]

        for turn in api.turns():
            for text in turn:
                assert not [c for c in text if ord(c) < 0x20 and c not in "\n\t"], repr(text)
    finally:
        api.stop()
