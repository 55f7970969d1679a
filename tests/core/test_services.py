"""``start`` / ``stop`` / ``status`` / ``restart`` against real processes, real pidfile locks and real HTTP.

Detached daemons get the test plugin (an ``/echo`` route, a ``fake`` poll source) through
``THE_LOOP_EXTRA_PLUGINS``; every daemon still holding a lock is killed at teardown.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for

TESTS_CORE = Path(__file__).parent
DISABLED = 'version: "0.12.0"\n'
SECRET = "s3cret-value-never-printed"


@pytest.fixture
def env(loop_env: LoopEnv) -> Iterator[LoopEnv]:
    loop_env.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_CORE), os.environ.get("PYTHONPATH")]))
    loop_env.env["THE_LOOP_EXTRA_PLUGINS"] = "plugins_for_tests.loop_test_plugin"
    loop_env.write_config(DISABLED)
    yield loop_env
    kill_lock_holders(loop_env.root)


def poller_config(env: LoopEnv, *, sources: str = "[{provider: fake}]", interval: int = 60) -> None:
    env.write_config(f"{DISABLED}polling: {{enabled: true, intervalSeconds: {interval}, sources: {sources}}}\n")


def webhook_config(env: LoopEnv, port: int, extra: str = "") -> None:
    env.write_config(f"{DISABLED}webhooks: {{ghWebhook: {{enabled: true, port: {port}}}}}\n{extra}")


def row(output: str, service: str) -> str:
    """The line of ``service`` in start/stop/status output."""
    lines = [line for line in output.splitlines() if line.split(" ", 1)[0] == service]
    assert len(lines) == 1, output
    return lines[0]


def event_names(env: LoopEnv) -> list[str]:
    return [record["event"] for record in env.events()]


# ------------------------------------------------------------------------------------------------- status


def test_f14_everything_disabled_status_exits_0(env: LoopEnv) -> None:
    result = env.run("status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["version", "0.1.0"]
    assert lines[1].split() == ["config", str(env.config_path)]
    assert lines[2].split() == ["state", str(env.root)]
    for service in ("gh-webhook", "poller"):
        assert row(result.stdout, service).endswith("not running [disabled]")
    assert "last cycle: unknown — no heartbeat recorded" in result.stdout
    assert not (env.root / "logs").exists(), "status must write nothing"


def test_f14_enabled_poller_not_running_exits_1_and_json_ok_false(env: LoopEnv) -> None:
    poller_config(env)
    assert env.run("status").returncode == 1
    result = env.run("status", "--format", "json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    poller = next(item for item in report["services"] if item["service"] == "poller")
    assert (poller["enabled"], poller["running"], poller["pid"]) == (True, False, None)


def test_status_json_keys(env: LoopEnv) -> None:
    result = env.run("status", "--format", "json")
    report = json.loads(result.stdout)
    assert set(report) == {
        "version",
        "configPath",
        "stateRoot",
        "services",
        "ok",
        "conflictingRoots",
        "channelBacklog",
        "standingSessions",
        "webTerminal",
    }
    assert report["conflictingRoots"] == [] and report["standingSessions"] is None
    assert report["configPath"] == str(env.config_path)
    assert report["stateRoot"] == str(env.root)
    assert [item["service"] for item in report["services"]] == ["gh-webhook", "poller"]
    for item in report["services"]:
        assert set(item) == {
            "service",
            "enabled",
            "running",
            "pid",
            "pidfile",
            "logfile",
            "problems",
            "startedAt",
            "lastCycleAt",
            "lastCycle",
            "intervalSeconds",
            "url",
            "health",
        }
    assert report["services"][1]["pidfile"] == str(env.root / "poll.pid")
    assert report["services"][1]["logfile"] == str(env.root / "logs" / "poller.out")


def test_status_names_a_missing_config_file(env: LoopEnv) -> None:
    env.config_path.unlink()
    result = env.run("status")
    assert f"config      {env.config_path} (not found — defaults)" in result.stdout
    assert result.returncode == 0  # both services default to disabled


def test_status_exits_2_when_the_config_cannot_load(env: LoopEnv) -> None:
    env.write_config("- a\n")
    result = env.run("status")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and str(env.config_path) in result.stderr
    assert "Traceback" not in result.stderr


def test_f15_unlocked_pidfile_is_not_running_and_untouched(env: LoopEnv) -> None:
    pidfile = env.root / "poll.pid"
    pidfile.write_text("999999\n")
    before = pidfile.stat()
    result = env.run("status")
    assert result.returncode == 0
    assert row(result.stdout, "poller").endswith("not running [disabled]")
    assert pidfile.read_text() == "999999\n"
    assert pidfile.stat().st_mtime_ns == before.st_mtime_ns


def test_f16_disabled_but_running_states_both_facts(env: LoopEnv, hold_lock) -> None:
    holder = hold_lock(env.root / "poll.pid")
    result = env.run("status")
    assert result.returncode == 0
    expected = f"running (pid {holder.pid}) [disabled in config — still running; the-loop stop ends it]"
    assert row(result.stdout, "poller").endswith(expected)

    poller_config(env)
    result = env.run("status")
    assert result.returncode == 0
    assert row(result.stdout, "poller").endswith(f"running (pid {holder.pid}) [enabled]")


def test_f34_corrupt_heartbeat_reads_as_none(env: LoopEnv) -> None:
    heartbeat = env.root / "poll-status.json"
    heartbeat.write_text("{bad")
    result = env.run("status")
    assert result.returncode == 0
    assert "            last cycle: unknown — no heartbeat recorded" in result.stdout.splitlines()
    assert heartbeat.read_text() == "{bad"
    poller_config(env)
    assert env.run("status").returncode == 1  # the exit code follows the services only


def _run_without_write_permission(env: LoopEnv, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI so that a read-only directory really is read-only (root normally writes anywhere)."""
    argv = [sys.executable, "-m", "the_loop", "-c", str(env.config_path), *args]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.fail("setpriv is needed to drop root's override of file permissions")
        argv = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", *argv]
    return subprocess.run(argv, cwd=env.cwd, env=env.env, capture_output=True, text=True, timeout=60)


