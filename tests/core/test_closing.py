"""Pause, stop, close, reset and cleanup on real tmux with the fake harness (sessions-runner-harness.md C20-C25,
cli-config-state-events.md F29, F30, F32, F35).

Two ways in: the close path called in-process with a dispatcher (``world``), and the real CLI in a subprocess
(``cli``) with ``THE_LOOP_EXTRA_PLUGINS=the_loop.testing.fake_plugin`` and ``routing.tmux.socketName`` set to the test's
private tmux server, reached through a logging tmux shim first on ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.models import WorkEvent
from the_loop.plugins import get_host
from the_loop.refs import parse_ref
from the_loop.sessions import workspace
from the_loop.sessions.closing import close_session
from the_loop.sessions.dispatcher import Dispatcher
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state.registry import Endpoint, SessionRegistry
from the_loop.state.store import WorkItemStore
from the_loop.testing import LoopEnv, fake_plugin, wait_for
from the_loop.testing.harness import FakeHarness
from the_loop.testing.shim import TmuxShim, split_commands
from the_loop.testing.world import REF, World

TARGET = "loop-fake-octo-repo-15"
PR_REF = "fake:octo/lib#7"
PR_TARGET = "loop-fake-octo-lib-7"


def read_events(path: Path, name: str | None = None) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if name is None or e["event"] == name]


def snapshot(*roots: Path) -> dict[str, bytes | None]:
    """Every path under ``roots`` with its bytes (None for a directory): equal snapshots mean nothing changed."""
    found: dict[str, bytes | None] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            found[str(path)] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    return found


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60).stdout


def make_remote(tmp: Path) -> Path:
    """A bare ``<tmp>/remote/octo/repo.git`` with one commit on ``main``; returns the ``file://`` base."""
    bare = tmp / "remote" / "octo" / "repo.git"
    bare.parent.mkdir(parents=True)
    git("init", "-q", "--bare", "-b", "main", str(bare))
    seed = tmp / "seed"
    git("init", "-q", "-b", "main", str(seed))
    (seed / "README").write_text("hello\n")
    git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "-C", str(seed), "add", ".")
    git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "-C", str(seed), "commit", "-q", "-m", "first")
    git("-C", str(seed), "push", "-q", str(bare), "main")
    return tmp / "remote"


# ------------------------------------------------------------------------------------------ in-process world


CLOSING = {"routing": {"announce": {"enabled": False}}}


@pytest.fixture
def world(world: World) -> World:
    world.configure(defaults=CLOSING)
    return world


def test_c20_close_keeps_a_dead_pane_with_its_scrollback_and_closes_the_record(world: World) -> None:
    harness = world.spawn("go")
    assert world.dispatcher.dispatch(WorkEvent(delivery_id="d1", work_item=REF, text="remember me")).ok
    harness.wait_for_submitted(2)
    result = close_session(world.config, REF, runner=world.runner)
    assert result.closed == [REF] and [e.tmux for e in result.endpoints] == ["retained"]
    assert harness.records("signal")[0]["ignored"] is False and harness.records("exit")[0]["status"] == 143
    assert world.runner.probe(TARGET) == "dead"
    assert "remember me" in world.runner.capture(TARGET, history=True)
    assert world.own().status == "closed"
    [terminated] = world.events("session.harness_terminated")
    assert terminated["ok"] is True and terminated["tmux_target"] == TARGET
    assert [e["tmux_target"] for e in world.events("session.retained")] == [TARGET]
    assert world.events("session.closed")[0]["tmux"] == "keep"
    again = close_session(world.config, REF, runner=world.runner)  # nothing live any more: nothing happens
    assert again.closed == [] and again.endpoints == []


@pytest.mark.parametrize("how", ["keepSessionOnClose: false", "kill_tmux=True"])
def test_c20_the_session_is_killed_when_asked(world: World, how: str) -> None:
    if how.startswith("keep"):
        world.configure(tmux={"keepSessionOnClose": False})
    world.spawn("go")
    result = close_session(world.config, REF, runner=world.runner, kill_tmux=True if how.startswith("kill") else None)
    assert [e.tmux for e in result.endpoints] == ["killed"]
    assert world.runner.probe(TARGET) == "absent"
    assert world.own().status == "closed" and world.events("session.retained") == []


