"""``the-loop sessions start|say|list|attach|register`` as an operator runs them: real processes, real tmux (a
private server per test), the fake harness and the fake ticket provider (``THE_LOOP_EXTRA_PLUGINS``)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop.testing import LoopEnv
from the_loop.testing.harness import FakeHarness
from the_loop.testing.shim import TmuxShim

REF = "fake:octo/repo#15"


class Operator:
    """One operator machine: config, a private tmux server, the fake harness log and the fake tickets file."""

    def __init__(self, env: LoopEnv) -> None:
        self.env = env
        self.socket = f"the-loop-test-{secrets.token_hex(6)}"
        self.work = env.tmp / "work"
        self.work.mkdir()
        self.logs = env.tmp / "harness-logs"
        self.logs.mkdir()
        self.tickets = env.tmp / "tickets.json"
        self.env.env.update(
            THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin",
            FAKE_HARNESS_LOG=str(self.logs / "{session}.jsonl"),
            FAKE_TICKETS=str(self.tickets),
        )
        self.configure()

    def configure(self, **routing: Any) -> None:
        settings = {
            "defaultHarness": "fake",
            "spawnOnUnmatched": "always",
            "spawnWorkdir": str(self.work),
            "tmux": {"socketName": self.socket, "resumeProbeSeconds": 0.3},
            **routing,
        }
        self.env.write_config(yaml.safe_dump({"routing": settings}))

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.env.run(*args, **env)

    def record(self, slug: str = "fake-octo-repo-15") -> dict[str, Any]:
        return json.loads((self.env.root / "local" / f"{slug}.json").read_text())

    def portable(self, slug: str = "fake-octo-repo-15") -> dict[str, Any]:
        return json.loads((self.env.root / "portable" / f"{slug}.json").read_text())

    def harness(self, ref: str = REF) -> FakeHarness:
        session_id = self.record()["sessions"][ref]["harnessSessionId"]
        return FakeHarness(self.logs / f"{session_id}.jsonl")

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10)

    def set_labels(self, ref: str, labels: list[str]) -> None:
        self.tickets.write_text(json.dumps({"items": {ref: {"labels": labels}}}))


@pytest.fixture
def operator(loop_env: LoopEnv) -> Iterator[Operator]:
    if shutil.which("tmux") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("tmux is not installed (CI=true: a missing tool fails the run)")
        pytest.skip("tmux is not installed")
    machine = Operator(loop_env)
    yield machine
    machine.tmux("kill-server")


def test_f27_an_empty_registry_lists_nothing(operator: Operator) -> None:
    result = operator.run("sessions", "list")
    assert result.returncode == 0
    header = "Work item  Harness  Model  Session id  Tmux  Status  Control  Spend  Last event"
    assert result.stdout.strip() == header
    assert "(no registered sessions)" in result.stderr
    as_json = operator.run("sessions", "list", "--format", "json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == []
    assert not (operator.env.root / "local").exists()  # a read command writes nothing


def test_f28_listing_skips_corrupt_records_and_ignores_unrelated_files(operator: Operator) -> None:
    local = operator.env.root / "local"
    local.mkdir(parents=True)
    (local / "github-octo-repo-15.json").write_text(
        json.dumps(
            {
                "version": 2,
                "workItem": "github:octo/repo#15",
                "sessions": {
                    "github:octo/repo#15": {
                        "harness": "claude",
                        "harnessSessionId": "abc",
                        "status": "active",
                        "tmuxTarget": "loop-github-octo-repo-15",
                    }
                },
            }
        )
    )
    (local / "github-octo-repo-16.json").write_text("{not json")
    (local / "notes.json").write_text("{not json either")
    result = operator.run("sessions", "list")
    assert result.returncode == 0
    rows = result.stdout.splitlines()[1:]
    assert len(rows) == 1 and "loop-github-octo-repo-15" in rows[0] and "claude" in rows[0]
    assert result.stderr.count("github-octo-repo-16.json") == 1
    assert "notes.json" not in result.stderr


def test_r51_list_filters_by_status_and_shows_the_model_with_its_effort(operator: Operator) -> None:
    local = operator.env.root / "local"
    local.mkdir(parents=True)
    endpoint = {"harness": "claude", "harnessSessionId": "a1", "cwd": "/w", "createdAt": "2026-07-31T09:12:04Z"}
    records = {
        "github-octo-repo-15": ("github:octo/repo#15", {"status": "active", "model": "m1", "effort": "high"}),
        "github-octo-repo-16": ("github:octo/repo#16", {"status": "closed", "tmuxTarget": "loop-github-octo-repo-16"}),
    }
    for slug, (ref, fields) in records.items():
        entry = {**endpoint, "lastEventAt": None, "tmuxTarget": "", "recentDeliveries": [], **fields}
        record = {"version": 2, "workItem": ref, "sessions": {ref: entry}}
        (local / f"{slug}.json").write_text(json.dumps(record))
    table = operator.run("sessions", "list").stdout.splitlines()
    assert table[0].split("  ")[0] == "Work item" and len(table) == 3
    active = table[1].split()
    # Recorded active, but no tmux session runs for it: listed as down (the next event respawns it), never active.
    assert active[:5] == ["github:octo/repo#15", "claude", "m1", "(high)", "a1"] and active[5:] == [
        "-",
        "down",
        "-",
        "-",
        "-",
    ]
    closed = operator.run("sessions", "list", "--status", "closed", "--format", "json")
    assert [(row["workItem"], row["status"], row["tmuxTarget"]) for row in json.loads(closed.stdout)] == [
        ("github:octo/repo#16", "closed", "loop-github-octo-repo-16")
    ]
    paused = operator.run("sessions", "list", "--status", "paused")
    assert paused.returncode == 0 and "(no registered sessions)" in paused.stderr
    assert operator.run("sessions", "list", "--status", "gone").returncode == 2


def test_start_spawns_records_control_and_announces(operator: Operator) -> None:
    result = operator.run("sessions", "start", "--work-item", REF)
    assert result.returncode == 0, result.stderr
    assert "loop-fake-octo-repo-15" in result.stdout
    own = operator.record()["sessions"][REF]
    assert own["status"] == "active" and own["tmuxTarget"] == "loop-fake-octo-repo-15"
    control = operator.portable()["control"]
    assert control["command"] == "start" and control["source"] == "cli" and control["requestedAt"]
    harness = operator.harness()
    harness.wait_ready()
    assert REF in harness.submitted()[0]
    comments = json.loads(operator.tickets.read_text())["items"][REF]["comments"]
    assert any("attach -t loop-fake-octo-repo-15" in c for c in comments)  # the announcement
    assert any("started this work item from the CLI" in c for c in comments)  # --comment (default)
    events = [e["event"] for e in operator.env.events()]
    assert "session.spawned" in events and "control.command" in events
    listing = operator.run("sessions", "list", "--format", "json")
    assert [row["control"] for row in json.loads(listing.stdout)] == ["start"]

    again = operator.run("sessions", "start", "--work-item", REF)
    assert again.returncode == 0 and "already has a session" in again.stdout
    assert len(harness.records("start")) == 1


def test_start_of_a_harness_that_dies_while_starting_exits_1_and_nothing_is_listed_active(operator: Operator) -> None:
    """Issue 15: a spawn counts only once the harness is ready for input; one that dies first is an error, with
    the pane's last lines in the event, and never an active session."""
    operator.configure(harnessArgs={"fake": ["--exit-at-start", "1"]})
    result = operator.run("sessions", "start", "--work-item", REF)
    assert result.returncode == 1
    assert "exited before it was ready for input" in result.stderr
    [failed] = [e for e in operator.env.events() if e["event"] == "session.spawn_failed"]
    assert failed["will_retry"] is True
    assert any("exiting at start with status 1" in line for line in failed["last_lines"]), failed["last_lines"]
    listing = json.loads(operator.run("sessions", "list", "--format", "json").stdout)
    assert listing == []

    operator.configure()  # fixed: the next start works, and the listing follows the pane
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    [row] = json.loads(operator.run("sessions", "list", "--format", "json").stdout)
    assert (row["status"], row["pane"]) == ("active", "live")
    operator.tmux("kill-server")
    [row] = json.loads(operator.run("sessions", "list", "--format", "json").stdout)
    assert (row["status"], row["pane"]) == ("down", "absent")
    assert " down " in operator.run("sessions", "list").stdout.splitlines()[1]


