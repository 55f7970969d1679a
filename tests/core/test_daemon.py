"""``the-loop daemon run <service> [--once]`` and the poll loop: lock, blocked, SIGTERM, once, heartbeat."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from the_loop.ingress.poller import Heartbeat, run_cycle
from the_loop.interfaces import PollSource, ServiceContext
from the_loop.state import runlock
from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for

TESTS_CORE = Path(__file__).parent
DISABLED = 'version: "0.12.0"\n'


@pytest.fixture
def env(loop_env: LoopEnv) -> Iterator[LoopEnv]:
    loop_env.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_CORE), os.environ.get("PYTHONPATH")]))
    loop_env.env["THE_LOOP_EXTRA_PLUGINS"] = "plugins_for_tests.loop_test_plugin"
    loop_env.write_config(f"{DISABLED}polling: {{enabled: true, intervalSeconds: 60, sources: [{{provider: fake}}]}}\n")
    yield loop_env
    kill_lock_holders(loop_env.root)


def spawn(env: LoopEnv, *args: str, **extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "daemon", "run", *args]
    return subprocess.Popen(
        argv, cwd=env.cwd, env={**env.env, **extra}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def events_of(env: LoopEnv, name: str) -> list[dict]:
    return [record for record in env.events() if record["event"] == name]


def heartbeat(env: LoopEnv) -> dict:
    return json.loads((env.root / "poll-status.json").read_text())


def test_once_runs_one_cycle_and_releases_the_lock(env: LoopEnv) -> None:
    result = env.run("daemon", "run", "poller", "--once")
    assert result.returncode == 0, result.stderr
    beat = heartbeat(env)
    assert set(beat) == {"startedAt", "lastCycleAt", "intervalSeconds", "lastCycle"}
    assert beat["intervalSeconds"] == 60
    assert beat["lastCycle"] == {
        "itemsSeen": 3,
        "spawns": 1,
        "commentsForwarded": 2,
        "closures": 1,
        "failures": 0,
        "errors": 0,
        "scopesPolled": 2,
        "interrupted": False,
        "scopesFailed": [],
        "scopesSkipped": [],
    }
    assert not (env.root / "poll.pid").exists()
    names = [record["event"] for record in env.events()]
    assert names == ["daemon.started", "poller.started", "poll.cycle", "poller.stopped", "daemon.stopped"]
    assert {record["source"] for record in env.events()} == {"poller"}
    assert events_of(env, "poll.cycle")[0]["items_seen"] == 3


def test_sigterm_stops_gracefully_and_releases_the_lock(env: LoopEnv) -> None:
    process = spawn(env, "poller")
    pidfile = env.root / "poll.pid"
    wait_for(lambda: runlock.is_held(pidfile))
    assert runlock.holder(pidfile) == process.pid
    wait_for(lambda: events_of(env, "poll.cycle"))
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - began < 2  # the 60 s sleep is taken in small steps
    assert not pidfile.exists()
    assert (env.root / "poll-status.json").exists()
    assert events_of(env, "daemon.stopped")[0]["exit_code"] == 0


def test_sigint_interrupts_a_running_cycle(env: LoopEnv) -> None:
    process = spawn(env, "poller", FAKE_POLL_MODE="slow")
    wait_for(lambda: events_of(env, "poller.started"))
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=10) == 0
    assert heartbeat(env)["lastCycle"]["interrupted"] is True
    assert events_of(env, "poll.cycle")[0]["interrupted"] is True


def test_blocked_when_the_lock_is_held(env: LoopEnv, hold_lock) -> None:
    holder = hold_lock(env.root / "poll.pid")
    result = env.run("daemon", "run", "poller", "--once")
    assert result.returncode == 1
    assert f"error: poller is already running (pid {holder.pid}; lock {env.root / 'poll.pid'})" in result.stderr
    assert events_of(env, "daemon.blocked")[0]["holder"] == holder.pid
    assert events_of(env, "poller.blocked")[0]["holder"] == holder.pid
    assert not events_of(env, "daemon.started")
    assert holder.alive() and (env.root / "poll.pid").read_text().strip() == str(holder.pid)


def test_webhook_daemon_blocked_emits_no_poller_event(env: LoopEnv, hold_lock) -> None:
    env.write_config(
        f"{DISABLED}webhooks: {{ghWebhook: {{enabled: true, allowUnsigned: true, port: {free_port()}}}}}\n"
    )
    hold_lock(env.root / "gh-webhook.pid")
    result = env.run("daemon", "run", "gh-webhook")
    assert result.returncode == 1
    assert events_of(env, "daemon.blocked")[0]["service"] == "gh-webhook"
    assert not events_of(env, "poller.blocked")


def test_problems_refuse_before_locking(env: LoopEnv) -> None:
    env.write_config(f"{DISABLED}polling: {{enabled: true, sources: []}}\n")
    result = env.run("daemon", "run", "poller")
    assert result.returncode == 1
    assert "error: poller cannot start: polling.sources is empty" in result.stderr
    assert not (env.root / "poll.pid").exists()
    failed = events_of(env, "daemon.failed")
    assert failed and "polling.sources" in failed[0]["problems"][0]


def test_the_receiver_refuses_without_a_route_or_with_a_route_missing_its_secret(loop_env: LoopEnv) -> None:
    env = loop_env  # no test plugin: its echo route would count as a route
    env.write_config(f"{DISABLED}webhooks: {{ghWebhook: {{enabled: true, port: {free_port()}}}}}\n")
    # the GitHub route's own check: its secret variable is unset and unsigned deliveries are not allowed
    result = env.run("daemon", "run", "gh-webhook", timeout=20)
    assert result.returncode == 1
    assert "THE_LOOP_GH_WEBHOOK_SECRET is not set (webhooks.ghWebhook.secretEnv" in result.stderr
    # no plugin adds a route: the receiver would serve nothing, and says what to install
    result = env.run("daemon", "run", "gh-webhook", timeout=20, THE_LOOP_DISABLE_PLUGINS="github")
    assert result.returncode == 1
    assert "no webhook route is installed" in result.stderr
    assert not (env.root / "gh-webhook.pid").exists()


def test_disabled_service_is_refused(env: LoopEnv) -> None:
    env.write_config(DISABLED)
    result = env.run("daemon", "run", "poller", "--once")
    assert result.returncode == 1
    assert "disabled (polling.enabled is false)" in result.stderr
    assert not (env.root / "poll.pid").exists()


def test_unknown_service_exits_2(env: LoopEnv) -> None:
    result = env.run("daemon", "run", "bogus")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: unknown service 'bogus' (known: gh-webhook, poller)"


def test_stale_pidfile_is_removed_and_reported(env: LoopEnv) -> None:
    (env.root / "poll.pid").write_text("999999\n")
    result = env.run("daemon", "run", "poller", "--once")
    assert result.returncode == 0
    assert f"removed stale pidfile {env.root / 'poll.pid'} (pid 999999)" in result.stderr
    assert not (env.root / "poll.pid").exists()


def test_missing_tmux_fails_preflight_with_install_guidance(env: LoopEnv, tmp_path: Path) -> None:
    empty = tmp_path / "no-tools"
    empty.mkdir()
    env.write_config(env.config_path.read_text() + "routing: {enabled: true, defaultHarness: fake-harness}\n")
    result = env.run("daemon", "run", "poller", "--once", PATH=str(empty))
    assert result.returncode == 1
    for hint in ("apt-get install tmux", "brew install tmux", "dnf install tmux"):
        assert hint in result.stderr
    assert not (env.root / "poll.pid").exists()

    satisfied = env.run("daemon", "run", "poller", "--once")  # tmux is on the normal PATH: not a word about it
    assert satisfied.returncode == 0, satisfied.stderr
    assert "not on PATH" not in satisfied.stderr and "install" not in satisfied.stderr


def test_a_source_that_raises_is_an_error_never_fatal(env: LoopEnv) -> None:
    result = env.run("daemon", "run", "poller", "--once", FAKE_POLL_MODE="raise")
    assert result.returncode == 0, result.stderr
    cycle = heartbeat(env)["lastCycle"]
    assert cycle["errors"] == 1
    assert cycle["scopesFailed"] == [
        {"scope": "fake", "error": "RuntimeError: fake source is down", "permanent": False}
    ]
    assert events_of(env, "poll.scope_error")[0]["scope"] == "fake"


def test_a_failing_service_target_exits_1_and_releases_the_lock(env: LoopEnv) -> None:
    port = free_port()
    env.write_config(f"{DISABLED}webhooks: {{ghWebhook: {{enabled: true, allowUnsigned: true, port: {port}}}}}\n")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = env.run("daemon", "run", "gh-webhook")
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr.splitlines()[-2]
    assert not (env.root / "gh-webhook.pid").exists()
    assert events_of(env, "daemon.failed") and events_of(env, "daemon.stopped")[0]["exit_code"] == 1


# ------------------------------------------------------------------------------------------ poll loop units


class _Source(PollSource):
    def __init__(self, name: str, result: object, stop_after: list[bool] | None = None) -> None:
        self.name = name  # type: ignore[misc]
        self.result = result
        self.stop_after = stop_after

    def poll_once(self, context: ServiceContext) -> object:  # type: ignore[override]
        if self.stop_after is not None:
            self.stop_after.append(True)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def _context(stop: list[bool]) -> ServiceContext:
    return ServiceContext(config=None, should_stop=lambda: bool(stop))  # type: ignore[arg-type]


def test_run_cycle_adds_up_sources_and_ignores_malformed_counters() -> None:
    sources = [
        _Source("a", {"itemsSeen": 2, "spawns": 1, "scopesSkipped": ["octo/skipped"]}),
        _Source("b", {"itemsSeen": "many", "errors": True, "scopesFailed": [{"error": "403"}, "junk"]}),
        _Source("c", ["not", "a", "mapping"]),
    ]
    cycle = run_cycle(_context([]), sources)  # type: ignore[arg-type]
    assert cycle["itemsSeen"] == 2 and cycle["spawns"] == 1 and cycle["errors"] == 0
    assert cycle["scopesFailed"] == [{"scope": "b", "error": "403", "permanent": False}]
    assert cycle["scopesSkipped"] == ["octo/skipped"]


def test_run_cycle_stops_between_sources_and_marks_it_interrupted() -> None:
    stop: list[bool] = []
    first = _Source("first", {"itemsSeen": 1}, stop_after=stop)  # asks to stop while it runs
    second = _Source("second", {"itemsSeen": 100})
    cycle = run_cycle(_context(stop), [first, second])
    assert cycle["itemsSeen"] == 1 and cycle["interrupted"] is True


def test_heartbeat_write_failure_warns_once_and_carries_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    beat = Heartbeat(blocker / "poll-status.json", 60)
    beat.record()
    beat.record({"itemsSeen": 1})
    err = capsys.readouterr().err
    assert err.count("warning: heartbeat not recorded") == 1
    assert beat.data["lastCycle"] == {"itemsSeen": 1}