@pytest.mark.parametrize("grace", [0.5, 0])
def test_c21_a_harness_ignoring_sigterm_is_killed_after_the_grace(world: World, grace: float) -> None:
    world.configure(tmux={"harnessKillGraceSeconds": grace})
    harness = world.spawn("go")
    world.runner.deliver(TARGET, "/ignore-term")
    harness.wait_for_submitted(2)
    started = time.monotonic()
    result = close_session(world.config, REF, runner=world.runner)
    elapsed = time.monotonic() - started
    assert harness.records("signal")[0]["ignored"] is True  # SIGTERM came first and was ignored
    assert result.endpoints[0].harness_ok is True and world.runner.probe(TARGET) == "dead"
    [terminated] = world.events("session.harness_terminated")
    pid = harness.records("start")[0]["pid"]
    assert terminated["terminated"] == [pid] and terminated["killed"] == [pid]
    assert grace <= elapsed < grace + 2.0, elapsed


def test_r28_a_retained_session_whose_harness_runs_is_never_reclaimed(world: World) -> None:
    """killHarnessOnClose: false keeps the harness running in the retained pane; a later spawn for the item then
    finds a live occupant and fails with the remedy rather than kill it (R17, R28)."""
    world.configure(tmux={"killHarnessOnClose": False})
    harness = world.spawn("go")
    result = close_session(world.config, REF, runner=world.runner)
    assert [(e.tmux, e.harness_ok) for e in result.endpoints] == [("retained", None)]
    assert world.runner.probe(TARGET) == "live" and harness.records("signal") == []
    assert world.events("session.harness_terminated") == []
    outcome = world.dispatcher.dispatch(WorkEvent(delivery_id="again", work_item=REF, text="start over", spawn=True))
    assert outcome.status == "failed" and not outcome.will_retry
    assert f"kill-session -t {TARGET}" in outcome.error
    assert world.events("session.spawn_failed")[-1]["tmux_target"] == TARGET
    assert world.runner.probe(TARGET) == "live" and len(harness.records("start")) == 1
    assert len(harness.submitted()) == 1  # the occupant got nothing more than its boot prompt


def test_c22_a_target_that_is_not_a_loop_session_is_never_signalled(world: World, tmux_shim: TmuxShim) -> None:
    human = FakeHarness(world.tmp / "human.jsonl")
    world.runner._run(["new-session", "-d", "-s", "work", "--", *human.argv()])
    human.wait_for("ready")
    cwd = str(world.tmp / "work")
    SessionRegistry(world.config.state).update(
        REF, lambda record: record.sessions.update({REF: Endpoint("fake", "abc", cwd, tmux_target="work")})
    )
    result = close_session(world.config, REF, runner=tmux_shim.runner())
    assert [e.tmux for e in result.endpoints] == ["refused"] and "nothing was signalled" in result.warnings[0]
    assert tmux_shim.calls() == []  # refused before any tmux call: no list-panes -t work
    assert world.own().status == "closed"
    assert human.records("signal") == []
    answer = world.runner._run(["list-panes", "-t", "=work", "-F", "#{pane_dead}"])
    assert answer is not None and answer.stdout.split() == [b"0"]
    [warning] = world.events("session.harness_terminated")
    assert warning["ok"] is False and warning["level"] == "warning" and warning["tmux_target"] == "work"


def test_cleanup_reports_a_failed_step_and_still_runs_the_others(world: World, tmux_shim: TmuxShim) -> None:
    from the_loop.sessions.closing import cleanup

    world.spawn("go")
    cwd = str(world.tmp / "work")
    foreign = Endpoint("fake", "pr", cwd, tmux_target="work")  # not a loop- name: refused, reported
    SessionRegistry(world.config.state).update(REF, lambda record: record.sessions.update({PR_REF: foreign}))
    report = cleanup(world.config, REF, actor="dana", source="cli", runner=tmux_shim.runner())
    assert len(report.errors) == 1 and "'work' is not a the-loop session" in report.errors[0]
    assert report.endpoints == [REF] and world.runner.probe(TARGET) == "absent"
    assert SessionRegistry(world.config.state).load(REF) is None  # the steps after the failure still ran
    assert WorkItemStore(world.config.state, url_for=lambda _ref: None).read(REF)["control"]["command"] == "cleanup"
    assert not any("=work" in call for call in tmux_shim.calls())
    [cleaned] = world.events("session.cleaned")
    assert cleaned["level"] == "warning" and cleaned["errors"] == report.errors and cleaned["actor"] == "dana"


