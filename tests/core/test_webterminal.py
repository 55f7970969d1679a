"""The browser terminal and the native-dependency preflight (sessions-runner-harness.md R49, R50, C30).

A fake ``ttyd`` first on ``PATH`` records its argv, its pid and which credential names it inherited, then serves a
page on the ``-p`` port with ``http.server`` until SIGTERM (``FAKE_TTYD_IGNORE_TERM=1`` makes it ignore SIGTERM).
It is run for both ingress services, the receiver and the poller (issue-65).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from the_loop import events
from the_loop.config import load_config
from the_loop.daemon.webterminal import WebTerminal, ttyd_argv
from the_loop.plugins import get_host
from the_loop.state import StateLayout
from the_loop.state.registry import Endpoint, SessionRegistry
from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for

TESTS_CORE = Path(__file__).parent

FAKE_TTYD = """#!{python}
import http.server, json, os, signal, socketserver, sys
from urllib.parse import urlsplit
args = sys.argv[1:]
listen = args[args.index("-i") + 1]  # ttyd: a path is a Unix socket
auth_header = args[args.index("-H") + 1] if "-H" in args else None
check_origin = "--check-origin" in args
log_path = os.environ["FAKE_TTYD_LOG"]

def log(entry):
    with open(log_path, "a") as handle:
        handle.write(json.dumps(entry) + "\\n")

log({{"argv": args, "pid": os.getpid(), "gh_token": "GH_TOKEN" in os.environ,
      "secrets": sorted(k for k in os.environ if k.startswith("FAKE_SECRET"))}})
