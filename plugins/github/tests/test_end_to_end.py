"""End to end: a signed GitHub delivery → the receiver's inbox → the router → a live tmux session running the fake
harness, with the real PyGithub client against the fake GitHub API (ingress-routing.md §6, A…).

The receiver is the real daemon (``the-loop daemon run gh-webhook``) with ``routing.enabled``; the harness is the
fake one (``the_loop.testing.fake_plugin`` through ``THE_LOOP_EXTRA_PLUGINS``), on a private tmux server.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gh_payloads
import pytest
import yaml
from fake_github import FakeGitHub
from gh_receiver import AUTO_LABEL, Receiver

from the_loop.plugins import get_host
from the_loop.state import StateLayout
from the_loop.state.slugs import slug_of
from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for
from the_loop.testing.harness import FakeHarness

HERE = Path(__file__).parent
REF = "github:octo/repo#15"
TARGET = "loop-github-octo-repo-15"


class Loop:
    """The operator's machine with the receiver running."""

    def __init__(self, env: LoopEnv, fake: FakeGitHub, receiver: Receiver, socket: str, logs: Path) -> None:
        self.env, self.fake, self.receiver, self.socket, self.logs = env, fake, receiver, socket, logs
        self._comment_id = 9000

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

    def reactions(self, payload: dict[str, Any], repo: str = "octo/repo") -> list[str]:
        """The reactions the-loop put on the comment of ``payload`` (R1), in order."""
        path = rf"/repos/{repo}/issues/comments/{payload['comment']['id']}/reactions"
        return [call.body["content"] for call in self.fake.calls("POST", path)]

    def portable(self, slug: str = "github-octo-repo-15") -> dict[str, Any]:
        path = self.env.root / "portable" / f"{slug}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def add_sections(self, slug: str = "github-octo-repo-15", **sections: Any) -> None:
        """Write portable sections by hand (what the poller or a grant would have written); the daemon reads them."""
        path = self.env.root / "portable" / f"{slug}.json"
        path.write_text(json.dumps({**self.portable(slug), **sections}))

    def repost(self, payload: dict[str, Any]) -> None:
        assert self.receiver.post("issue_comment", payload).status_code == 202

    def record(self, slug: str = "github-octo-repo-15") -> dict[str, Any] | None:
        path = self.env.root / "local" / f"{slug}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def own(self, ref: str = REF) -> dict[str, Any]:
        record = self.record(slug_of(StateLayout(self.env.root), ref))
        assert record is not None, f"no session record for {ref}"
        return record["sessions"][ref]

    def harness(self, ref: str = REF) -> FakeHarness:
        return FakeHarness(self.logs / f"{self.own(ref)['harnessSessionId']}.jsonl")

    def settled(self) -> None:
        """Wait until the router has worked through everything the receiver accepted."""
        wait_for(lambda: not self.receiver.inbox(), timeout=20)

    def events(self, name: str) -> list[dict[str, Any]]:
        return self.receiver.events(name)

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10)


@pytest.fixture
def loop(gh_env: LoopEnv, fake_github: FakeGitHub) -> Iterator[Callable[..., Loop]]:
    started: list[tuple[Receiver, str]] = []

    def start(
        *,
        plugins: tuple[str, ...] = (),
        repositories: tuple[str, ...] = ("octo/repo",),
        extra: dict[str, Any] | None = None,
        **routing: Any,
    ) -> Loop:
        """``plugins``: more test plugin modules (from this folder) for the daemon, after the fake harness;
        ``repositories``: the repository bound; ``extra``: more top-level config keys."""
        socket = f"the-loop-test-{secrets.token_hex(6)}"
        logs = gh_env.tmp / "harness-logs"
        logs.mkdir(exist_ok=True)
        (gh_env.tmp / "work").mkdir(exist_ok=True)
        gh_env.env.update(
            THE_LOOP_EXTRA_PLUGINS=",".join(["the_loop.testing.fake_plugin", *plugins]),
            FAKE_HARNESS_LOG=str(logs / "{session}.jsonl"),
        )
        if plugins:
            gh_env.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
        port = free_port()
        settings = {
            "enabled": True,
            "defaultHarness": "fake",
            "spawnOnUnmatched": "labeled",
            "authorizedUsers": ["octocat"],
            "spawnWorkdir": str(gh_env.tmp / "work"),
            "tmux": {"socketName": socket, "resumeProbeSeconds": 0.3},
            **routing,
        }
        gh_env.write_config(
            {
                "version": "0.12.0",
                "repositories": list(repositories),
                "webhooks": {"ghWebhook": {"enabled": True, "port": port}},
                "routing": settings,
                **fake_github.config(),
                **(extra or {}),
            }
        )
        argv = [sys.executable, "-m", "the_loop", "-c", str(gh_env.config_path), "daemon", "run", "gh-webhook"]
        process = subprocess.Popen(argv, cwd=gh_env.cwd, env=gh_env.env, stderr=subprocess.PIPE, text=True)
        receiver = Receiver(gh_env, port, process)
        started.append((receiver, socket))
        wait_for(lambda: receiver.healthy() or process.poll() is not None, timeout=20)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        return Loop(gh_env, fake_github, receiver, socket, logs)

    yield start
    for receiver, socket in started:
        if receiver.process.poll() is None:
            receiver.process.send_signal(signal.SIGTERM)
        receiver.process.wait(timeout=30)
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)
    kill_lock_holders(gh_env.root)