def test_f35_read_only_root_leaves_status_exit_code_unaffected(env: LoopEnv, hold_lock) -> None:
    poller_config(env)
    (env.root / "gh-webhook.pid").write_text("4242\n")
    (env.root / "poll-status.json").write_text(json.dumps({"startedAt": "2026-01-01T00:00:00.000Z"}))
    writable = env.run("status")
    assert writable.returncode == 1
    before = sorted(p.name for p in env.root.iterdir())
    env.root.chmod(0o555)
    try:
        read_only = _run_without_write_permission(env, "status")
        proof = _run_without_write_permission(env, "status", "--format", "json")
    finally:
        env.root.chmod(0o755)
    assert read_only.returncode == writable.returncode, read_only.stderr
    assert read_only.stdout == writable.stdout
    assert json.loads(proof.stdout)["ok"] is False
    assert sorted(p.name for p in env.root.iterdir()) == before


def test_enabled_webhook_without_secret_status_names_the_variable(env: LoopEnv) -> None:
    webhook_config(env, free_port())
    result = env.run("status")
    assert result.returncode == 1
    assert row(result.stdout, "gh-webhook").endswith("not running [enabled]")
    problems = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("problem:")]
    assert len(problems) == 1 and "THE_LOOP_GH_WEBHOOK_SECRET" in problems[0]
    report = json.loads(env.run("status", "--format", "json").stdout)
    assert "THE_LOOP_GH_WEBHOOK_SECRET" in report["services"][0]["problems"][0]


