"""Standing sessions (issue-277) as an operator runs them: real processes, real tmux (a private server per test),
the fake harness (``THE_LOOP_EXTRA_PLUGINS``)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop.testing import LoopEnv
from the_loop.testing.harness import FakeHarness


class Operator:
    """One machine: a config declaring standing sessions, a private tmux server, the fake harness's logs."""

    def __init__(self, env: LoopEnv) -> None:
        self.env = env
        self.socket = f"the-loop-test-{secrets.token_hex(6)}"
        self.work = env.tmp / "work"
        self.work.mkdir()
        self.logs = env.tmp / "harness-logs"
        self.logs.mkdir()
        self.env.env.update(
            THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin",
            FAKE_HARNESS_LOG=str(self.logs / "{session}.jsonl"),
        )
        self.configure([{"name": "watcher", "prompt": "watch the work in flight"}])

    def configure(self, sessions: Any, enabled: bool = True, **routing: Any) -> None:
        settings = {
            "defaultHarness": "fake",
            "spawnWorkdir": str(self.work),
            "tmux": {"socketName": self.socket, "harnessKillGraceSeconds": 2},
            **routing,
        }
        standing = {"enabled": enabled, "sessions": sessions}
        self.env.write_config(yaml.safe_dump({"routing": settings, "standingSessions": standing}))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.env.run(*args)

    def record(self, name: str = "watcher") -> dict[str, Any]:
        return json.loads((self.env.root / "local" / "standing" / f"{name}.json").read_text())

    def harness(self, session_id: str) -> FakeHarness:
        return FakeHarness(self.logs / f"{session_id}.jsonl")

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [event for event in self.env.events() if event["event"] == name]


@pytest.fixture
def operator(loop_env: LoopEnv) -> Iterator[Operator]:
    if shutil.which("tmux") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("tmux is not installed (CI=true: a missing tool fails the run)")
        pytest.skip("tmux is not installed")
    machine = Operator(loop_env)
    yield machine
    machine.tmux("kill-server")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
    ("sessions", "key"),
    [
        ([{"name": "-bad"}], "standingSessions.sessions[0].name"),
        ([{"name": "Upper"}], "standingSessions.sessions[0].name"),
        ([{"name": "a"}, {"name": "a"}], "standingSessions.sessions"),
        ([{"name": "a", "prompt": "x", "promptFile": "/p"}], "standingSessions.sessions[0].promptFile"),
        ([{"name": "a", "harnessArgs": "--x"}], "standingSessions.sessions[0].harnessArgs"),
        ([{"name": "a", "slack": "yes"}], "standingSessions.sessions[0].slack"),
        ("nope", "standingSessions.sessions"),
    ],
)
def test_e27_bad_standing_config_is_one_error_naming_the_key(operator: Operator, sessions: Any, key: str) -> None:
    operator.configure(sessions)
    result = operator.run("standing", "list")
    assert result.returncode == 2
    [line] = error_lines(result.stderr)
    assert f": {key}:" in line
    if sessions and isinstance(sessions, list) and len(sessions) == 2:
        assert "sessions[0]" in line and "sessions[1]" in line  # both indexes named


def test_e28_start_say_stop_and_start_again_resumes_the_same_conversation(operator: Operator) -> None:
    started = operator.run("standing", "start", "watcher")
    assert started.returncode == 0, started.stderr
    assert "watcher: started" in started.stdout
    record = operator.record()
    assert record["status"] == "running" and record["tmuxTarget"] == "loop-standing-watcher"
    conversation = record["harnessSessionId"]
    harness = operator.harness(conversation)
    harness.wait_for("start")
    start = harness.records("start")[0]
    prompt = start["argv"][-1]
    assert "standing session 'watcher'" in prompt and "own no ticket" in prompt
    assert prompt.endswith("watch the work in flight")  # the brief is appended, never substituted
    assert operator.events("standing.started")

    said = operator.run("standing", "say", "--text", "how is it going?", "--actor", "ana", "watcher")
    assert said.returncode == 0, said.stderr
    deadline = time.monotonic() + 10
    while not any("how is it going?" in text for text in harness.submitted()):
        assert time.monotonic() < deadline, harness.records()
        time.sleep(0.05)
    [text] = [text for text in harness.submitted() if "how is it going?" in text]
    assert "standing:watcher" in text and "ana" in text
    assert operator.record()["lastMessageAt"]
    assert operator.events("standing.said")[0]["actor"] == "ana"

    stopped = operator.run("standing", "stop", "watcher")
    assert stopped.returncode == 0, stopped.stderr
    assert operator.tmux("has-session", "-t", "=loop-standing-watcher").returncode != 0
    assert operator.record()["status"] == "stopped"
    assert operator.record()["harnessSessionId"] == conversation

    again = operator.run("standing", "start", "watcher")
    assert again.returncode == 0, again.stderr
    assert "watcher: resumed" in again.stdout
    assert operator.record()["harnessSessionId"] == conversation
    assert operator.events("standing.resumed")