def test_start_honours_the_arming_policy(operator: Operator) -> None:
    operator.configure(spawnOnUnmatched="never")
    refused = operator.run("sessions", "start", "--work-item", REF)
    assert refused.returncode == 1 and "spawnOnUnmatched is never" in refused.stderr
    assert not (operator.env.root / "portable" / "fake-octo-repo-15.json").exists()  # a refusal records nothing

    operator.configure(spawnOnUnmatched="labeled", autoExecuteLabels=["the-loop: auto-execute"])
    operator.set_labels(REF, ["bug"])
    unlabeled = operator.run("sessions", "start", "--work-item", REF)
    assert unlabeled.returncode == 1 and "the-loop: auto-execute" in unlabeled.stderr
    rejected = [e for e in operator.env.events() if e["event"] == "control.rejected"]
    assert len(rejected) == 2

    operator.set_labels(REF, ["bug", "the-loop: auto-execute"])
    armed = operator.run("sessions", "start", "--work-item", REF, "--no-comment")
    assert armed.returncode == 0, armed.stderr
    comments = json.loads(operator.tickets.read_text())["items"][REF].get("comments", [])
    assert not any("from the CLI" in c for c in comments)


def test_start_resumes_a_paused_session_instead_of_spawning(operator: Operator) -> None:
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    path = operator.env.root / "local" / "fake-octo-repo-15.json"
    data = json.loads(path.read_text())
    data["sessions"][REF]["status"] = "paused"
    path.write_text(json.dumps(data))
    result = operator.run("sessions", "start", "--work-item", REF)
    assert result.returncode == 0 and "resumed" in result.stdout
    assert operator.record()["sessions"][REF]["status"] == "active"
    assert len(operator.harness().records("start")) == 1