def test_status_imports_no_server_or_http_client(env: LoopEnv) -> None:
    poller_config(env)
    argv = [sys.executable, "-X", "importtime", "-m", "the_loop", "-c", str(env.config_path), "status"]
    result = subprocess.run(argv, cwd=env.cwd, env=env.env, capture_output=True, text=True, timeout=60)
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert "the_loop" in imported
    assert not imported & {"uvicorn", "starlette", "httpx", "subprocess", "github", "slack_sdk", "jira"}


# -------------------------------------------------------------------------------------------------- stop


def test_f17_stop_signals_the_holder_and_waits_for_it(env: LoopEnv, hold_lock) -> None:
    holder = hold_lock(env.root / "poll.pid")
    result = env.run("stop")
    assert result.returncode == 0, result.stdout
    assert row(result.stdout, "poller").endswith(f"stopped (pid {holder.pid})")
    assert row(result.stdout, "gh-webhook").endswith("not-running")
    assert holder.process.wait(timeout=1) == -signal.SIGTERM
    assert "service.stopped" in event_names(env)


def test_f17_stop_fails_when_the_holder_ignores_sigterm(env: LoopEnv, hold_lock) -> None:
    holder = hold_lock(env.root / "poll.pid", "ignore-term")
    result = env.run("stop", THE_LOOP_STOP_TIMEOUT="1")
    assert result.returncode == 1
    assert row(result.stdout, "poller").endswith(f"failed (pid {holder.pid} did not exit within 1s)")
    assert holder.alive()


def test_f17_stop_never_signals_pid_0_for_an_empty_locked_pidfile(env: LoopEnv, hold_lock) -> None:
    holder = hold_lock(env.root / "poll.pid", "empty")
    result = env.run("stop")
    # Signalling "pid 0" would have hit stop's own process group (and this test's): it exits 1 instead.
    assert result.returncode == 1, result
    assert "failed (pid unknown" in row(result.stdout, "poller")
    assert "not signalled" in row(result.stdout, "poller")
    assert holder.alive()


def test_f18_stop_removes_stale_pidfiles_and_names_their_pids(env: LoopEnv) -> None:
    (env.root / "poll.pid").write_text("4242\n")
    (env.root / "gh-webhook.pid").write_text("4343\n")
    result = env.run("stop")
    assert result.returncode == 0
    assert row(result.stdout, "poller").endswith(
        f"not-running (removed stale pidfile {env.root / 'poll.pid'}, pid 4242)"
    )
    assert "pid 4343" in row(result.stdout, "gh-webhook")
    assert not (env.root / "poll.pid").exists()
    assert not (env.root / "gh-webhook.pid").exists()


def test_stop_of_an_unknown_service_exits_2(env: LoopEnv) -> None:
    result = env.run("stop", "bogus")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: unknown service 'bogus' (known: gh-webhook, poller)"


# ------------------------------------------------------------------------------------------------- start


def test_f19_poller_without_sources_is_misconfigured_and_nothing_spawns(env: LoopEnv) -> None:
    poller_config(env, sources="[]")
    result = env.run("start")
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == "the-loop 0.1.0"
    assert row(result.stdout, "poller").endswith("misconfigured")
    assert "polling.sources" in result.stdout.split("poller", 1)[1]
    assert row(result.stdout, "gh-webhook").endswith("disabled")
    assert not (env.root / "poll.pid").exists()
    assert not (env.root / "logs" / "poller.out").exists()
    assert "daemon.started" not in event_names(env)


def test_f20_start_reports_already_running_and_spawns_no_second_poller(env: LoopEnv, hold_lock) -> None:
    poller_config(env)
    holder = hold_lock(env.root / "poll.pid")
    result = env.run("start")
    assert result.returncode == 0
    assert row(result.stdout, "poller").endswith(f"already-running (pid {holder.pid})")
    assert (env.root / "poll.pid").read_text().strip() == str(holder.pid)
    assert not (env.root / "logs" / "poller.out").exists()
    assert "daemon.started" not in event_names(env)