if os.environ.get("FAKE_TTYD_IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        log({{"request": self.path, "headers": {{k.lower(): v for k, v in self.headers.items()}}}})
        if auth_header and not self.headers.get(auth_header):  # ttyd -H: 407 without the proxy's header
            self.send_response(407)
            self.end_headers()
            return
        if self.headers.get("Upgrade", "").lower() == "websocket":
            origin = urlsplit(self.headers.get("Origin", "")).netloc
            if check_origin and origin != self.headers.get("Host"):
                self.send_response(403)
                self.end_headers()
                return
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.wfile.flush()
            while data := self.connection.recv(65536):
                self.connection.sendall(b"echo:" + data)
            return
        body = b"<html><title>fake ttyd</title></html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def address_string(self):
        return "unix"

    def log_message(self, *_):
        pass

class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

Server(listen, Page).serve_forever()
"""


def write_fake_ttyd(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "ttyd"
    path.write_text(FAKE_TTYD.format(python=sys.executable))
    path.chmod(0o755)
    return path


def ttyd_log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def ttyd_records(log: Path) -> list[dict[str, Any]]:
    """One per ttyd started: its argv, pid and which credential names it inherited."""
    return [entry for entry in ttyd_log(log) if "argv" in entry]


def ttyd_requests(log: Path) -> list[dict[str, Any]]:
    """Every request that reached ttyd, with the headers it came with."""
    return [entry for entry in ttyd_log(log) if "request" in entry]


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


def test_ttyd_listens_on_a_unix_socket_trusting_only_the_gates_header_and_checking_origins() -> None:
    config = load_config(Path("/nonexistent/cli-config.yaml"), get_host())
    assert ttyd_argv(config, Path("/tmp/the-loop-terminal-x/ttyd.sock")) == [
        "ttyd",
        "--writable",
        "--check-origin",
        *("-H", "X-The-Loop-Operator"),
        *("-i", "/tmp/the-loop-terminal-x/ttyd.sock"),
        *("tmux", "new-session", "-A", "-s", "the-loop-hub"),
    ]


REF1 = "fake:octo/repo#1"


def _request(port: int, head: str) -> bytes:
    """Send a raw request head to the gate; what it answered first."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        client.sendall(head.encode())
        return client.recv(65536)


@pytest.mark.parametrize("service", ["poller", "gh-webhook"])
def test_c30_whichever_ingress_runs_serves_the_terminal_behind_its_credential_and_stops_it(
    env: LoopEnv, tmp_path: Path, service: str
) -> None:
    port = free_port()
    configure(env, service, port)
    log = tmp_path / "ttyd.jsonl"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "daemon", "run", service],
        cwd=env.cwd,
        env={**env.env, "GH_TOKEN": "not-for-ttyd"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        [record] = wait_for(lambda: ttyd_records(log), timeout=20)
        listen = record["argv"][record["argv"].index("-i") + 1]
        assert record["argv"] == [
            *("--writable", "--check-origin", "-H", "X-The-Loop-Operator", "-i", listen),
            *("tmux", "-L", "the-loop-hub-test", "new-session", "-A", "-s", "the-loop-hub"),
        ]
        assert stat.S_IMODE(os.stat(Path(listen).parent).st_mode) == 0o700  # only the operator reaches ttyd
        assert record["gh_token"] is False  # credentials never reach the terminal
        wait_for(lambda: [e for e in env.events() if e["event"] == "webterminal.started"])
        base = f"http://127.0.0.1:{port}"

        with httpx.Client(base_url=base, timeout=5) as stranger:  # no credential: nothing reaches ttyd
            assert stranger.get("/").status_code == 401
            assert stranger.get("/", headers={"X-The-Loop-Operator": "operator"}).status_code == 401
            assert stranger.get("/?token=guess").status_code == 401
        assert ttyd_requests(log) == []

        status = env.run("status", "--format", "json")
        terminal = json.loads(status.stdout)["webTerminal"]
        assert terminal["url"] == f"{base}/" and terminal["login"].startswith(f"{base}/?token=")
        token = terminal["login"].split("token=", 1)[1]
        assert token not in json.dumps(record) and token not in (env.root / "local" / "webterminal.json").read_text()
        attach = env.run("sessions", "attach", "--web", "--work-item", "fake:octo/repo#1")
        assert attach.returncode == 1 and "no session recorded" in attach.stderr  # needs a session to switch to
        endpoint = Endpoint("fake", tmux_target="loop-fake-octo-repo-1")
        SessionRegistry(StateLayout(env.root)).update(
            "fake:octo/repo#1", lambda r: r.sessions.update({r.work_item: endpoint})
        )
        attach = env.run("sessions", "attach", "--web", "--work-item", "fake:octo/repo#1")
        assert attach.returncode == 0, attach.stderr
        assert attach.stdout.splitlines() == [
            f"open: {terminal['login']}",
            "then, in it: tmux switch-client -t =loop-fake-octo-repo-1",
        ]
        from the_loop.cli.sessions._common import watch_lines  # what `sessions start` prints after a start
        from the_loop.config import load_config
        from the_loop.refs import parse_ref
        from the_loop.testing.host import TestHost

        shown = watch_lines(load_config(env.config_path, TestHost.create(load_entrypoints=False)), parse_ref(REF1))
        assert shown == [
            f"watch: the-loop sessions attach --work-item {REF1} --read-only",
            f"in a browser: {base}/ (log in with the-loop sessions attach --web --work-item {REF1})",
        ]

        with httpx.Client(base_url=base, timeout=5) as operator:
            login = operator.get(f"/?token={token}")
            assert login.status_code == 303 and "HttpOnly" in login.headers["set-cookie"]
            assert "SameSite=Strict" in login.headers["set-cookie"]
            page = operator.get("/")
            assert page.status_code == 200 and b"fake ttyd" in page.content
        [seen] = ttyd_requests(log)
        assert seen["headers"]["x-the-loop-operator"] == "operator" and "cookie" not in seen["headers"]

        cookie = f"Cookie: the_loop_terminal={token}\r\n"
        upgrade = f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        evil = _request(port, upgrade + cookie + "Origin: http://evil.example\r\n\r\n")
        assert evil.startswith(b"HTTP/1.1 403")  # a page elsewhere cannot open the socket, cookie or not
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            client.sendall((upgrade + cookie + f"Origin: http://127.0.0.1:{port}\r\n\r\n").encode())
            answer = client.recv(65536)
            assert answer.startswith(b"HTTP/1.0 101") or answer.startswith(b"HTTP/1.1 101"), answer
            client.sendall(b"ls\r")
            assert wait_for(lambda: client.recv(65536), timeout=5) == b"echo:ls\r"  # through to the terminal
        reasons = [e["reason"] for e in env.events() if e["event"] == "webterminal.refused"]
        assert reasons == ["no-credential", "no-credential", "bad-credential", "cross-origin"]
    finally:
        daemon.send_signal(signal.SIGTERM)
        _out, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    assert f"web terminal: http://127.0.0.1:{port}/" in err and token not in err
    assert not alive(record["pid"]) and not Path(listen).parent.exists()
    assert not (env.root / "local" / "webterminal.json").exists()
    [stopped] = [e for e in env.events() if e["event"] == "webterminal.stopped"]
    assert stopped["pid"] == record["pid"] and "killed" not in stopped
    assert token not in env.root.joinpath("logs", "events.jsonl").read_text()


def test_a_configured_credential_is_used_and_withheld_from_sessions(env: LoopEnv, tmp_path: Path) -> None:
    from the_loop.config import session_withheld_env

    port = free_port()
    configure(
        env, "poller", port, routing={"webTerminal": {"enabled": True, "port": port, "tokenEnv": "FAKE_SECRET_TERM"}}
    )
    config = load_config(env.config_path, get_host())
    assert "FAKE_SECRET_TERM" in session_withheld_env(config)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "daemon", "run", "poller"],
        cwd=env.cwd,
        env={**env.env, "FAKE_SECRET_TERM": "operator-chosen-credential"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        [record] = wait_for(lambda: ttyd_records(tmp_path / "ttyd.jsonl"), timeout=20)
        assert record["secrets"] == []  # ttyd, and every shell in the hub, never sees it
        wait_for(lambda: [e for e in env.events() if e["event"] == "webterminal.started"])
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as operator:
            assert operator.get("/?token=operator-chosen-credential").status_code == 303
            assert operator.get("/").status_code == 200
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "terminal.example"])
def test_a_web_terminal_beyond_this_host_needs_the_operators_explicit_key(env: LoopEnv, host: str) -> None:
    env.write_config({"routing": {"webTerminal": {"enabled": True, "host": host}}})
    refused = env.run("config", "validate")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "routing.webTerminal.host" in refused.stderr and "allowRemote" in refused.stderr
    env.write_config({"routing": {"webTerminal": {"enabled": True, "host": host, "allowRemote": True}}})
    assert env.run("config", "validate").returncode == 0


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
    config = load_config(path, get_host())
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
    config = load_config(path, get_host())
    events.configure(config.state.events_path, "test")
    terminal = WebTerminal(config)
    assert terminal.start() is False
    [failed] = [json.loads(line) for line in config.state.events_path.read_text().splitlines()]
    assert failed["event"] == "webterminal.failed" and "exited at once with status 3" in failed["error"]
    terminal.stop()  # nothing to stop: fine


def _which(name: str) -> str:
    import shutil

    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found
