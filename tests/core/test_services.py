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
    assert set(report) == {"version", "configPath", "stateRoot", "services", "ok", "channelBacklog"}
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