def test_start_of_an_unknown_service_exits_2(env: LoopEnv) -> None:
    result = env.run("start", "bogus")
    assert result.returncode == 2
    assert "error: unknown service 'bogus'" in result.stderr


def test_start_fails_before_spawning_when_logs_cannot_be_written(env: LoopEnv) -> None:
    poller_config(env)
    (env.root / "logs").write_text("a file where the logs folder should be")
    result = env.run("start")
    assert result.returncode == 1
    assert f"failed — cannot write {env.root / 'logs' / 'poller.out'}" in row(result.stdout, "poller")
    assert not (env.root / "poll.pid").exists()


def test_start_reports_a_daemon_that_exits_before_locking_with_its_last_log_line(env: LoopEnv, tmp_path: Path) -> None:
    empty_path = tmp_path / "no-tools"
    empty_path.mkdir()
    poller_config(env)
    env.write_config(env.config_path.read_text() + "routing: {enabled: true, defaultHarness: fake-harness}\n")
    result = env.run("start", PATH=str(empty_path))  # the daemon finds no tmux
    assert result.returncode == 1
    logfile = env.root / "logs" / "poller.out"
    assert row(result.stdout, "poller").endswith(f"failed — see {logfile}")
    note = result.stdout.splitlines()[-1]
    assert note.startswith("            error: poller cannot start: missing dependency: tmux — install it (")
    assert not (env.root / "poll.pid").exists()


def test_one_failure_never_hides_the_other_rows(env: LoopEnv) -> None:
    env.write_config(
        f"{DISABLED}webhooks: {{ghWebhook: {{enabled: true, port: {free_port()}}}}}\n"
        "polling: {enabled: true, sources: [{provider: fake}]}\n"
    )
    result = env.run("start")  # no webhook secret: the receiver is misconfigured, the poller starts
    assert result.returncode == 1
    assert row(result.stdout, "gh-webhook").endswith("misconfigured")
    assert "THE_LOOP_GH_WEBHOOK_SECRET" in result.stdout
    assert row(result.stdout, "poller").startswith("poller      started (pid ")
    assert not (env.root / "gh-webhook.pid").exists()
    assert env.run("stop").returncode == 0


# -------------------------------------------------------------------------------------------- round trips


def test_webhook_round_trip_start_status_stop(env: LoopEnv) -> None:
    port = free_port()
    webhook_config(env, port)
    env.env["THE_LOOP_GH_WEBHOOK_SECRET"] = SECRET

    started = env.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = int(row(started.stdout, "gh-webhook").split("(pid ")[1].rstrip(")"))
    assert (env.root / "gh-webhook.pid").read_text().strip() == str(pid)
    health = wait_for(lambda: _health(port))
    assert health.json() == {"status": "ok"}

    status = env.run("status")
    assert status.returncode == 0
    assert row(status.stdout, "gh-webhook").endswith(f"running (pid {pid}) [enabled]")
    again = env.run("start")
    assert row(again.stdout, "gh-webhook").endswith(f"already-running (pid {pid})")

    stopped = env.run("stop")
    assert stopped.returncode == 0
    assert row(stopped.stdout, "gh-webhook").endswith(f"stopped (pid {pid})")
    assert not (env.root / "gh-webhook.pid").exists()
    after = env.run("status")
    assert after.returncode == 1
    assert row(after.stdout, "gh-webhook").endswith("not running [enabled]")

    names = event_names(env)
    for name in ("service.started", "daemon.started", "server.started", "server.stopped", "daemon.stopped"):
        assert name in names
    log_text = (env.root / "logs" / "gh-webhook.out").read_text()
    everything = log_text + (env.root / "logs" / "events.jsonl").read_text() + started.stdout + status.stdout
    assert SECRET not in everything