@pytest.mark.parametrize(("actor", "reason"), [("mallory", "unauthorized-actor"), ("", "no-actor")])
def test_c26_an_unauthorized_close_closes_the_session_but_defers_cleanup(world: World, actor: str, reason: str) -> None:
    from the_loop.sessions.closing import work_item_ended

    harness = world.spawn("go")
    report = work_item_ended(world.config, REF, reason="issue-closed", actor=actor, authorized=False, source="webhook")
    assert report.closed == [REF] and not report.cleaned and report.deferred == reason
    assert world.own().status == "closed"  # the record stays: nothing was cleaned up
    assert harness.records("signal")[0]["ignored"] is False and world.runner.probe(TARGET) == "dead"  # retained
    [deferred] = world.events("cleanup.deferred")
    assert deferred["reason"] == reason and deferred["closed_as"] == "issue-closed"
    assert world.events("session.cleaned") == [] and world.events("session.retained")
    portable = WorkItemStore(world.config.state, url_for=lambda _ref: None).read(REF)
    assert portable is not None and portable["ended"]["state"] == "closed"


# --------------------------------------------------------------------------------------------------- the CLI


@dataclass
class Cli:
    env: LoopEnv
    runner: TmuxRunner
    shim: TmuxShim
    logs: Path
    workspace: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.env.run(*args, timeout=90)

    def sessions(self, command: str, *args: str, ref: str = REF) -> subprocess.CompletedProcess[str]:
        extra = ("--no-comment",) if command in ("start", "pause", "resume", "stop", "cleanup") else ()
        return self.run("sessions", command, "--work-item", ref, *extra, *args)

    def config(self) -> LoadedConfig:
        return load_config(self.env.config_path, get_host())

    def record(self, ref: str = REF) -> Any:
        return SessionRegistry(self.config().state).load(ref)

    def harness(self, session_id: str) -> FakeHarness:
        return FakeHarness(self.logs / f"{session_id}.jsonl")

    def start(self) -> FakeHarness:
        result = self.sessions("start")
        assert result.returncode == 0, result.stderr
        harness = self.harness(self.record().own.harness_session_id)
        harness.wait_ready(screen=lambda: self.runner.capture(TARGET))
        return harness

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        return read_events(self.env.root / "logs" / "events.jsonl", name)

    def portable(self, slug: str = "fake-octo-repo-15") -> dict[str, Any]:
        return json.loads((self.env.root / "portable" / f"{slug}.json").read_text())

    def attach_argv(self) -> list[str]:
        """The argv `sessions attach` exec'd (through the shim; without a terminal tmux then gives up)."""
        self.shim.clear_log()
        self.sessions("attach")
        [argv] = [call for call in self.shim.calls() if "attach-session" in call]
        return argv

    def checkout(self) -> Path:
        return self.workspace / ".worktrees" / "github.com" / "octo" / "repo" / "fake-octo-repo-15"


@pytest.fixture
def cli(loop_env: LoopEnv, tmux_runner: TmuxRunner, tmux_shim: TmuxShim, tmp_path: Path) -> Cli:
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "work").mkdir()
    env = loop_env.env
    for name in ("TMUX", "TMUX_PANE"):
        env.pop(name, None)
    env.update(
        THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin",
        FAKE_HARNESS_LOG=str(logs / "{session}.jsonl"),
        FAKE_TICKETS=str(tmp_path / "tickets.json"),
        PATH=f"{tmux_shim.path.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    routing = {
        "defaultHarness": "fake",
        "spawnOnUnmatched": "always",
        "spawnWorkdir": str(tmp_path / "work"),
        "announce": {"enabled": False},
        "tmux": {"socketName": tmux_runner.socket, "harnessKillGraceSeconds": 2},
        "workspace": {"root": str(tmp_path / "ws"), "cloneUrlBase": f"file://{make_remote(tmp_path)}"},
    }
    loop_env.write_config({"routing": routing})
    return Cli(loop_env, tmux_runner, tmux_shim, logs, tmp_path / "ws")