def test_say_delivers_through_the_event_path(operator: Operator) -> None:
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    harness = operator.harness()
    harness.wait_ready()
    result = operator.run("sessions", "say", "--work-item", REF, "--text", "please add tests\nand docs")
    assert result.returncode == 0, result.stderr
    assert harness.wait_for_submitted(2)[-1] == "please add tests\nand docs"
    assert operator.record()["sessions"][REF]["recentDeliveries"][-1].startswith("cli-say-")

    operator.tmux("kill-server")  # a crash: say respawns, resuming the conversation
    again = operator.run("sessions", "say", "--work-item", REF, "--text", "still there?")
    assert again.returncode == 0 and "respawned" in again.stdout
    starts = harness.wait_for("start", 2)
    assert starts[1]["mode"] == "resume"


def test_say_without_a_session_names_the_remedy(operator: Operator) -> None:
    result = operator.run("sessions", "say", "--work-item", REF, "--text", "hello")
    assert result.returncode == 1
    assert "the-loop sessions start --work-item fake:octo/repo#15" in result.stderr
    assert operator.tmux("list-sessions").returncode != 0  # nothing was spawned


def test_start_and_say_without_tmux_name_the_missing_dependency_and_record_nothing(
    operator: Operator, tmp_path: Path
) -> None:
    empty = tmp_path / "no-tools"
    empty.mkdir()
    for command in (["start"], ["say", "--text", "hi"]):
        result = operator.run("sessions", *command, "--work-item", REF, PATH=str(empty))
        assert result.returncode == 2, result.stderr
        assert "error: missing dependency: tmux — install it (" in result.stderr and "Traceback" not in result.stderr
    assert not (operator.env.root / "portable" / "fake-octo-repo-15.json").exists()  # a start that cannot spawn
    assert not (operator.env.root / "local" / "fake-octo-repo-15.json").exists()


def test_a_malformed_ref_exits_2_with_one_error_line(operator: Operator) -> None:
    for command in (["start"], ["say", "--text", "x"], ["attach"]):
        result = operator.run("sessions", *command, "--work-item", "not a ref")
        assert result.returncode == 2
        assert "Traceback" not in result.stderr and "expected <provider>" in result.stderr


def test_c29_attach_errors_are_clear(operator: Operator) -> None:
    missing = operator.run("sessions", "attach", "--work-item", REF)
    assert missing.returncode == 1 and "no session recorded" in missing.stderr

    registered = operator.run(
        "sessions", "register", "--work-item", REF, "--harness", "fake", "--harness-session-id", "conv-1"
    )
    assert registered.returncode == 0, registered.stderr
    no_tmux = operator.run("sessions", "attach", "--work-item", REF)
    assert no_tmux.returncode == 1 and "no tmux session recorded yet" in no_tmux.stderr

    path = operator.env.root / "local" / "fake-octo-repo-15.json"
    data = json.loads(path.read_text())
    data["sessions"][REF]["tmuxTarget"] = "loop-fake-octo-repo-15"
    path.write_text(json.dumps(data))
    gone = operator.run("sessions", "attach", "--work-item", REF)
    assert gone.returncode == 1 and "not found" in gone.stderr