def _health(port: int) -> httpx.Response | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass  # listening: now one real request
    except OSError:
        return None
    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_poller_round_trip_shows_the_heartbeat(env: LoopEnv) -> None:
    poller_config(env, interval=1)
    env.env["FAKE_POLL_MODE"] = "degraded"
    started = env.run("start", "poller")
    assert started.returncode == 0, started.stdout
    assert [line.split()[0] for line in started.stdout.splitlines()[1:]] == ["poller"]  # only the named service
    heartbeat = env.root / "poll-status.json"
    wait_for(lambda: heartbeat.exists() and json.loads(heartbeat.read_text()).get("lastCycleAt"))

    status = env.run("status")
    assert status.returncode == 0, status.stdout
    lines = status.stdout.splitlines()
    assert any(line.startswith("            started:    ") and line.endswith(" ago)") for line in lines)
    cycle = next(line for line in lines if line.startswith("            last cycle: "))
    assert "before it stopped" not in cycle
    assert cycle.endswith("— 3 item(s), 1 spawn(s), 2 comment(s) forwarded, 1 closed, 1 error(s)")
    assert "            degraded:   octo/broken — 404 Not Found" in lines

    report = json.loads(env.run("status", "--format", "json").stdout)
    poller = report["services"][1]
    assert poller["running"] and poller["pid"] > 0 and poller["intervalSeconds"] == 1
    assert poller["lastCycle"]["itemsSeen"] == 3
    assert poller["lastCycle"]["scopesFailed"] == [
        {"scope": "octo/broken", "error": "404 Not Found", "permanent": True}
    ]
    assert "pid" not in json.loads(heartbeat.read_text())

    assert env.run("stop").returncode == 0
    assert heartbeat.exists(), "the heartbeat is kept when the poller exits"
    after = env.run("status")
    assert "before it stopped) — 3 item(s)" in after.stdout


def test_restart_stops_then_starts_and_records_it(env: LoopEnv) -> None:
    poller_config(env)
    first = env.run("start")
    old_pid = int(row(first.stdout, "poller").split("(pid ")[1].rstrip(")"))
    result = env.run("restart")
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == "the-loop 0.1.0"
    poller_rows = [line for line in lines if line.startswith("poller ")]
    assert poller_rows[0].endswith(f"stopped (pid {old_pid})")
    assert poller_rows[1].startswith("poller      started (pid ")
    assert int(poller_rows[1].split("(pid ")[1].rstrip(")")) != old_pid
    completed = [record for record in env.events() if record["event"] == "restart.completed"]
    assert len(completed) == 1 and completed[0]["ok"] is True
    assert env.run("stop").returncode == 0


def test_restart_exit_code_follows_the_start_half(env: LoopEnv) -> None:
    poller_config(env, sources="[]")
    result = env.run("restart")
    assert result.returncode == 1
    completed = [record for record in env.events() if record["event"] == "restart.completed"]
    assert completed[-1]["ok"] is False and completed[-1]["stop_ok"] is True


def test_issue_339_a_started_daemon_gets_the_absolute_config_path(env: LoopEnv) -> None:
    """The root is anchored on the config file and children get ``THE_LOOP_CLI_CONFIG=<absolute path>``, so a
    daemon started with a relative ``-c`` reads the same config and state root as the CLI, whatever its cwd."""
    poller_config(env)
    relative = os.path.relpath(env.config_path, env.cwd)
    argv = [sys.executable, "-m", "the_loop", "-c", relative, "start", "poller"]
    started = subprocess.run(argv, cwd=env.cwd, env=env.env, capture_output=True, text=True, timeout=60)
    assert started.returncode == 0, started.stdout + started.stderr
    pid = int(row(started.stdout, "poller").split("(pid ")[1].rstrip(")"))

    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert f"THE_LOOP_CLI_CONFIG={env.config_path}".encode() in environ
    assert Path(f"/proc/{pid}/cwd").resolve() != env.config_path.parent  # not relying on the daemon's cwd
    status = subprocess.run([*argv[:5], "status", "--format", "json"], cwd=env.cwd, env=env.env, capture_output=True)
    report = json.loads(status.stdout)
    assert (report["configPath"], report["stateRoot"]) == (str(env.config_path), str(env.root))  # no "..": one path
    assert (report["services"][1]["running"], report["services"][1]["pid"]) == (True, pid)
    assert env.run("stop").returncode == 0