def test_e29_say_to_a_stopped_session_is_refused_and_spawns_nothing(operator: Operator) -> None:
    result = operator.run("standing", "say", "--text", "hello", "watcher")
    assert result.returncode == 1
    assert "the-loop standing start watcher" in result.stderr
    assert operator.tmux("has-session", "-t", "=loop-standing-watcher").returncode != 0
    unknown = operator.run("standing", "say", "--text", "hello", "nobody")
    assert unknown.returncode == 1
    bad = operator.run("standing", "say", "--text", "hello", "-x")
    assert bad.returncode == 2


def test_e30_a_live_unrecorded_occupant_is_never_killed(operator: Operator) -> None:
    assert operator.tmux("new-session", "-d", "-s", "loop-standing-watcher", "sleep 60").returncode == 0
    result = operator.run("standing", "start", "watcher")
    assert result.returncode == 1
    assert "tmux kill-session -t loop-standing-watcher" in result.stderr
    assert operator.tmux("has-session", "-t", "=loop-standing-watcher").returncode == 0
    assert operator.events("standing.spawn_failed")
    assert not (operator.env.root / "local" / "standing" / "watcher.json").exists()


def test_e31_already_running_and_list_shows_tmux_answer(operator: Operator) -> None:
    assert operator.run("standing", "start").returncode == 0
    again = operator.run("standing", "start", "watcher")
    assert again.returncode == 0 and "already-running" in again.stdout
    [row] = json.loads(operator.run("standing", "list", "--format", "json").stdout)
    assert row["name"] == "watcher" and row["running"] is True and row["status"] == "running"
    assert row["ref"] == "standing:watcher" and row["declared"] is True
    operator.tmux("kill-server")
    [row] = json.loads(operator.run("standing", "list", "--format", "json").stdout)
    assert row["running"] is False and row["status"] == "running"  # the file says running; tmux says no


def test_e32_corrupt_record_is_moved_aside_not_overwritten(operator: Operator) -> None:
    directory = operator.env.root / "local" / "standing"
    directory.mkdir(parents=True)
    (directory / "watcher.json").write_text("{not json")
    result = operator.run("standing", "start", "watcher")
    assert result.returncode == 0, result.stderr
    assert [path.name for path in directory.glob("watcher.json.corrupt-*")]
    assert operator.record()["status"] == "running"


def test_e33_a_failed_resume_starts_fresh_with_a_new_conversation(operator: Operator) -> None:
    assert operator.run("standing", "start", "watcher").returncode == 0
    first = operator.record()["harnessSessionId"]
    assert operator.run("standing", "stop", "watcher").returncode == 0
    operator.env.env["FAKE_HARNESS_REFUSE_RESUME"] = "1"
    result = operator.run("standing", "start", "watcher")
    assert result.returncode == 0, result.stderr
    assert "watcher: started" in result.stdout
    assert operator.record()["harnessSessionId"] != first
    assert operator.events("standing.resume_failed")


def test_a_standing_session_survives_restart_with_the_same_conversation(operator: Operator) -> None:
    started = operator.run("start")
    assert "standing watcher: started" in started.stdout, started.stdout + started.stderr
    conversation = operator.record()["harnessSessionId"]
    restarted = operator.run("restart")
    assert "standing watcher: stopped" in restarted.stdout, restarted.stdout + restarted.stderr
    assert "standing watcher: resumed" in restarted.stdout
    assert operator.record()["harnessSessionId"] == conversation
    assert operator.record()["status"] == "running"
    status = operator.run("status")
    assert status.returncode == 0 and "standing    1 of 1 running" in status.stdout, status.stdout + status.stderr
    stopped = operator.run("stop")
    assert "standing watcher: stopped" in stopped.stdout
    assert operator.record()["status"] == "stopped"
    down = operator.run("status", "--format", "json")  # an auto-start standing session that is down: not ok
    assert down.returncode == 1
    assert json.loads(down.stdout)["standingSessions"] == {"declared": 1, "running": 0, "notRunning": ["watcher"]}


