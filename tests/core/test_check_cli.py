"""``the-loop check REF`` as an operator runs it: the real CLI in a subprocess, real tmux (a private server), the fake
harness and the fake ticket provider. It answers from the records alone and writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.plugins import get_host
from the_loop.sessions.closing import work_item_ended
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state.registry import Endpoint, SessionRegistry
from the_loop.state.store import WorkItemStore
from the_loop.testing import LoopEnv, bare_repository, fake_plugin
from the_loop.testing.harness import FakeHarness

REF = "fake:octo/repo#15"
TARGET = "loop-fake-octo-repo-15"
PR_REF = "fake:octo/repo#16"


class Machine:
    def __init__(self, env: LoopEnv, runner: TmuxRunner) -> None:
        self.env = env
        self.runner = runner
        self.work = env.tmp / "work"
        self.work.mkdir()
        self.logs = env.tmp / "logs"
        self.logs.mkdir()
        for name in ("TMUX", "TMUX_PANE"):
            env.env.pop(name, None)
        env.env.update(
            THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin",
            FAKE_HARNESS_LOG=str(self.logs / "{session}.jsonl"),
            FAKE_TICKETS=str(env.tmp / "tickets.json"),
        )
        self.configure()

    def configure(self, **routing: Any) -> None:
        settings = {
            "defaultHarness": "fake",
            "spawnOnUnmatched": "always",
            "spawnWorkdir": str(self.work),
            "announce": {"enabled": False},
            "tmux": {"socketName": self.runner.socket, "harnessKillGraceSeconds": 1},
            **routing,
        }
        self.env.write_config({"models": ["opus"], "effort": ["high"], "routing": settings})

    def check(self, *args: str, ref: str = REF) -> subprocess.CompletedProcess[str]:
        return self.env.run("check", ref, *args)

    def report(self, ref: str = REF) -> dict[str, Any]:
        result = self.check("--format", "json", ref=ref)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def config(self) -> LoadedConfig:
        config = load_config(self.env.config_path, get_host())
        events.configure(config.state.events_path, "test")
        return config

    def store(self) -> WorkItemStore:
        return WorkItemStore(self.config().state, url_for=lambda _ref: None, sections=("control", "ended"))

    def start(self) -> FakeHarness:
        started = self.env.run("sessions", "start", "--work-item", REF, "--no-comment", timeout=90)
        assert started.returncode == 0, started.stderr
        own = SessionRegistry(self.config().state).load(REF).own  # type: ignore[union-attr]
        harness = FakeHarness(self.logs / f"{own.harness_session_id}.jsonl")
        harness.wait_ready(screen=lambda: self.runner.capture(TARGET))
        return harness

    def spec_dir(self, checkout: Path) -> Path:
        return checkout / "docs" / "specs" / "issue-15"

    def write_state(self, checkout: Path, **fields: Any) -> None:
        path = self.spec_dir(checkout) / "work-item-state.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": 1, "workItem": REF, **fields}))


@pytest.fixture
def machine(loop_env: LoopEnv, tmux_runner: TmuxRunner, plugin_host: Any) -> Machine:
    plugin_host.register(fake_plugin, "fake")
    return Machine(loop_env, tmux_runner)


def files(root: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_an_untracked_item_a_bad_ref_and_no_ref(machine: Machine) -> None:
    result = machine.check()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"{REF}: NOT TRACKED"
    report = machine.report()
    assert (report["state"], report["headline"], report["endpoints"], report["ended"]) == (
        "not-tracked",
        "NOT TRACKED",
        [],
        None,
    )
    assert sorted(report) == sorted(
        [
            "workItem",
            "state",
            "headline",
            "control",
            "parked",
            "phase",
            "choices",
            "pullRequests",
            "endpoints",
            "ended",
            "checkout",
            "stateFile",
            "unreadable",
            "problems",
            "steering",
        ]
    )
    bad = machine.check(ref="bad ref")
    assert bad.returncode == 2 and bad.stdout == ""
    assert [line for line in bad.stderr.splitlines() if line.strip()] == [bad.stderr.strip()]
    assert bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr
    assert machine.env.run("check").returncode == 2
    assert not (machine.env.root / "local").exists() and not (machine.env.root / "portable").exists()


def test_armed_then_disarmed_from_the_control_record(machine: Machine) -> None:
    control = {"command": "start", "source": "comment", "actor": "dana", "requestedAt": "2026-09-01T10:00:00Z"}
    machine.store().update_section(REF, "control", control)
    result = machine.check()
    assert result.stdout.splitlines() == [
        f"{REF}: ARMED",
        "  armed: start by dana (comment) at 2026-09-01T10:00:00Z",
        "  no session yet: its next event starts one",
    ]
    assert machine.report()["control"]["actor"] == "dana"
    machine.store().update_section(REF, "control", {**control, "command": "stop", "source": "cli"})
    assert machine.check().stdout.splitlines()[:2] == [
        f"{REF}: DISARMED",
        "  disarmed: stop by dana (cli) at 2026-09-01T10:00:00Z",
    ]


def test_parked_at_the_start_gate_says_why_since_when_and_where_the_checklist_is(machine: Machine) -> None:
    machine.store().update_section(REF, "control", {"command": "start", "source": "comment", "actor": "dana"})
    parked = {"gate": "phase-selection", "reason": "waiting for a choice", "since": "2026-09-01T10:00:05Z"}
    machine.write_state(
        machine.work, phase="phase-selection", parked={**parked, "comment": "4", "extra": "x" * 50}, model="gpt-9"
    )
    before = files(machine.env.root)
    lines = machine.check().stdout.splitlines()
    assert lines[0] == f"{REF}: PARKED at the phase-selection gate"
    assert lines[2:5] == [
        "  why: waiting for a choice",
        "  since: 2026-09-01T10:00:05Z",
        "  checklist: comment 4 on the ticket",
    ]
    assert "  ignored in work-item-state.json: model 'gpt-9' is not declared in models" in lines
    report = machine.report()
    assert report["state"] == "parked" and report["parked"] == {**parked, "comment": "4"}  # the gate's keys only
    assert report["phase"] == "phase-selection" and report["stateFile"].endswith("issue-15/work-item-state.json")
    assert files(machine.env.root) == before  # a read command writes nothing


def test_running_names_each_endpoint_its_tmux_session_and_how_to_attach(machine: Machine) -> None:
    machine.start()
    machine.write_state(machine.work, phase="work", model="opus", effort="high")
    lines = machine.check().stdout.splitlines()
    assert lines[0] == f"{REF}: RUNNING"
    assert "  choices: model opus; effort high" in lines
    assert f"  session {REF}: fake, active, pane live" in lines
    assert f"    tmux {TARGET} in {machine.work}" in lines
    assert f"    attach: the-loop sessions attach --work-item {REF}" in lines
    [endpoint] = machine.report()["endpoints"]
    assert endpoint["pane"] == "live" and endpoint["tmuxTarget"] == TARGET and endpoint["cwd"] == str(machine.work)
    assert endpoint["attach"] == f"tmux -L {machine.runner.socket} attach-session -t ={TARGET}"
    machine.runner.kill(TARGET)  # the record still says active: the probe says the pane is gone
    assert f"  session {REF}: fake, active, pane absent" in machine.check().stdout.splitlines()


def test_a_pull_request_bound_to_the_session_and_one_with_a_session_of_its_own(machine: Machine) -> None:
    machine.start()
    lib = Endpoint("fake", "lib-7", str(machine.env.tmp), tmux_target="loop-fake-octo-lib-7", model="opus")

    def add(record: Any) -> None:
        record.sessions[PR_REF] = Endpoint("fake")  # a binding: no tmux session, no conversation
        record.sessions["fake:octo/lib#7"] = lib

    SessionRegistry(machine.config().state).update(REF, add)
    lines = machine.check().stdout.splitlines()
    assert lines[0] == f"{REF}: RUNNING"
    assert f"  pull request {PR_REF}: bound, its events reach the work item's session" in lines
    at = lines.index("  pull request session fake:octo/lib#7: fake (opus), active, pane absent")
    assert lines[at + 1 : at + 3] == [
        f"    tmux loop-fake-octo-lib-7 in {machine.env.tmp}",
        f"    attach: tmux -L {machine.runner.socket} attach-session -t =loop-fake-octo-lib-7",
    ]
    refs = [endpoint["ref"] for endpoint in machine.report()["endpoints"]]
    assert refs == [REF, "fake:octo/lib#7", PR_REF]  # the work item's own first


def test_ended_then_archived_once_cleanup_removed_the_checkout(machine: Machine) -> None:
    remote = bare_repository(machine.env.tmp).parent.parent
    machine.configure(workspace={"root": str(machine.env.tmp / "ws"), "cloneUrlBase": f"file://{remote}"})
    machine.start()
    config = machine.config()
    checkout = Path(SessionRegistry(config.state).load(REF).own.cwd)  # type: ignore[union-attr]
    row = {"ref": PR_REF, "url": "https://tickets.example/pull/16", "state": "merged", "linkedBy": "session"}
    machine.write_state(checkout, phase="work", model="opus", pullRequests=[row])
    (machine.spec_dir(checkout) / "evidence").mkdir()
    (machine.spec_dir(checkout) / "evidence" / "demo.gif").write_bytes(b"GIF89a")
    work_item_ended(config, REF, reason="issue-closed", actor="mallory", authorized=False, source="webhook")
    assert not checkout.exists()  # the close path removed it, after the terminal was copied

    ended = machine.check().stdout.splitlines()
    assert ended[0] == f"{REF}: ENDED — completed"
    assert "  its session record is still here: cleanup has not run (the-loop sessions cleanup)" in ended
    cleaned = machine.env.run("sessions", "cleanup", "--work-item", REF, timeout=90)
    assert cleaned.returncode == 0, cleaned.stderr

    lines = machine.check().stdout.splitlines()
    assert lines[0] == f"{REF}: ARCHIVED — completed"
    assert lines[1].startswith("  disarmed: cleanup") and "(cli) at " in lines[1]
    assert lines[2].startswith("  ended: closed (issue-closed) at ") and lines[2].endswith(
        " by mallory, seen by the webhook"
    )
    assert lines[4:] == [
        "    phase: work",
        "    choices: model opus",
        f"    pull request {PR_REF}: merged",
        "    evidence in docs/specs/issue-15/evidence: demo.gif",
    ]
    report = machine.report()
    assert report["state"] == "archived" and report["checkout"] is None and report["endpoints"] == []
    assert report["ended"]["outcome"] == "completed" and report["ended"]["terminal"]["evidence"] == ["demo.gif"]


def test_an_unreadable_record_is_named_and_exits_1(machine: Machine) -> None:
    machine.store().update_section(REF, "control", {"command": "start", "source": "cli", "actor": "dana"})
    portable = machine.env.root / "portable" / "fake-octo-repo-15.json"
    portable.write_text("{not json")
    result = machine.check()
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == f"{REF}: NOT TRACKED"
    assert f"warning: {portable} is not readable" in result.stderr and "Traceback" not in result.stderr
    as_json = machine.check("--format", "json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["unreadable"] == [str(portable)]
    assert portable.read_text() == "{not json"  # reported, never moved or rewritten


def test_check_needs_no_tmux_for_an_item_with_no_live_session(machine: Machine) -> None:
    machine.store().update_section(REF, "control", {"command": "start", "source": "cli", "actor": "dana"})
    result = machine.env.run("check", REF, PATH=str(Path(os.devnull).parent / "nonexistent-bin"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"{REF}: ARMED"