def test_c20_stop_retains_a_readable_pane_attach_forces_read_only_and_close_kill_tmux_ends_it(cli: Cli) -> None:
    harness = cli.start()
    assert cli.sessions("say", "--text", "remember this line").returncode == 0
    harness.wait_for_submitted(2)
    assert cli.checkout().is_dir()
    result = cli.sessions("stop")
    assert result.returncode == 0, result.stderr
    assert f"tmux session {TARGET} kept with its scrollback, its harness ended" in result.stdout
    assert f"removed the checkout {cli.checkout()}" in result.stdout
    assert harness.records("signal")[0]["ignored"] is False
    assert cli.runner.probe(TARGET) == "dead"
    assert "remember this line" in cli.runner.capture(TARGET, history=True)
    assert cli.record().own.status == "closed" and not cli.checkout().exists()
    assert cli.portable()["control"]["command"] == "stop"
    assert [e["ok"] for e in cli.events("session.harness_terminated")] == [True]
    assert [e["tmux_target"] for e in cli.events("session.retained")] == [TARGET]
    assert [e["effect"] for e in cli.events("control.command") if e["command"] == "stop"] == ["stopped"]

    argv = cli.attach_argv()
    assert argv[argv.index("attach-session") :] == ["attach-session", "-r", "-t", f"={TARGET}"]

    killed = cli.sessions("close", "--kill-tmux")
    assert killed.returncode == 0, killed.stderr
    assert f"tmux session {TARGET} killed" in killed.stdout
    assert cli.runner.probe(TARGET) == "absent"
    assert cli.sessions("close").returncode == 1  # nothing live, nothing to kill
    assert cli.sessions("close", "--kill-tmux").returncode == 1


def test_stop_disarms_until_an_explicit_start(cli: Cli, plugin_host: Any) -> None:
    plugin_host.register(fake_plugin, "fake")
    cli.start()
    assert cli.sessions("stop").returncode == 0
    config = cli.config()
    events.configure(config.state.events_path, "test")
    dispatcher = Dispatcher(config, runner=cli.runner)
    outcome = dispatcher.dispatch(WorkEvent(delivery_id="late", work_item=REF, text="hi", spawn=True))
    assert outcome.reason == "awaiting-start" and "stop" in outcome.error
    assert cli.runner.probe(TARGET) == "dead"  # nothing spawned over the retained pane
    first = cli.record().own.harness_session_id
    cli.start()  # an explicit start re-arms it
    assert cli.portable()["control"]["command"] == "start"
    assert cli.record().own.harness_session_id != first
    nothing = cli.sessions("stop", ref="fake:octo/repo#99")
    assert nothing.returncode == 1 and "no live session" in nothing.stderr
    assert cli.portable("fake-octo-repo-99")["control"]["command"] == "stop"


def test_c23_pause_holds_off_events_leaves_tmux_alone_and_resume_replays_nothing(cli: Cli) -> None:
    harness = cli.start()
    paused = cli.sessions("pause")
    assert paused.returncode == 0, paused.stderr
    assert cli.record().own.status == "paused" and cli.portable()["control"]["command"] == "pause"
    screen = cli.runner.capture(TARGET)
    said = cli.sessions("say", "--text", "suppressed")
    assert said.returncode == 1 and "paused" in said.stderr
    assert [e["reason"] for e in cli.events("dispatch.dropped")] == ["session-paused"]
    assert cli.runner.capture(TARGET) == screen and cli.runner.probe(TARGET) == "live"
    argv = cli.attach_argv()
    assert argv[argv.index("attach-session") :] == ["attach-session", "-t", f"={TARGET}"]  # still writable
    assert cli.sessions("pause").returncode == 0  # already paused: fine

    resumed = cli.sessions("resume")
    assert resumed.returncode == 0, resumed.stderr
    assert cli.sessions("say", "--text", "after resume").returncode == 0
    assert harness.wait_for_submitted(2)[1:] == ["after resume"]
    assert len(harness.records("start")) == 1 and harness.submitted()[1:] == ["after resume"]
    assert [e["event"] for e in cli.events() if e["event"] in ("session.paused", "session.resumed")] == [
        "session.paused",
        "session.resumed",
    ]
    again = cli.sessions("resume")
    assert again.returncode == 1 and "nothing to resume" in again.stderr