def _attach_argv(operator: Operator, *extra: str) -> list[str]:
    """Run attach with a logging tmux shim first on PATH and return the attach-session argv it was given."""
    real = shutil.which("tmux")
    assert real is not None
    shim = TmuxShim.create(operator.env.tmp / "shim", real, socket=None)
    shim.clear_log()
    path = f"{shim.path.parent}:{operator.env.env['PATH']}"
    operator.run("sessions", "attach", "--work-item", REF, *extra, PATH=path)
    attaches = [call for call in shim.calls() if "attach-session" in call]
    assert len(attaches) == 1
    return attaches[0]


def test_attach_execs_tmux_on_the_configured_server_and_forces_read_only_when_closed(operator: Operator) -> None:
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    writable = _attach_argv(operator)
    assert writable[:2] == ["-L", operator.socket] and "-r" not in writable
    assert writable[-2:] == ["-t", "=loop-fake-octo-repo-15"]
    assert "-r" in _attach_argv(operator, "--read-only")

    path = operator.env.root / "local" / "fake-octo-repo-15.json"
    for status, forced in (("paused", False), ("closed", True)):
        data = json.loads(path.read_text())
        data["sessions"][REF]["status"] = status
        path.write_text(json.dumps(data))
        assert ("-r" in _attach_argv(operator)) is forced, status


def test_register_then_the_next_event_resumes_that_conversation(operator: Operator) -> None:
    bad_id = operator.run(
        "sessions", "register", "--work-item", REF, "--harness", "fake", "--harness-session-id", "--help"
    )
    assert bad_id.returncode == 2
    unknown = operator.run(
        "sessions", "register", "--work-item", REF, "--harness", "nope", "--harness-session-id", "conv-1"
    )
    assert unknown.returncode == 2 and "'nope' is not installed" in unknown.stderr

    ok = operator.run("sessions", "register", "--work-item", REF, "--harness", "fake", "--harness-session-id", "conv-1")
    assert ok.returncode == 0, ok.stderr
    own = operator.record()["sessions"][REF]
    assert own["tmuxTarget"] == "" and own["harnessSessionId"] == "conv-1" and own["cwd"] == str(operator.work)
    again = operator.run(
        "sessions", "register", "--work-item", REF, "--harness", "fake", "--harness-session-id", "conv-2"
    )
    assert again.returncode == 1 and "--force" in again.stderr

    said = operator.run("sessions", "say", "--work-item", REF, "--text", "pick it up")
    assert said.returncode == 0, said.stderr
    harness = FakeHarness(operator.logs / "conv-1.jsonl")
    start = harness.wait_for("start")[0]
    assert start["mode"] == "resume" and start["session_id"] == "conv-1"
    assert harness.wait_for_submitted(1) == ["pick it up"]
    assert operator.record()["sessions"][REF]["tmuxTarget"] == "loop-fake-octo-repo-15"


def test_the_sessions_commands_appear_in_help(operator: Operator) -> None:
    result = operator.run("sessions", "--help", config=False)
    assert result.returncode == 0
    for name in ("start", "say", "list", "attach", "register"):
        assert name in result.stdout


def test_status_of_a_started_item_is_visible_through_events(operator: Operator, tmp_path: Path) -> None:
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    result = operator.run("events", "--work-item", REF, "--format", "json", "--limit", "0")
    names = [e["event"] for e in json.loads(result.stdout)]
    assert names.index("session.spawned") < names.index("control.command")


def test_attach_reaches_a_pull_requests_own_session_and_says_when_it_has_none(operator: Operator) -> None:
    assert operator.run("sessions", "start", "--work-item", REF).returncode == 0
    path = operator.env.root / "local" / "fake-octo-repo-15.json"
    data = json.loads(path.read_text())
    own = data["sessions"][REF]
    data["sessions"]["fake:octo/lib#7"] = {**own, "tmuxTarget": own["tmuxTarget"], "cwd": str(operator.work)}
    data["sessions"]["fake:octo/repo#20"] = {"harness": "fake", "tmuxTarget": "", "status": "active"}  # a binding
    path.write_text(json.dumps(data))
    assert _attach_argv(operator, "--pull-request", "fake:octo/lib#7")[-2:] == ["-t", f"={own['tmuxTarget']}"]

    bound = operator.run("sessions", "attach", "--work-item", REF, "--pull-request", "20")
    assert bound.returncode == 1 and "fake:octo/repo#20 has no tmux session of its own" in bound.stderr
    unknown = operator.run("sessions", "attach", "--work-item", REF, "--pull-request", "fake:octo/lib#8")
    assert unknown.returncode == 1 and f"no session recorded for fake:octo/lib#8 on {REF}" in unknown.stderr
    itself = operator.run("sessions", "attach", "--work-item", REF, "--pull-request", "15")
    assert itself.returncode == 2 and "its own pull request" in itself.stderr