def test_a_plugin_that_fails_to_import_never_stops_a_daemon(env: LoopEnv) -> None:
    """ARCHITECTURE §3: a plugin that fails to import is reported and logged, never fatal to the daemon."""
    from the_loop.testing import write_plugin_dist

    site = write_plugin_dist(env.tmp / "site", "broken", 'raise RuntimeError("broken on purpose")\n')
    poller_config(env)
    pythonpath = os.pathsep.join([str(site), env.env["PYTHONPATH"]])

    result = env.run("daemon", "run", "poller", "--once", PYTHONPATH=pythonpath)

    assert result.returncode == 0, result.stderr
    assert "broken on purpose" in result.stderr  # reported where the daemon logs
    assert [record["event"] for record in env.events()][:3] == ["daemon.started", "poller.started", "poll.cycle"]
    assert not (env.root / "poll.pid").exists()


def test_a_pidfile_that_cannot_be_a_lock_refuses_the_daemon_naming_the_path(env: LoopEnv) -> None:
    """F §1.5: a lock path that cannot be used → the daemon refuses (exit 1, naming the path); status: not
    running; stop: failed, never a signal."""
    poller_config(env)
    pidfile = env.root / "poll.pid"
    pidfile.mkdir()  # a directory where the lock file should be

    daemon = env.run("daemon", "run", "poller", "--once")
    assert daemon.returncode == 1
    assert str(pidfile) in daemon.stderr
    assert "Traceback" not in daemon.stderr
    assert not (env.root / "poll-status.json").exists()  # no cycle ran

    status = env.run("status")
    assert status.returncode == 1
    assert row(status.stdout, "poller").endswith("not running [enabled]")
    stopped = env.run("stop")
    assert stopped.returncode == 1
    assert str(pidfile) in row(stopped.stdout, "poller")


def test_a_relative_configured_pidfile_resolves_against_the_state_root_for_status_and_stop(
    env: LoopEnv, hold_lock
) -> None:
    """F §2.6 R3 (and the reference's ⚠: status/stop ignored a configured receiver pidfile): one resolver."""
    env.write_config(f"{DISABLED}webhooks: {{ghWebhook: {{pidfile: run/hook.pid}}}}\n")
    pidfile = env.root / "run" / "hook.pid"
    pidfile.parent.mkdir()
    holder = hold_lock(pidfile)

    report = json.loads(env.run("status", "--format", "json").stdout)
    receiver = report["services"][0]
    assert receiver["pidfile"] == str(pidfile)
    assert (receiver["running"], receiver["pid"]) == (True, holder.pid)

    stopped = env.run("stop", "gh-webhook")
    assert stopped.returncode == 0
    assert row(stopped.stdout, "gh-webhook").endswith(f"stopped (pid {holder.pid})")
    assert holder.process.wait(timeout=5) == -signal.SIGTERM


_CONTENDER = """
import sys, time
from pathlib import Path
from the_loop.state.runlock import LockHeld, RunLock, holder

pidfile, counter, go, rounds = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
while not go.exists():
    pass
done = 0
while done < rounds:
    lock = RunLock(pidfile)
    try:
        lock.acquire()
    except LockHeld:
        continue
    try:
        assert holder(pidfile) == __import__("os").getpid(), "the pidfile names someone else while we hold it"
        value = int(counter.read_text())  # a deliberately racy read-modify-write: only the lock protects it
        time.sleep(0.0005)
        counter.write_text(str(value + 1))
    finally:
        lock.release()  # unlink, then close: the next taker must not lock an orphaned inode
    done += 1
"""