def _attached_read_only(cli: Cli) -> bool:
    """Attach a real client read-only (``script`` gives tmux a terminal) and see tmux report it."""
    if shutil.which("script") is None:
        pytest.skip("script(1) is needed to give tmux attach a terminal")
    tmux = f"{cli.runner.binary} -L {cli.runner.socket} attach-session -r -t ={TARGET}"
    observer = subprocess.Popen(
        ["script", "-q", "-c", tmux, "/dev/null"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def clients() -> list[bytes]:
            answer = cli.runner._run(["list-clients", "-t", f"={TARGET}", "-F", "#{client_readonly}"])
            return answer.stdout.split() if answer else []

        return wait_for(clients) == [b"1"]
    finally:
        observer.terminate()
        observer.wait(timeout=10)


def test_c24_reset_ends_a_live_session_keeps_tmux_and_reports_the_checkout_apart(cli: Cli) -> None:
    harness = cli.start()
    assert cli.checkout().is_dir()
    before = snapshot(cli.env.root, cli.workspace)
    dry = cli.run("sessions", "reset", "--work-item", REF, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert snapshot(cli.env.root, cli.workspace) == before  # byte for byte, the event log included
    assert cli.runner.probe(TARGET) == "live" and harness.records("signal") == []
    assert f"would end its live session: tmux session {TARGET} kept" in dry.stdout
    assert f"would remove the checkout {cli.checkout()}" in dry.stdout

    result = cli.run("sessions", "reset", "--work-item", REF)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"reset {REF}"
    assert lines[1].startswith(f"  ended its live session: tmux session {TARGET} kept")
    assert f"tmux -L {cli.runner.socket} attach -r -t {TARGET}" in lines[1]
    assert lines[2].startswith("  removed: session, control")  # and lifecycle, once the start recorded one
    assert lines[3] == f"  removed the checkout {cli.checkout()} — uncommitted work in it is gone"
    assert harness.records("signal")[0]["ignored"] is False
    assert cli.runner.probe(TARGET) == "dead"  # retained by default
    assert cli.record() is None and not cli.checkout().exists()
    assert (cli.workspace / "github.com" / "octo" / "repo" / ".git").is_dir()  # the shared clone stays
    assert not (cli.env.root / "portable" / "fake-octo-repo-15.json").exists()
    [reset] = cli.events("session.reset")
    assert reset["was_live"] is True and reset["found"] is True
    assert reset["removed"][:2] == ["session", "control"] and reset["removed"][-1] == "checkout" and reset["actor"]
    assert _attached_read_only(cli)
    nothing = cli.sessions("attach")
    assert nothing.returncode == 1 and "no session recorded" in nothing.stderr


def test_reset_then_start_gives_a_fresh_conversation(cli: Cli) -> None:
    cli.start()
    first = cli.record().own.harness_session_id
    assert cli.run("sessions", "reset", "--work-item", REF).returncode == 0
    harness = cli.start()
    second = cli.record().own.harness_session_id
    assert second != first
    start = harness.records("start")[0]
    assert start["mode"] == "fresh" and start["session_id"] == second and "--resume" not in start["argv"]


def test_c25_cleanup_kills_every_endpoint_pr_first_and_keeps_the_portable_record(cli: Cli, plugin_host: Any) -> None:
    own = cli.start()
    pr = FakeHarness(cli.logs / "pr.jsonl")
    assert cli.runner.spawn(PR_TARGET, cli.workspace, pr.argv(session_id="pr")).spawned
    pr.wait_ready(screen=lambda: cli.runner.capture(PR_TARGET))
    config = cli.config()
    pr_endpoint = Endpoint("fake", "pr", str(cli.workspace), tmux_target=PR_TARGET)
    SessionRegistry(config.state).update(REF, lambda record: record.sessions.update({PR_REF: pr_endpoint}))
    store = WorkItemStore(config.state, url_for=lambda _ref: None, sections=("control", "poll"))
    store.update_section(REF, "poll", {"seen": ["c1"]})
    cli.shim.clear_log()

    result = cli.sessions("cleanup")
    assert result.returncode == 0, result.stderr
    killed = [
        command[command.index("-t") + 1]
        for call in cli.shim.calls()
        for command in split_commands(call)
        if command[0] == "kill-session"
    ]
    assert killed == [f"={PR_TARGET}", f"={TARGET}"]  # the pull request's session first, the work item's last
    assert pr.records("signal")[0]["ignored"] is False and own.records("signal")[0]["ignored"] is False
    assert cli.runner.list_sessions() == []
    assert cli.record() is None and not cli.checkout().exists()
    assert (cli.workspace / "github.com" / "octo" / "repo" / ".git").is_dir()
    portable = cli.portable()
    assert portable["control"]["command"] == "cleanup" and portable["control"]["source"] == "cli"
    assert portable["poll"] == {"seen": ["c1"]}
    [cleaned] = cli.events("session.cleaned")
    assert cleaned["endpoints"] == [PR_REF, REF] and cleaned["found"] is True and cleaned["source"] == "cli"
    assert {"checkout", "session", f"tmux:{TARGET}", f"tmux:{PR_TARGET}"} <= set(cleaned["removed"])
    assert "errors" not in cleaned

    later = cli.sessions("say", "--text", "anyone there?")
    assert later.returncode == 1 and "has no session" in later.stderr
    plugin_host.register(fake_plugin, "fake")  # a later event that would spawn an armed item does not respawn it
    events.configure(config.state.events_path, "test")
    late = Dispatcher(config, runner=cli.runner).dispatch(
        WorkEvent(delivery_id="after-cleanup", work_item=REF, text="hello again", spawn=True)
    )
    assert late.reason == "awaiting-start" and "cleanup" in late.error
    assert cli.runner.list_sessions() == [] and cli.record() is None

    stray = workspace.prepare(config, parse_ref(REF)).path  # a checkout stranded with no record
    assert stray == cli.checkout() and cli.record() is None
    again = cli.sessions("cleanup", "--format", "json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["removed"] == ["checkout"] and report["endpoints"] == [] and report["found"] is True
    assert not cli.checkout().exists()
    assert len(cli.events("session.cleaned")) == 2

    restarted = cli.sessions("start")  # an explicit start re-arms a cleaned-up item
    assert restarted.returncode == 0, restarted.stderr
    assert cli.portable()["control"]["command"] == "start"


def test_keep_checkout_on_close_keeps_it_through_stop_and_reset_but_not_cleanup(cli: Cli) -> None:
    config = yaml.safe_load(cli.env.config_path.read_text())
    config["routing"]["workspace"]["keepCheckoutOnClose"] = True
    cli.env.write_config(config)
    cli.start()
    (cli.checkout() / "uncommitted.txt").write_text("work in progress\n")
    stopped = cli.sessions("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "removed the checkout" not in stopped.stdout and (cli.checkout() / "uncommitted.txt").exists()
    cli.start()  # re-armed; the existing checkout is reused as it is
    assert cli.record().own.cwd == str(cli.checkout()) and (cli.checkout() / "uncommitted.txt").exists()
    reset = cli.run("sessions", "reset", "--work-item", REF, "--format", "json")
    assert reset.returncode == 0, reset.stderr
    [report] = json.loads(reset.stdout)
    assert "checkout" not in report["removed"] and report["checkouts"] == [] and cli.checkout().is_dir()
    cli.start()
    cleaned = cli.sessions("cleanup")
    assert cleaned.returncode == 0, cleaned.stderr
    assert "removed its checkout" in cleaned.stdout and not cli.checkout().exists()  # cleanup ignores the setting
    assert (cli.workspace / "github.com" / "octo" / "repo" / ".git").is_dir()


def _cleanup_comments(cli: Cli) -> list[str]:
    tickets = cli.env.tmp / "tickets.json"
    return json.loads(tickets.read_text())["items"].get(REF, {}).get("comments", []) if tickets.exists() else []


def test_cleanup_touches_nothing_remote_unless_a_comment_is_asked_for(cli: Cli) -> None:
    """Seed 004: a cleanup leaves anything remote untouched, so its comment on the ticket is opt-in."""
    quiet = cli.run("sessions", "cleanup", "--work-item", REF)
    assert quiet.returncode == 0, quiet.stderr
    assert _cleanup_comments(cli) == []
    asked = cli.run("sessions", "cleanup", "--work-item", REF, "--comment")
    assert asked.returncode == 0, asked.stderr
    [comment] = _cleanup_comments(cli)
    assert "cleaned up this work item's local resources" in comment
    cli.env.edit_config(lambda config: config["routing"].update(cleanup={"comment": True}))
    assert cli.run("sessions", "cleanup", "--work-item", REF).returncode == 0
    assert len(_cleanup_comments(cli)) == 2
    assert cli.run("sessions", "cleanup", "--work-item", REF, "--no-comment").returncode == 0
    assert len(_cleanup_comments(cli)) == 2


def test_cleanup_with_nothing_recorded_still_logs_and_disarms(cli: Cli) -> None:
    result = cli.sessions("cleanup", ref="fake:octo/repo#40")
    assert result.returncode == 0, result.stderr
    assert "nothing was left on this machine" in result.stdout
    [cleaned] = cli.events("session.cleaned")
    assert cleaned["found"] is False and cleaned["removed"] == [] and cleaned["endpoints"] == []
    assert cli.portable("fake-octo-repo-40")["control"]["command"] == "cleanup"


# -------------------------------------------------------------------------------------- state on disk (F…)


@pytest.fixture
def state_env(loop_env: LoopEnv, tmux_runner: TmuxRunner) -> LoopEnv:
    loop_env.write_config({"routing": {"tmux": {"socketName": tmux_runner.socket}}})
    return loop_env


def _f28_state(env: LoopEnv) -> None:
    local = env.root / "local"
    local.mkdir(parents=True)
    record = {
        "version": 2,
        "workItem": "github:octo/repo#15",
        "sessions": {
            "github:octo/repo#15": {
                "harness": "claude",
                "harnessSessionId": "0f1c",
                "cwd": str(env.tmp),
                "status": "active",
                "createdAt": "2026-07-31T09:12:04Z",
                "lastEventAt": None,
                "tmuxTarget": "loop-github-octo-repo-15",
                "recentDeliveries": [],
            }
        },
    }
    (local / "github-octo-repo-15.json").write_text(json.dumps(record, indent=2) + "\n")
    (local / "github-octo-repo-16.json").write_text("{not json")
    (local / "notes.json").write_text("{}")


def test_f29_a_bare_reset_or_a_bad_ref_changes_nothing_and_dry_run_is_byte_identical(state_env: LoopEnv) -> None:
    _f28_state(state_env)
    before = snapshot(state_env.root)
    for args in ([], ["--work-item", "bad ref"], ["--work-item", "github:octo/repo#15", "--work-item", "bad ref"]):
        result = state_env.run("sessions", "reset", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert snapshot(state_env.root) == before
    dry = state_env.run("sessions", "reset", "--work-item", "github:octo/repo#15", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0] == "would reset github:octo/repo#15" and lines[2] == "  would remove: session"
    assert lines[1].startswith("  would end its live session: tmux session loop-github-octo-repo-15 kept")
    data = json.loads(
        state_env.run("sessions", "reset", "--work-item", "github:octo/repo#15", "--dry-run", "--format", "json").stdout
    )
    assert data == [
        {
            "work_item": "github:octo/repo#15",
            "found": True,
            "was_live": True,
            "removed": ["session"],
            "live_session": "loop-github-octo-repo-15",
            "tmux": "retained",
            "checkouts": [],
            "dry_run": True,
            "warnings": [],
        }
    ]
    assert snapshot(state_env.root) == before


def test_f30_reset_removes_both_records_and_the_index_with_one_reset_line(state_env: LoopEnv) -> None:
    config = load_config(state_env.config_path, get_host())
    store = WorkItemStore(config.state, url_for=lambda _ref: None, sections=("control", "poll"))
    ref = "github:octo/repo#15"
    store.update_section(ref, "control", {"command": "start", "source": "cli"})
    store.update_section(ref, "poll", {"seen": ["1"]})
    endpoint = Endpoint("claude", "0f1c", str(state_env.tmp), tmux_target="")
    SessionRegistry(config.state).update(ref, lambda record: record.sessions.update({ref: endpoint}))
    portable = state_env.root / "portable"
    assert (portable / "index.json").exists()
    result = state_env.run("sessions", "reset", "--work-item", ref)
    assert result.returncode == 0, result.stderr
    assert not (portable / "github-octo-repo-15.json").exists() and not (portable / "index.json").exists()
    assert not (state_env.root / "local" / "github-octo-repo-15.json").exists()
    [reset] = [e for e in state_env.events() if e["event"] == "session.reset"]
    assert {"session", "control", "poll"} <= set(reset["removed"])
    assert reset["actor"] and reset["was_live"] is True and reset["found"] is True


def test_reset_is_a_clean_wipe_of_the_portable_record(state_env: LoopEnv) -> None:
    """Seed 004's table: every section goes, the pull requests' poll ledgers and the thread binding included (so the
    next event opens a new thread rather than continuing the old one), and the file with them."""
    from the_loop.sessions.closing import RESET_SECTIONS

    config = load_config(state_env.config_path, get_host())
    store = WorkItemStore(config.state, url_for=lambda _ref: None, sections=RESET_SECTIONS)
    ref = "github:octo/repo#15"
    sections = {
        "control": {"command": "start", "source": "cli"},
        "poll": {"seenComments": ["1"]},
        "pullRequests": {"github:octo/repo#16": {"seenComments": ["2"]}},
        "collaborators": {"users": [{"login": "dana"}]},
        "collaborationChannels": {"channels": [{"ref": "slack@C0TMP375"}]},
        "channels": {"slack": {"channel": "C0CENTRAL", "thread": "1700000000.000100"}},
        "lifecycle": {"started": True},
        "ended": {"state": "closed", "reason": "issue-closed", "outcome": "closed-externally"},
    }
    for name, value in sections.items():
        store.update_section(ref, name, value)
    record = state_env.root / "portable" / "github-octo-repo-15.json"
    before = snapshot(state_env.root)
    dry = state_env.run("sessions", "reset", "--work-item", ref, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[1:] == [
        "  would remove: " + ", ".join(RESET_SECTIONS),
        "  would forget its conversation threads: its next event opens a new one",
    ]
    assert snapshot(state_env.root) == before
    result = state_env.run("sessions", "reset", "--work-item", ref)
    assert result.returncode == 0, result.stderr
    assert "  forgot its conversation threads: its next event opens a new one" in result.stdout.splitlines()
    assert not record.exists() and not (state_env.root / "portable" / "index.json").exists()
    [reset] = [e for e in state_env.events() if e["event"] == "session.reset"]
    assert reset["removed"] == list(RESET_SECTIONS) and set(RESET_SECTIONS) == set(sections)


def test_reset_drops_the_items_poll_clock_only(state_env: LoopEnv) -> None:
    clocks = state_env.root / "local" / "poll-clocks.json"
    clocks.parent.mkdir(parents=True)
    other = {"lastPolledAt": "2026-01-01T00:00:00Z"}
    clocks.write_text(json.dumps({"clocks": {"github:octo/repo#15": other, "github:octo/repo#16": other}}))
    result = state_env.run("sessions", "reset", "--work-item", "github:octo/repo#15", "--format", "json")
    assert json.loads(result.stdout)[0]["removed"] == ["poll-clock"]
    assert json.loads(clocks.read_text()) == {"clocks": {"github:octo/repo#16": other}}


def test_reset_all_and_a_running_daemon_warning(state_env: LoopEnv, hold_lock: Any) -> None:
    _f28_state(state_env)
    (state_env.root / "local" / "github-octo-repo-16.json").unlink()
    state_env.write_config(
        {
            "polling": {"enabled": True, "sources": [{"provider": "x"}]},
            **yaml.safe_load(state_env.config_path.read_text()),
        }
    )
    holder = hold_lock(state_env.root / "poll.pid")
    result = state_env.run("sessions", "reset", "--all", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "a the-loop service is running (poller)" in result.stderr
    assert "would reset github:octo/repo#15" in result.stdout
    assert holder.alive()
    both = state_env.run("sessions", "reset", "--all", "--work-item", "github:octo/repo#15")
    assert both.returncode == 2


def test_f32_pause_with_no_session_records_the_control_and_exits_1(state_env: LoopEnv) -> None:
    result = state_env.run("sessions", "pause", "--work-item", "github:octo/repo#20", "--no-comment")
    assert result.returncode == 1
    record = json.loads((state_env.root / "portable" / "github-octo-repo-20.json").read_text())
    assert record["control"]["command"] == "pause" and record["control"]["source"] == "cli"
    index = json.loads((state_env.root / "portable" / "index.json").read_text())
    assert index["workItems"][0]["sections"] == ["control"]
    assert list(state_env.root.rglob("*.tmp")) == []
    commands = [e for e in state_env.events() if e["event"] == "control.command"]
    assert len(commands) == 1 and commands[0]["command"] == "pause" and commands[0]["effect"] == "no-session"


def test_f35_a_read_only_state_root_makes_pause_exit_2_naming_the_path(state_env: LoopEnv) -> None:
    argv = [sys.executable, "-m", "the_loop", "-c", str(state_env.config_path)]
    argv += ["sessions", "pause", "--work-item", "github:octo/repo#20", "--no-comment"]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.fail("setpriv is needed to drop root's override of file permissions")
        argv = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", *argv]
    state_env.root.chmod(0o555)
    try:
        result = subprocess.run(argv, cwd=state_env.cwd, env=state_env.env, capture_output=True, text=True, timeout=60)
    finally:
        state_env.root.chmod(0o755)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(state_env.root) in errors[0]
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in state_env.root.iterdir()) == ["cli-config.yaml"]
