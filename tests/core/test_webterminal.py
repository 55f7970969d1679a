"""The browser terminal and the native-dependency preflight (sessions-runner-harness.md R49, R50, C30).

A fake ``ttyd`` first on ``PATH`` records its argv, its pid and which credential names it inherited, then serves a
page on the ``-p`` port with ``http.server`` until SIGTERM (``FAKE_TTYD_IGNORE_TERM=1`` makes it ignore SIGTERM).
It is run for both ingress services, the receiver and the poller (issue-65).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop import events
from the_loop.config import load_config
from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for
from the_loop.webterminal import WebTerminal, ttyd_argv

TESTS_CORE = Path(__file__).parent

FAKE_TTYD = """#!{python}
import http.server, json, os, signal, sys
args = sys.argv[1:]
port = int(args[args.index("-p") + 1])
host = args[args.index("-i") + 1]
with open(os.environ["FAKE_TTYD_LOG"], "a") as log:
    log.write(json.dumps({{"argv": args, "pid": os.getpid(), "gh_token": "GH_TOKEN" in os.environ}}) + "\\n")
if os.environ.get("FAKE_TTYD_IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<html><title>fake ttyd</title></html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass

http.server.HTTPServer((host, port), Page).serve_forever()
"""


def write_fake_ttyd(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ttyd"
    path.write_text(FAKE_TTYD.format(python=sys.executable))
    path.chmod(0o755)
    return path


def ttyd_records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # pid > 0: a fake this test started
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def env(loop_env: LoopEnv, tmp_path: Path) -> Iterator[LoopEnv]:
    write_fake_ttyd(tmp_path / "bin")
    loop_env.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_CORE), os.environ.get("PYTHONPATH")]))
    loop_env.env["THE_LOOP_EXTRA_PLUGINS"] = "plugins_for_tests.loop_test_plugin"
    loop_env.env["FAKE_TTYD_LOG"] = str(tmp_path / "ttyd.jsonl")
    loop_env.env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    yield loop_env
    kill_lock_holders(loop_env.root)
    for record in ttyd_records(tmp_path / "ttyd.jsonl"):  # never leave a fake serving
        if alive(record["pid"]):
            os.kill(record["pid"], signal.SIGKILL)


def configure(env: LoopEnv, service: str, port: int, **extra: Any) -> None:
    config: dict[str, Any] = {
        "routing": {"webTerminal": {"enabled": True, "port": port}, "tmux": {"socketName": "the-loop-hub-test"}},
        **extra,
    }
    if service == "poller":
        config["polling"] = {"enabled": True, "intervalSeconds": 60, "sources": [{"provider": "fake"}]}
    else:
        config["webhooks"] = {"ghWebhook": {"enabled": True, "allowUnsigned": True, "port": free_port()}}
    env.write_config(config)


def test_the_default_command_line_is_the_references() -> None:
    config = load_config(Path("/nonexistent/cli-config.yaml"))
    assert ttyd_argv(config) == [
        "ttyd",
        "--writable",
        "-p",
        "7681",
        "-i",
        "127.0.0.1",
        "tmux",
        "new-session",
        "-A",
        "-s",
        "the-loop-hub",
    ]


@pytest.mark.parametrize("service", ["poller", "gh-webhook"])
def test_c30_whichever_ingress_runs_serves_the_terminal_and_stops_it(
    env: LoopEnv, tmp_path: Path, service: str
) -> None:
    port = free_port()
    configure(env, service, port)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "daemon", "run", service],
        cwd=env.cwd,
        env={**env.env, "GH_TOKEN": "not-for-ttyd"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        [record] = wait_for(lambda: ttyd_records(tmp_path / "ttyd.jsonl"), timeout=20)
        assert record["argv"] == [
            "--writable",
            *("-p", str(port), "-i", "127.0.0.1"),
            *("tmux", "-L", "the-loop-hub-test", "new-session", "-A", "-s", "the-loop-hub"),
        ]
        assert record["gh_token"] is False  # credentials never reach the terminal
        page = wait_for(lambda: _get(f"http://127.0.0.1:{port}/"), timeout=10)
        assert b"fake ttyd" in page
        wait_for(lambda: [e for e in env.events() if e["event"] == "webterminal.started"])
    finally:
        daemon.send_signal(signal.SIGTERM)
        _out, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    assert f"web terminal: http://127.0.0.1:{port}/" in err and "access control is environmental" in err
    assert not alive(record["pid"])
    [stopped] = [e for e in env.events() if e["event"] == "webterminal.stopped"]
    assert stopped["pid"] == record["pid"] and "killed" not in stopped


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read()
    except OSError:
        return None


def test_c30_a_missing_ttyd_refuses_the_start_with_install_guidance(env: LoopEnv, tmp_path: Path) -> None:
    tools = tmp_path / "tools-without-ttyd"
    tools.mkdir()
    os.symlink(_which("tmux"), tools / "tmux")
    configure(env, "poller", free_port())
    result = env.run("daemon", "run", "poller", "--once", PATH=str(tools))
    assert result.returncode == 1
    assert "error: poller cannot start: missing dependency: ttyd — install it (" in result.stderr
    assert "brew install ttyd" in result.stderr
    assert not (env.root / "poll.pid").exists() and ttyd_records(tmp_path / "ttyd.jsonl") == []


def test_c30_a_missing_tmux_refuses_the_start_with_install_guidance(env: LoopEnv, tmp_path: Path) -> None:
    empty = tmp_path / "no-tools"
    empty.mkdir()
    configure(env, "poller", free_port(), **{"routing": {"enabled": True, "defaultHarness": "fake-harness"}})
    result = env.run("daemon", "run", "poller", "--once", PATH=str(empty))
    assert result.returncode == 1
    assert "error: poller cannot start: missing dependency: tmux — install it (" in result.stderr


def test_a_ttyd_ignoring_sigterm_is_killed_after_the_grace_and_one_terminal_serves_two_ingresses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fake_ttyd(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_TTYD_LOG", str(tmp_path / "ttyd.jsonl"))
    monkeypatch.setenv("FAKE_TTYD_IGNORE_TERM", "1")
    path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump({"routing": {"webTerminal": {"enabled": True, "port": free_port()}}}))
    config = load_config(path)
    events.configure(config.state.events_path, "test")
    first, second = WebTerminal(config, grace=0.5), WebTerminal(config, grace=0.5)
    assert first.start()
    try:
        assert not second.start()  # the lock: the other ingress leaves the terminal to the first
        wait_for(lambda: ttyd_records(tmp_path / "ttyd.jsonl"))
    finally:
        started = time.monotonic()
        first.stop()
        elapsed = time.monotonic() - started
    [record] = ttyd_records(tmp_path / "ttyd.jsonl")
    assert not alive(record["pid"]) and 0.5 <= elapsed < 5, elapsed
    stopped = [json.loads(line) for line in config.state.events_path.read_text().splitlines()][-1]
    assert stopped["event"] == "webterminal.stopped" and stopped["killed"] is True
    assert second.start()  # the lock was released with the child
    second.stop()


def test_a_ttyd_that_exits_at_once_is_a_warning_not_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ttyd").write_text("#!/bin/sh\nexit 3\n")
    (bin_dir / "ttyd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump({"routing": {"webTerminal": {"enabled": True}}}))
    config = load_config(path)
    events.configure(config.state.events_path, "test")
    terminal = WebTerminal(config)
    assert terminal.start() is False
    [failed] = [json.loads(line) for line in config.state.events_path.read_text().splitlines()]
    assert failed["event"] == "webterminal.failed" and "status 3" in failed["error"]
    terminal.stop()  # nothing to stop: fine


def _which(name: str) -> str:
    import shutil

    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found