def test_no_ref_parser_accepts_a_standing_ref() -> None:
    from the_loop.standing import parse_ref

    assert parse_ref("standing:watcher") == "watcher"
    assert parse_ref("standing:-x") is None
    from the_loop.command import parse_work_item

    with pytest.raises(Exception):  # noqa: B017 - whatever the parser raises, it refuses
        parse_work_item(None, None, "standing:watcher")  # type: ignore[arg-type]


def test_routing_code_never_reads_the_standing_directory() -> None:
    import the_loop

    root = Path(the_loop.__file__).parent
    sources = [*(root / "routing").rglob("*.py"), *(root / "ingress").rglob("*.py"), root / "state" / "registry.py"]
    for source in sources:
        assert "standing" not in source.read_text(encoding="utf-8"), source


def test_e32_standing_stop_still_stops_recorded_sessions_with_a_malformed_config(operator: Operator) -> None:
    assert operator.run("standing", "start", "watcher").returncode == 0
    operator.configure([{"name": "Bad_Name"}])
    listed = operator.run("standing", "list")
    assert listed.returncode == 2 and "sessions[0]" in listed.stderr
    stopped = operator.run("standing", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "watcher: stopped" in stopped.stdout
    assert operator.tmux("has-session", "-t", "=loop-standing-watcher").returncode != 0
    assert operator.record()["status"] == "stopped"


def test_restart_name_stops_then_resumes_the_same_conversation(operator: Operator) -> None:
    assert operator.run("standing", "start", "watcher").returncode == 0
    conversation = operator.record()["harnessSessionId"]
    restarted = operator.run("standing", "restart", "watcher")
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.splitlines() == ["watcher: stopped", "watcher: resumed"]
    assert operator.record()["harnessSessionId"] == conversation and operator.record()["status"] == "running"
    assert operator.run("standing", "restart").returncode == 2  # the name is required
    assert operator.run("standing", "restart", "nobody").returncode == 1


def test_e31_create_start_list_and_delete_a_session_made_at_run_time(operator: Operator) -> None:
    made = operator.run("standing", "create", "ops", "--prompt", "keep the lights on", "--description", "on call")
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == ["ops: created", "ops: started"]
    record = operator.record("ops")
    assert (record["status"], record["prompt"], record["description"], record["autoStart"]) == (
        "running",
        "keep the lights on",
        "on call",
        True,
    )
    assert operator.events("standing.created")[0]["standing"] == "ops"
    rows = {row["name"]: row for row in json.loads(operator.run("standing", "list", "--format", "json").stdout)}
    assert rows["ops"]["declared"] is False and rows["ops"]["running"] is True
    prompt = operator.harness(record["harnessSessionId"]).wait_for("start")[0]["argv"][-1]
    assert prompt.endswith("keep the lights on")

    # the-loop restart brings a created auto-start session back with the same conversation
    restarted = operator.run("restart")
    assert "standing ops: resumed" in restarted.stdout, restarted.stdout + restarted.stderr
    assert operator.record("ops")["harnessSessionId"] == record["harnessSessionId"]

    assert operator.run("standing", "create", "ops").returncode == 2  # it exists
    assert operator.run("standing", "create", "watcher").returncode == 2  # declared: changed in the config
    assert operator.run("standing", "delete", "watcher").returncode == 2
    assert operator.run("standing", "delete", "nobody").returncode == 1
    deleted = operator.run("standing", "delete", "ops")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == ["ops: stopped", "ops: deleted"]
    assert not (operator.env.root / "local" / "standing" / "ops.json").exists()
    assert operator.tmux("has-session", "-t", "=loop-standing-ops").returncode != 0
    assert operator.events("standing.deleted")
    operator.run("stop")


def test_e31_a_created_session_that_cannot_start_leaves_no_record(operator: Operator) -> None:
    result = operator.run("standing", "create", "ops", "--cwd", "/nonexistent")
    assert result.returncode == 1
    assert "does not exist" in result.stderr
    assert not (operator.env.root / "local" / "standing" / "ops.json").exists()
    assert operator.events("standing.create_failed")
    parked = operator.run("standing", "create", "later", "--no-start", "--no-auto-start")
    assert parked.returncode == 0 and parked.stdout.strip() == "later: created"
    assert operator.record("later")["status"] == "stopped"
    assert operator.tmux("has-session", "-t", "=loop-standing-later").returncode != 0