def restart(loop: Loop) -> Loop:
    loop.receiver.process.send_signal(signal.SIGTERM)
    loop.receiver.process.wait(timeout=30)
    port = loop.receiver.port
    argv = [sys.executable, "-m", "the_loop", "-c", str(loop.env.config_path), "daemon", "run", "gh-webhook"]
    process = subprocess.Popen(argv, cwd=loop.env.cwd, env=loop.env.env, stderr=subprocess.PIPE, text=True)
    loop.receiver = Receiver(loop.env, port, process)
    wait_for(lambda: loop.receiver.healthy() or process.poll() is not None, timeout=20)
    return loop


def start_work(loop: Loop) -> FakeHarness:
    loop.comment("the-loop start")
    wait_for(lambda: loop.record() is not None, timeout=20)
    harness = loop.harness()
    harness.wait_ready(timeout=20)
    loop.settled()
    return harness


def test_a4_a_start_comment_spawns_the_session_announces_and_reacts(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    assert machine.own()["tmuxTarget"] == TARGET and machine.tmux("has-session", "-t", f"={TARGET}").returncode == 0
    boot = harness.submitted()[0]
    assert REF in boot and '"body": "the-loop start"' in boot and '"author": "octocat"' in boot
    # the boot prompt is the positional argument of `--session-id <the recorded uuid> … -- <prompt>`, never pasted
    [start] = harness.records("start")
    assert start["mode"] == "fresh" and start["session_id"] == machine.own()["harnessSessionId"]
    assert uuid.UUID(start["session_id"]) and start["argv"][-1] == boot
    assert "the-loop comment --work-item github:octo/repo#15" in boot and "untrusted" in boot  # decision 15
    portable = json.loads((machine.env.root / "portable" / "github-octo-repo-15.json").read_text())
    assert portable["control"]["command"] == "start" and portable["control"]["source"] == "comment"
    assert portable["url"] == "https://github.com/octo/repo/issues/15"
    announced = [c for c in machine.fake.comments_on("octo/repo", 15) if f"attach -t {TARGET}" in c["body"]]
    assert len(announced) == 1 and "<!-- the-loop:agent-comment -->" in announced[0]["body"]
    reactions = [call for call in machine.fake.calls("POST", r".*/reactions")]
    assert [call.body["content"] for call in reactions] == ["eyes", "hooray"]


def test_a5_a6_a_comment_arrives_once_as_json_even_when_redelivered_and_after_a_restart(
    loop: Callable[..., Loop],
) -> None:
    machine = loop()
    harness = start_work(machine)
    payload = machine.comment("please add tests")
    message = harness.wait_for_submitted(2, timeout=20)[-1]
    fenced = json.loads(message.split("```json\n", 1)[1].rsplit("\n```", 1)[0])
    assert fenced["comment"]["body"] == "please add tests" and fenced["comment"]["author"] == "octocat"
    assert "user" not in json.dumps(fenced) and "sender" not in json.dumps(fenced)
    machine.repost(payload)  # GitHub redelivers the same comment under a new delivery id
    restart(machine)
    machine.repost(payload)
    machine.settled()
    assert harness.submitted().count(message) == 1
    # decision 6: the comment's own key, kept by the inbox across the restart, makes both redeliveries duplicates
    duplicates = [e for e in machine.events("routing.dropped") if e["reason"] == "duplicate-delivery"]
    assert [e["dedupe_key"] for e in duplicates] == [f"github:comment:{payload['comment']['node_id']}"] * 2


@pytest.mark.parametrize("node_id", [None, "not a node id!"])
def test_issue_16_a_comment_replayed_without_its_node_id_is_pasted_once(
    loop: Callable[..., Loop], node_id: str | None
) -> None:
    """Issue 16 (6): a signed comment whose node id is missing or invalid, replayed under new delivery ids, is one
    comment: its numeric id is its key."""
    machine = loop()
    harness = start_work(machine)
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
        assert machine.receiver.post("issue_comment", payload).status_code == 202  # a new delivery id each time
    machine.settled()
    assert sum("only once, please" in text for text in harness.submitted()) == 1
    duplicates = [e for e in machine.events("routing.dropped") if e["reason"] == "duplicate-delivery"]
    assert [e["dedupe_key"] for e in duplicates] == ["github:comment:id:7777"] * 2


def test_a7_strangers_and_marked_comments_never_reach_the_session(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    stranger = machine.comment("rm -rf everything", login="mallory")
    marked = machine.comment("my own reply\n\n<!-- the-loop:agent-comment -->")
    machine.settled()
    reasons = [e["reason"] for e in machine.events("routing.dropped")]
    assert "unauthorized-actor" in reasons and "self-authored" in reasons
    assert len(harness.submitted()) == 1
    assert machine.reactions(stranger) == [] and machine.reactions(marked) == []  # no mark for what is not routed


def test_issue_64_104_what_the_loop_and_its_agent_post_never_comes_back_as_input(loop: Callable[..., Loop]) -> None:
    """The announce comment and a comment the agent posts with ``the-loop comment`` (in the session's environment)
    come back from GitHub as webhooks, posted by the-loop's own account: both are dropped as self-authored, never
    pasted, whoever GitHub says wrote them."""
    machine = loop()
    harness = start_work(machine)
    env = {"THE_LOOP_WORK_ITEM": REF, "THE_LOOP_CLI_CONFIG": str(machine.env.config_path)}
    reply = machine.env.run("comment", "--body", "Tests added.", config=False, **env)
    assert reply.returncode == 0, reply.stderr
    posted = machine.fake.comments_on("octo/repo", 15)
    assert len(posted) == 2 and all("<!-- the-loop:agent-comment -->" in c["body"] for c in posted)
    for number, comment in enumerate(posted):  # announce first, then the agent's reply
        for login in ("the-loop-bot", "octocat"):
            payload = gh_payloads.adapt(
                gh_payloads.load("issue_comment.created"), number=15, body=comment["body"], login=login
            )
            payload = gh_payloads.new_comment(payload, 8000 + 10 * number + len(login))
            payload["issue"].pop("pull_request", None)
            assert machine.receiver.post("issue_comment", payload).status_code == 202
    machine.settled()
    assert [e["reason"] for e in machine.events("routing.dropped")] == ["self-authored"] * 4
    assert len(harness.submitted()) == 1


def test_a8_a_comment_before_the_start_is_never_replayed(loop: Callable[..., Loop]) -> None:
    machine = loop()
    early = machine.comment("hello before the start")
    machine.settled()
    assert machine.record() is None
    assert [e["reason"] for e in machine.events("dispatch.dropped")] == ["awaiting-start"]
    assert machine.reactions(early) == ["eyes"]  # issue-371: a suppression keeps only its started mark
    harness = start_work(machine)
    assert all("hello before the start" not in text for text in harness.submitted())


def test_a9_an_unlabelled_start_is_refused(loop: Callable[..., Loop]) -> None:
    machine = loop()
    machine.fake.add_issue("octo/repo", 17, title="Unlabelled")
    machine.comment("the-loop start", number=17)
    machine.settled()
    assert machine.events("control.rejected")[0]["reason"] == "spawn-policy"
    assert not (machine.env.root / "portable" / "github-octo-repo-17.json").exists()
    # issue-106: the label alone never starts work, and the refused start left nothing for it to activate
    labeled = gh_payloads.adapt(
        gh_payloads.load("issues.labeled"), number=17, sender="octocat", labels=["bug", AUTO_LABEL]
    )
    labeled["label"]["name"] = AUTO_LABEL
    labeled["issue"].pop("pull_request", None)
    assert machine.receiver.post("issues", labeled).status_code == 202
    machine.settled()
    assert machine.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"
    assert machine.record("github-octo-repo-17") is None and not machine.events("session.spawned")
    assert machine.tmux("has-session", "-t", "=loop-github-octo-repo-17").returncode != 0


def test_a11_a12_pause_resume_and_stop(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    pause = machine.comment("the-loop pause")
    paused = machine.comment("while paused")
    machine.comment("the-loop resume")
    machine.comment("after resume")
    harness.wait_for_submitted(2, timeout=20)
    machine.settled()
    assert "after resume" in harness.submitted()[-1]
    assert all("while paused" not in text for text in harness.submitted())
    assert machine.reactions(pause) == ["eyes", "hooray"] and machine.reactions(paused) == ["eyes"]  # issue-371
    machine.comment("the-loop stop")
    machine.settled()
    assert machine.own()["status"] == "closed"
    wait_for(lambda: "dead" in machine.tmux("list-panes", "-t", f"={TARGET}", "-F", "#{?pane_dead,dead,live}").stdout)
    machine.comment("anyone there?")
    machine.settled()
    assert machine.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"


def test_a17_an_undeclared_repository_is_dropped_without_an_api_call(loop: Callable[..., Loop]) -> None:
    machine = loop()
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"), repo="octo/other", number=3, body="the-loop start", login="octocat"
    )
    before = len(machine.fake.calls())
    assert machine.receiver.post("issue_comment", payload).status_code == 202
    machine.settled()
    dropped = machine.events("routing.dropped")
    assert dropped[-1]["reason"] == "undeclared-repository"
    assert len(machine.fake.calls()) == before


def test_a20_a_killed_session_resumes_its_conversation_on_the_next_comment(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    session_id = machine.own()["harnessSessionId"]
    machine.tmux("kill-session", "-t", f"={TARGET}")
    machine.comment("still there?")
    starts = harness.wait_for("start", 2, timeout=20)
    assert starts[1]["mode"] == "resume" and starts[1]["session_id"] == session_id
    assert "still there?" in starts[1]["argv"][-1]  # the event prompt is the positional argument of the resume
    machine.settled()
    announced = [c for c in machine.fake.comments_on("octo/repo", 15) if f"attach -t {TARGET}" in c["body"]]
    assert len(announced) == 1


def test_a18_an_enterprise_host_gets_its_own_ref_and_tmux_name(loop: Callable[..., Loop]) -> None:
    machine = loop()
    machine.receiver.process.send_signal(signal.SIGTERM)
    machine.receiver.process.wait(timeout=30)
    config = yaml.safe_load(machine.env.config_path.read_text())
    config["repositories"] = ["ghe.example/octo/repo"]
    machine.env.write_config(config)
    restart(machine)
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"),
        host="ghe.example",
        number=15,
        body="the-loop start",
        login="octocat",
        labels=[AUTO_LABEL],
    )
    payload["issue"].pop("pull_request", None)
    assert machine.receiver.post("issue_comment", payload).status_code == 202
    ref = "github:ghe.example/octo/repo#15"
    wait_for(lambda: machine.record("github-ghe.example-octo-repo-15") is not None, timeout=20)
    machine.settled()
    assert machine.own(ref)["tmuxTarget"] == "loop-github-ghe_example-octo-repo-15"
    assert machine.tmux("has-session", "-t", "=loop-github-ghe_example-octo-repo-15").returncode == 0


def test_a19_a_hostile_comment_arrives_as_one_escaped_capped_message(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    machine.comment("\x1b[201~\rrm -rf /" + "x" * 10_000)
    message = harness.wait_for_submitted(2, timeout=20)[-1]
    machine.settled()
    assert len(harness.submitted()) == 2  # exactly one new message
    assert "\x1b" not in message and "\\u001b[201~\\rrm -rf /" in message
    body = json.loads(message.split("```json\n", 1)[1].rsplit("\n```", 1)[0])["comment"]["body"]
    assert body.endswith("… (truncated)")


def test_a21_a_missing_harness_binary_fails_the_spawn_and_keeps_the_delivery_for_a_retry(
    loop: Callable[..., Loop], gh_env: LoopEnv
) -> None:
    gh_env.env["FAKE_HARNESS_PYTHON"] = "/nonexistent/python"
    machine = loop()
    machine.comment("the-loop start")
    failed = wait_for(lambda: machine.events("session.spawn_failed"), timeout=20)
    assert failed[0]["will_retry"] is True and "not found on PATH" in failed[0]["error"]
    assert machine.tmux("list-sessions").returncode != 0  # no tmux session was created
    pending = wait_for(lambda: [e for e in machine.receiver.inbox() if e.get("attempts") == 1], timeout=20)
    assert pending and pending[0]["key"].startswith("github:comment:")  # released for a retry, not lost


def test_a10_prose_and_quotes_are_delivered_and_two_commands_execute_nothing(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    for body in ("I will say the-loop start later", "> the-loop stop", "the-loop start\nthe-loop stop"):
        machine.comment(body)
    harness.wait_for_submitted(4, timeout=20)
    machine.settled()
    assert machine.events("control.ambiguous")[0]["commands"] == ["start", "stop"]
    assert machine.own()["status"] == "active"


def test_a24_cleanup_releases_everything_and_later_comments_do_not_spawn(loop: Callable[..., Loop]) -> None:
    machine = loop()
    start_work(machine)
    machine.comment("the-loop cleanup")
    machine.settled()
    assert machine.events("control.command")[-1]["effect"] == "cleaned"
    assert machine.record() is None  # the local record is gone
    assert machine.tmux("has-session", "-t", f"={TARGET}").returncode != 0  # every tmux session killed
    portable = json.loads((machine.env.root / "portable" / "github-octo-repo-15.json").read_text())
    assert portable["control"]["command"] == "cleanup"  # kept, and disarming
    machine.comment("one more thing")
    machine.settled()
    assert machine.record() is None
    assert machine.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"


def test_a24_cleanup_without_a_session_removes_a_stale_checkout(loop: Callable[..., Loop], gh_env: LoopEnv) -> None:
    """A24 as written: a checkout left behind under ``routing.workspace.root`` (a real git worktree of a local bare
    repository), no session at all; ``the-loop cleanup`` removes it and disarms the item."""
    from the_loop.config import load_config
    from the_loop.refs import parse_ref
    from the_loop.sessions import workspace
    from the_loop.testing import bare_repository

    bare_repository(gh_env.tmp)
    machine = loop(workspace={"root": str(gh_env.tmp / "ws"), "cloneUrlBase": f"file://{gh_env.tmp / 'remote'}"})
    config = load_config(gh_env.config_path, get_host())
    ref = parse_ref(REF)
    stale = workspace.prepare(config, ref).path  # what a crashed earlier run left behind
    assert workspace.checkout_paths(config, ref) and machine.record() is None
    machine.comment("the-loop cleanup")
    machine.settled()
    command = machine.events("control.command")[-1]
    assert (command["command"], command["effect"], command["actor"]) == ("cleanup", "cleaned", "octocat")
    assert not stale.exists() and workspace.checkout_paths(config, ref) == []
    assert machine.portable()["control"]["command"] == "cleanup"
    machine.comment("and now?")
    machine.settled()
    assert machine.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"
    assert machine.record() is None and not machine.events("session.spawned")


def test_a26_a_comment_sent_just_before_a_stop_is_delivered_first(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    machine.comment("C1: last words")
    machine.comment("the-loop stop")
    machine.settled()
    assert "C1: last words" in harness.submitted()[-1]
    assert machine.own()["status"] == "closed"


def _close_issue(machine: Loop, sender: str, *, repo: str = "octo/repo", number: int = 15) -> None:
    payload = gh_payloads.adapt(
        gh_payloads.load("issues.reopened"), repo=repo, number=number, sender=sender, labels=[AUTO_LABEL]
    )
    payload["action"] = "closed"
    payload["issue"]["state"] = "closed"
    payload["issue"].pop("pull_request", None)
    assert machine.receiver.post("issues", payload).status_code == 202
    machine.settled()


def test_a16_closing_the_issue_by_an_authorized_user_kills_its_session_and_keeps_the_portable_record(
    loop: Callable[..., Loop],
) -> None:
    machine = loop()
    harness = start_work(machine)
    machine.add_sections(
        poll={"seenComments": ["1"], "commentAttempts": {}},
        collaborators={"users": [{"login": "dana", "addedBy": "octocat"}]},
        collaborationChannels={"channels": [{"ref": "slack@C0TMP375", "type": "slack", "target": "C0TMP375"}]},
    )
    _close_issue(machine, "octocat")
    assert machine.events("session.autoclosed")[0]["reason"] == "issue-closed"
    [cleaned] = machine.events("session.cleaned")
    assert (cleaned["work_item"], cleaned["actor"], cleaned["source"]) == (REF, "octocat", "webhook")
    assert machine.tmux("has-session", "-t", f"={TARGET}").returncode != 0
    assert machine.record() is None
    portable = machine.portable()
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
    assert len(harness.submitted()) == 1  # issue-94: the close was never pasted as a prompt


def test_a16_a_close_by_a_stranger_closes_the_session_but_defers_cleanup(loop: Callable[..., Loop]) -> None:
    machine = loop()
    start_work(machine)
    _close_issue(machine, "mallory")
    assert machine.events("cleanup.deferred")[0]["reason"] == "unauthorized-actor"
    assert machine.own()["status"] == "closed"
    assert machine.tmux("has-session", "-t", f"={TARGET}").returncode == 0  # kept readable


def _comment_on_pull_request(machine: Loop, body: str, pull_body: str, comment_id: int) -> None:
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"), number=20, body=body, login="octocat", pull_request=True
    )
    payload = gh_payloads.new_comment(payload, comment_id)
    payload["issue"]["body"] = pull_body
    assert machine.receiver.post("issue_comment", payload).status_code == 202
    machine.settled()


def test_a13_a14_a_pull_request_comment_reaches_the_issue_it_fixes_and_keeps_going_there(
    loop: Callable[..., Loop],
) -> None:
    machine = loop()
    harness = start_work(machine)
    _comment_on_pull_request(machine, "PR looks good, please rebase", "Fixes #15", 501)
    assert "PR looks good, please rebase" in harness.wait_for_submitted(2, timeout=20)[-1]
    assert machine.tmux("has-session", "-t", "=loop-github-octo-repo-20").returncode != 0  # no second session
    record = machine.record()
    assert record is not None and "github:octo/repo#20" in record["sessions"]
    assert machine.events("session.pr_linked")[0]["pull_request"] == "github:octo/repo#20"
    _comment_on_pull_request(machine, "one more review note", "", 502)  # the keyword is gone: the record routes
    assert "one more review note" in harness.wait_for_submitted(3, timeout=20)[-1]


def test_a16_merging_a_linked_pull_request_keeps_the_issue_session_open(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    _comment_on_pull_request(machine, "ready to merge", "Fixes #15", 601)
    ledger = {"seenComments": ["1"], "commentAttempts": {}}
    machine.add_sections(
        poll=ledger, pullRequests={"github:octo/repo#20": ledger, "github:octo/repo#21": ledger}
    )  # what the poller keeps for #15 and the two pull requests delivering it
    payload = gh_payloads.adapt(gh_payloads.load("pull_request.closed"), number=20, sender="octocat", merged=True)
    payload["pull_request"]["body"] = "Fixes #15"
    assert machine.receiver.post("pull_request", payload).status_code == 202
    machine.settled()
    kept = machine.events("session.kept_open")
    assert kept and kept[0]["closed_ref"] == "github:octo/repo#20" and kept[0]["reason"] == "pr-merged"
    assert machine.own()["status"] == "active"
    assert machine.record()["sessions"]["github:octo/repo#20"]["status"] == "closed"  # type: ignore[index]
    assert not machine.events("session.autoclosed")
    assert machine.tmux("has-session", "-t", f"={TARGET}").returncode == 0
    assert len(harness.records("exit")) == 0
    portable = machine.portable()  # seed 004: the merged pull request's ledger is dropped, the others stay
    assert portable["pullRequests"] == {"github:octo/repo#21": ledger} and portable["poll"] == ledger
    assert "ended" not in portable


def test_l4_a_reopened_item_loses_its_ended_stamp_and_an_authorized_start_spawns_it_again(
    loop: Callable[..., Loop],
) -> None:
    machine = loop()
    start_work(machine)
    _close_issue(machine, "mallory")  # closed, cleanup deferred: the session record stays (closed)
    assert machine.portable()["ended"]["reason"] == "issue-closed" and "control" not in machine.portable()
    payload = gh_payloads.adapt(gh_payloads.load("issues.reopened"), number=15, sender="octocat", labels=[AUTO_LABEL])
    payload["issue"].pop("pull_request", None)
    assert machine.receiver.post("issues", payload).status_code == 202
    machine.settled()
    assert "ended" not in machine.portable()
    assert machine.events("work_item.reopened")[0]["work_item"] == REF
    assert machine.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"  # the close disarmed it
    assert machine.own()["status"] == "closed"
    machine.comment("the-loop start")
    wait_for(lambda: machine.own()["status"] == "active", timeout=20)
    machine.settled()
    assert len(machine.events("session.spawned")) == 2
    assert machine.portable()["control"]["command"] == "start"

    # closed again: the same close key as the first close, forgotten at the reopen, so this close is acted on
    _close_issue(machine, "octocat")
    closes = machine.events("session.autoclosed")
    assert len(closes) == 2 and closes[-1]["reason"] == "issue-closed"
    assert machine.portable()["ended"]["actor"] == "octocat"
    assert machine.tmux("has-session", "-t", f"={TARGET}").returncode != 0  # octocat closed it: cleaned up


def test_issue_94_an_event_list_without_closes_is_warned_about_at_start(start_receiver: Callable[..., Any]) -> None:
    receiver = start_receiver(events=["issue_comment", "pull_request_review"])
    receiver.process.send_signal(signal.SIGTERM)
    receiver.process.wait(timeout=30)
    stderr = receiver.process.stderr.read() if receiver.process.stderr else ""
    assert "warning: webhooks.ghWebhook.events omits issues and pull_request" in stderr


def test_f4_g4_an_empty_repository_bound_or_allow_list_is_warned_about_at_start(loop: Callable[..., Loop]) -> None:
    def warnings(machine: Loop) -> list[str]:
        machine.receiver.process.send_signal(signal.SIGTERM)
        machine.receiver.process.wait(timeout=30)
        stderr = machine.receiver.process.stderr.read() if machine.receiver.process.stderr else ""
        return [line for line in stderr.splitlines() if line.startswith("warning:")]

    assert warnings(loop()) == []
    found = warnings(loop(repositories=(), authorizedUsers=[]))
    assert "warning: repositories is empty: events from every repository are routed" in found
    assert any(line.startswith("warning: routing.authorizedUsers is empty") for line in found)


def test_r2_an_announcement_github_answers_404_for_is_reported_and_the_session_kept(loop: Callable[..., Loop]) -> None:
    machine = loop()
    machine.comment("the-loop start", number=16)  # labelled in the payload; the fake API has no #16 (404)
    wait_for(lambda: machine.record("github-octo-repo-16") is not None, timeout=20)
    machine.settled()
    [missing] = wait_for(lambda: machine.events("session.work_item_missing"), timeout=20)
    assert (missing["work_item"], missing["level"]) == ("github:octo/repo#16", "error")
    assert machine.events("session.announce_failed") and not machine.events("session.announced")
    assert machine.own("github:octo/repo#16")["status"] == "active"
    assert machine.tmux("has-session", "-t", "=loop-github-octo-repo-16").returncode == 0


def test_d4_a_command_redelivered_after_the_inbox_forgot_it_never_runs_again(loop: Callable[..., Loop]) -> None:
    """The inbox remembers only the newest ``routing.dedupCacheSize`` keys; an executed command's comment is also
    claimed in ``local/control-deliveries.json``, so GitHub redelivering an old `the-loop stop` stops nothing."""
    machine = loop(dedupCacheSize=1)
    start_work(machine)
    stop = machine.comment("the-loop stop")
    machine.settled()
    assert machine.own()["status"] == "closed"
    machine.comment("the-loop start")
    wait_for(lambda: machine.own()["status"] == "active", timeout=20)
    machine.comment("filler")  # the stop's key is long gone from the inbox's memory
    machine.settled()
    machine.repost(stop)
    machine.settled()
    assert machine.events("dispatch.dropped")[-1]["reason"] == "already-processed"
    assert machine.own()["status"] == "active" and machine.portable()["control"]["command"] == "start"
    assert [e["command"] for e in machine.events("control.command")] == ["start", "stop", "start"]


def test_s2_an_armed_item_stays_armed_across_a_restart_and_a_stop_disarms_it_durably(loop: Callable[..., Loop]) -> None:
    machine = loop()
    machine.comment("the-loop start")
    wait_for(lambda: machine.record() is not None, timeout=20)
    machine.settled()
    machine.tmux("kill-server")  # the machine rebooted: no tmux, and the local record lost too
    (machine.env.root / "local" / "github-octo-repo-15.json").unlink()
    restart(machine)
    assert machine.portable()["control"]["command"] == "start"  # the portable record is what survives
    machine.comment("carry on")
    wait_for(lambda: machine.record() is not None, timeout=20)
    machine.settled()
    assert "carry on" in machine.harness().wait_for_submitted(1, timeout=20)[0]  # spawned, not awaiting-start
    machine.comment("the-loop stop")
    machine.settled()
    restart(machine)
    machine.comment("still there?")
    machine.settled()
    assert machine.events("dispatch.dropped")[-1]["reason"] == "awaiting-start"
    assert len(machine.events("session.spawned")) == 2


# ------------------------------------------------------------------ config edits while the daemon runs (A25)


def test_a25_dropping_a_user_from_the_config_applies_to_their_next_comment_without_a_restart(
    loop: Callable[..., Loop],
) -> None:
    machine = loop()
    harness = start_work(machine)
    pid = machine.receiver.process.pid

    machine.env.edit_config(lambda c: c["routing"].update(authorizedUsers=["hubot"]))
    machine.comment("please add tests")
    machine.settled()
    dropped = [e for e in machine.events("routing.dropped") if e["reason"] == "unauthorized-actor"]
    assert [e["actor"] for e in dropped] == ["octocat"]
    assert len(harness.submitted()) == 1  # only the boot prompt
    assert [e["changed"] for e in machine.events("config.reloaded")] == [["routing"]]

    # A broken edit is reported once and changes nothing: octocat stays dropped under the last good config.
    machine.env.config_path.write_text(machine.env.config_path.read_text() + "routing: [unclosed\n")
    machine.comment("still there?")
    machine.settled()
    failed = machine.events("config.reload-failed")
    assert len(failed) == 1 and str(machine.env.config_path) in failed[0]["error"]
    assert len([e for e in machine.events("routing.dropped") if e["reason"] == "unauthorized-actor"]) == 2

    # Putting octocat back lets the next comment through, into the same live session.
    edit_config_text = machine.env.config_path.read_text().replace("routing: [unclosed\n", "")
    machine.env.config_path.write_text(edit_config_text.replace("- hubot", "- octocat"))
    machine.comment("welcome back")
    assert "welcome back" in harness.wait_for_submitted(2, timeout=20)[-1]
    assert machine.receiver.process.pid == pid and machine.receiver.process.poll() is None
    assert len(machine.events("daemon.started")) == 1


# ------------------------------------------------------------------ issue 16: look-alike refs, one work item each


def _started(machine: Loop, ref: str, repo: str, number: int = 1) -> FakeHarness:
    machine.comment("the-loop start", repo=repo, number=number)
    layout = StateLayout(machine.env.root)
    wait_for(lambda: ref in ((machine.record(slug_of(layout, ref)) or {}).get("sessions") or {}), timeout=20)
    harness = machine.harness(ref)
    harness.wait_ready(timeout=20)
    machine.settled()
    return harness


def _pane(machine: Loop, target: str) -> str:
    return machine.tmux("list-panes", "-t", f"={target}", "-F", "#{?pane_dead,dead,live}").stdout.strip()


def test_issue_16_look_alike_repositories_are_two_work_items_that_never_act_on_each_other(
    loop: Callable[..., Loop],
) -> None:
    """``acme/web-app#1`` and ``acme-web/app#1`` share the plain slug: a pause, a comment and a stranger's close of
    the second never reach the first's session or record."""
    machine = loop(repositories=("acme/web-app", "acme-web/app"))
    web_app, acme_web = "github:acme/web-app#1", "github:acme-web/app#1"
    first = _started(machine, web_app, "acme/web-app")
    second = _started(machine, acme_web, "acme-web/app")
    target = machine.own(web_app)["tmuxTarget"]
    assert target == "loop-github-acme-web-app-1" and machine.own(acme_web)["tmuxTarget"] != target

    machine.comment("the-loop pause", repo="acme-web/app", number=1)
    machine.comment("only for web-app", repo="acme/web-app", number=1)
    machine.comment("only for app", repo="acme-web/app", number=1)  # paused: kept from its session
    first.wait_for_submitted(2, timeout=20)
    machine.settled()
    assert machine.own(web_app)["status"] == "active" and machine.own(acme_web)["status"] == "paused"
    assert "only for web-app" in first.submitted()[-1]
    assert not any("only for" in text for text in second.submitted())

    _close_issue(machine, "mallory", repo="acme-web/app", number=1)
    assert machine.own(acme_web)["status"] == "closed" and machine.own(web_app)["status"] == "active"
    assert _pane(machine, target) == "live"  # web-app's agent is still running
    record = machine.portable("github-acme-web-app-1")
    assert record["ref"] == web_app and record["control"]["command"] == "start"
    assert not machine.events("state.record_foreign")


def test_issue_16_names_tmux_spells_alike_get_two_sessions_and_a_retained_pane_is_never_taken(
    loop: Callable[..., Loop],
) -> None:
    machine = loop(repositories=("octo/a.b", "octo/a_b"))
    dotted, underscored = "github:octo/a.b#1", "github:octo/a_b#1"
    _started(machine, dotted, "octo/a.b")
    machine.comment("the-loop stop", repo="octo/a.b", number=1)
    machine.settled()
    target = machine.own(dotted)["tmuxTarget"]
    wait_for(lambda: _pane(machine, target) == "dead")  # retained, its harness ended

    harness = _started(machine, underscored, "octo/a_b")
    assert machine.own(underscored)["tmuxTarget"] != target and _pane(machine, target) == "dead"
    machine.comment("for a_b", repo="octo/a_b", number=1)
    assert "for a_b" in harness.wait_for_submitted(2, timeout=20)[-1]
    own = machine.own(underscored)["tmuxTarget"]
    _close_issue(machine, "octocat", repo="octo/a_b", number=1)  # authorized: cleaned up, its session killed
    wait_for(lambda: machine.tmux("has-session", "-t", f"={own}").returncode != 0)
    assert _pane(machine, target) == "dead" and machine.own(dotted)["tmuxTarget"] == target  # a.b's, untouched


def test_issue_16_a_signed_start_spelled_in_another_case_reaches_the_same_session(loop: Callable[..., Loop]) -> None:
    machine = loop()
    harness = start_work(machine)
    machine.comment("the-loop start", repo="OCTO/REPO")
    machine.comment("shouting", repo="Octo/Repo")
    assert "shouting" in harness.wait_for_submitted(2, timeout=20)[-1]
    machine.settled()
    assert machine.tmux("list-sessions", "-F", "#{session_name}").stdout.split() == [TARGET]
    assert [p.name for p in (machine.env.root / "local").glob("github-*.json")] == ["github-octo-repo-15.json"]
    assert [p.name for p in (machine.env.root / "portable").glob("github-*.json")] == ["github-octo-repo-15.json"]
    assert len(machine.events("session.spawned")) == 1


def test_the_real_claude_from_a_fresh_home_takes_a_signed_start_comments_a_crash_and_a_lost_transcript(
    loop: Callable[..., Loop], gh_env: LoopEnv, fake_github: FakeGitHub, claude_binary: Path
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
        integrations = {**fake_github.config()["integrations"], "claude": claude}
        machine = loop(
            defaultHarness="claude", harnessArgs={"claude": BYPASS_ARGS}, extra={"integrations": integrations}
        )

        machine.comment("the-loop start")
        boot = api.wait_for_turn(REF)
        assert len(boot) == 1 and '"body": "the-loop start"' in boot[0]  # the first prompt reached the model
        wait_for(machine.record, timeout=30)  # recorded once the session is ready for input
        machine.settled()
        own = machine.own()
        assert own["harness"] == "claude" and uuid.UUID(own["harnessSessionId"])

        machine.comment("please add a test for the widget")
        later = api.wait_for_turn("please add a test for the widget")
        assert len(later) == 2 and REF in later[0]  # its own turn, after the boot prompt

        machine.tmux("kill-server")
        machine.comment("what did I ask you before?")
        after_crash = api.wait_for_turn("what did I ask you before?")
        assert any("please add a test for the widget" in text for text in after_crash[:-1])  # history resumed
        machine.settled()
        assert machine.own()["harnessSessionId"] == own["harnessSessionId"]
        assert [e["resumed"] for e in machine.events("session.respawned")] == [True]

        machine.tmux("kill-server")
        wait_for(lambda: not process_running(own["harnessSessionId"]), timeout=20)  # its last writes are done
        path = transcript.find(own["harnessSessionId"], Path(own["cwd"]))
        assert path is not None
        path.unlink()
        machine.comment("a comment after the transcript was lost")
        fresh = api.wait_for_turn("a comment after the transcript was lost")
        machine.settled()
        assert not any("widget" in text for text in fresh)  # a fresh conversation, booted with the comment
        assert [e["resumed"] for e in machine.events("session.respawned")] == [True, False]
        assert machine.events("session.resume_failed")[-1]["harness_session_id"] == own["harnessSessionId"]

        for turn in api.turns():
            for text in turn:
                assert not [c for c in text if ord(c) < 0x20 and c not in "\n\t"], repr(text)
    finally:
        api.stop()