def test_issue_159_the_pidfile_lock_admits_one_holder_at_a_time(tmp_path: Path) -> None:
    """Upstream let two pollers share one ledger. Four processes take and release one pidfile lock 100 times
    each, racing on unlink/re-create; a counter only the lock protects loses nothing, and the pidfile always
    names the holder."""
    pidfile, counter, go = tmp_path / "poll.pid", tmp_path / "counter", tmp_path / "go"
    counter.write_text("0")
    contenders = [
        subprocess.Popen(
            [sys.executable, "-c", _CONTENDER, str(pidfile), str(counter), str(go), "100"], stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    go.touch()
    for contender in contenders:
        _, err = contender.communicate(timeout=120)
        assert contender.returncode == 0, err
    assert counter.read_text() == "400"
    assert not pidfile.exists()  # the last holder unlinked it


TICKER = """
import time

from the_loop import hookimpl
from the_loop.interfaces import ServiceSpec


@hookimpl
def loop_register_services(config):
    section = config.raw_at("ticker") or {}
    return [
        ServiceSpec(
            name="ticker",
            enabled=bool(section.get("enabled")),
            enabled_by="ticker.enabled",
            pidfile=config.state.pidfile("ticker"),
            logfile=config.state.logfile("ticker"),
            run="ticker_plugin:run",
            owner="ticker",
        )
    ]


def run(context):
    print("ticker is ticking", flush=True)
    while not context.should_stop():
        time.sleep(0.05)
"""


def test_a_plugin_service_is_started_reported_and_stopped_like_cores(env: LoopEnv) -> None:
    """Issue 2 §6: services come from core and from plugins (``loop_register_services``); start, status and
    stop treat a third-party service exactly like the receiver and the poller."""
    from the_loop.testing import write_plugin_dist

    site = write_plugin_dist(env.tmp / "site", "ticker", TICKER)
    env.env["PYTHONPATH"] = os.pathsep.join([str(site), env.env["PYTHONPATH"]])
    env.write_config(f"{DISABLED}ticker: {{enabled: true}}\n")
    pidfile = env.root / "ticker.pid"

    before = env.run("status")
    assert before.returncode == 1
    assert row(before.stdout, "ticker").endswith("not running [enabled]")

    started = env.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = int(row(started.stdout, "ticker").split("(pid ")[1].rstrip(")"))
    assert pidfile.read_text().strip() == str(pid)
    report = json.loads(env.run("status", "--format", "json").stdout)
    assert report["ok"] is True
    ticker = next(item for item in report["services"] if item["service"] == "ticker")
    assert (ticker["running"], ticker["pid"], ticker["logfile"]) == (True, pid, str(env.root / "logs" / "ticker.out"))
    wait_for(lambda: "ticker is ticking" in (env.root / "logs" / "ticker.out").read_text())

    stopped = env.run("stop")
    assert stopped.returncode == 0
    assert row(stopped.stdout, "ticker").endswith(f"stopped (pid {pid})")
    assert not pidfile.exists()
    env.write_config(DISABLED)
    assert row(env.run("status").stdout, "ticker").endswith("not running [disabled]")


def test_issue_339_status_names_other_roots_holding_a_poller_heartbeat(env: LoopEnv) -> None:
    """A poller started under another config (cwd-relative or home) leaves its heartbeat elsewhere; status says so
    beside its provenance, and the exit code still follows the services alone."""
    plain = env.run("status")
    beat = {"startedAt": "2026-07-22T10:00:00.000Z", "lastCycleAt": "2026-07-22T10:05:00.000Z", "lastCycle": {}}
    for other in (env.cwd / ".the-loop", env.home / ".the-loop"):
        other.mkdir()
        (other / "poll-status.json").write_text(json.dumps(beat))
    (env.root / "poll-status.json").write_text(json.dumps(beat))  # the root in use never counts as a conflict

    result = env.run("status")

    assert result.returncode == plain.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[3:5] == [
        f"conflict    {env.cwd / '.the-loop'} also holds a poller heartbeat (last cycle 2026-07-22T10:05:00.000Z); "
        "a poller started with another config writes there",
        f"conflict    {env.home / '.the-loop'} also holds a poller heartbeat (last cycle 2026-07-22T10:05:00.000Z); "
        "a poller started with another config writes there",
    ]
    report = json.loads(env.run("status", "--format", "json").stdout)
    assert report["conflictingRoots"] == [
        {"root": str(env.cwd / ".the-loop"), "lastCycleAt": "2026-07-22T10:05:00.000Z"},
        {"root": str(env.home / ".the-loop"), "lastCycleAt": "2026-07-22T10:05:00.000Z"},
    ]
    from_root = subprocess.run(  # run from the config's own folder: ./.the-loop is the root, so not a conflict
        [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "status", "--format", "json"],
        cwd=env.root.parent,
        env=env.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert [other["root"] for other in json.loads(from_root.stdout)["conflictingRoots"]] == [
        str(env.home / ".the-loop")
    ]


def test_start_foreground_runs_one_service_in_this_process_until_sigterm(env: LoopEnv) -> None:
    """ARCHITECTURE §5: `--foreground` runs one service in the terminal — the daemon itself, holding the lock."""
    poller_config(env)
    argv = [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "start", "--foreground", "poller"]
    process = subprocess.Popen(argv, cwd=env.cwd, env=env.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: json.loads(env.run("status", "--format", "json").stdout)["ok"], timeout=30)
        poller = json.loads(env.run("status", "--format", "json").stdout)["services"][1]
        assert poller["pid"] == process.pid  # this very process, not a detached child
        assert not (env.root / "logs" / "poller.out").exists()  # its output is the terminal's
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not (env.root / "poll.pid").exists()
    assert [name for name in event_names(env) if name.startswith("daemon.")] == ["daemon.started", "daemon.stopped"]


@pytest.mark.parametrize("names", [[], ["poller", "gh-webhook"]], ids=["none", "two"])
def test_start_foreground_needs_exactly_one_service(env: LoopEnv, names: list[str]) -> None:
    result = env.run("start", "--foreground", *names)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --foreground runs exactly one service: the-loop start --foreground SERVICE"
    assert result.stdout == ""


def test_issue_318_a_secret_in_env_file_is_enough_to_start_the_receiver(env: LoopEnv) -> None:
    """The webhook secret lives only in ``env.file`` (0600, beside the config): status names no problem, start
    brings the receiver up, and the value appears in no output, log or event."""
    secrets = env.config_path.parent / "secrets.env"
    secrets.write_text(f"THE_LOOP_GH_WEBHOOK_SECRET={SECRET}\n")
    secrets.chmod(0o600)
    port = free_port()
    webhook_config(env, port, extra="env: {file: secrets.env}\n")
    assert "THE_LOOP_GH_WEBHOOK_SECRET" not in env.env

    before = env.run("status")
    assert before.returncode == 1
    assert "problem:" not in before.stdout  # not running, but nothing missing
    started = env.run("start", "gh-webhook")
    assert started.returncode == 0, started.stdout + started.stderr
    assert wait_for(lambda: _health(port)).json() == {"status": "ok"}
    status = env.run("status", "--format", "json")
    assert status.returncode == 0
    assert env.run("stop").returncode == 0

    outputs = [before.stdout, before.stderr, started.stdout, started.stderr, status.stdout, status.stderr]
    logs = [(env.root / "logs" / name).read_text() for name in ("gh-webhook.out", "events.jsonl")]
    assert not [text for text in outputs + logs if SECRET in text]
