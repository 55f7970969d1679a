"""Core's HTTP server over real HTTP on 127.0.0.1: started as ``the-loop daemon run gh-webhook`` in a subprocess,
with the test plugin's ``/echo`` ingress registered through ``THE_LOOP_EXTRA_PLUGINS``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from the_loop.state import runlock
from the_loop.testing import LoopEnv, free_port, kill_lock_holders, wait_for

TESTS_CORE = Path(__file__).parent
CAP = 2048


@dataclass
class Server:
    env: LoopEnv
    port: int
    process: subprocess.Popen[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rejected(self) -> list[dict]:
        return [record for record in self.env.events() if record["event"] == "server.rejected"]


def _healthy(url: str) -> bool:
    # A raw request: building an httpx client per probe costs ~0.1 s (it loads an SSL context).
    port = int(url.rsplit(":", 1)[1])
    try:
        return status_of(raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) == 200
    except OSError:
        return False


@pytest.fixture
def env(loop_env: LoopEnv) -> Iterator[LoopEnv]:
    loop_env.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_CORE), os.environ.get("PYTHONPATH")]))
    loop_env.env["THE_LOOP_EXTRA_PLUGINS"] = "plugins_for_tests.loop_test_plugin"
    loop_env.env["THE_LOOP_GH_WEBHOOK_SECRET"] = "test-secret"
    yield loop_env
    kill_lock_holders(loop_env.root)


def write_server_config(env: LoopEnv, port: int, **settings: object) -> None:
    hook = {"enabled": True, "port": port, "maxBodyBytes": CAP, "requestTimeoutSeconds": 0.5, **settings}
    env.write_config({"version": "0.12.0", "webhooks": {"ghWebhook": hook}})


@pytest.fixture
def start_server(env: LoopEnv) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(**settings: object) -> Server:
        port = free_port()
        write_server_config(env, port, **settings)
        argv = [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "daemon", "run", "gh-webhook"]
        process = subprocess.Popen(argv, cwd=env.cwd, env=env.env, stderr=subprocess.PIPE, text=True)
        server = Server(env, port, process)
        servers.append(server)
        wait_for(lambda: _healthy(server.url) or process.poll() is not None)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        return server

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=15) == 0  # graceful shutdown, every time
        assert not runlock.is_held(env.root / "gh-webhook.pid")


@pytest.fixture
def server(start_server: Callable[..., Server]) -> Server:
    return start_server()


def raw_exchange(port: int, data: bytes, *, pause_after: float = 0.0, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it (or ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if pause_after:
            time.sleep(pause_after)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(response: bytes) -> int | None:
    """The status code of the first response in ``response`` (None when the server sent nothing)."""
    if not response:
        return None
    return int(response.split(b" ", 2)[1])


# ---------------------------------------------------------------------------------------------- routes


def test_health_route(server: Server) -> None:
    response = httpx.get(f"{server.url}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert httpx.head(f"{server.url}/health").status_code == 200
    started = wait_for(lambda: [record for record in server.env.events() if record["event"] == "server.started"])
    assert started[0]["port"] == server.port and "/echo" in started[0]["routes"]
    assert (started[0]["path"], started[0]["routing"], started[0]["verifying_signatures"]) == (
        "/gh-webhook",
        False,
        True,
    )


def test_unknown_path_is_404(server: Server) -> None:
    response = httpx.post(f"{server.url}/nope", content=b"{}")
    assert response.status_code == 404
    assert response.json() == {"status": "not found"}
    assert server.rejected()[-1]["status"] == 404
    assert server.rejected()[-1]["path"] == "/nope"


def test_plugin_route_is_reached(server: Server) -> None:
    response = httpx.post(f"{server.url}/echo", content=b"hello", headers={"X-Test-Event": "ping"})
    assert response.status_code == 202
    assert response.json() == {"received": 5, "event": "ping"}


def test_a_trailing_slash_reaches_the_same_route_without_a_redirect(server: Server) -> None:
    response = httpx.post(f"{server.url}/echo/", content=b"hi", follow_redirects=False)
    assert response.status_code == 202 and response.json()["received"] == 2


def test_wrong_method_on_a_route_is_405(server: Server) -> None:
    response = httpx.get(f"{server.url}/echo")
    assert response.status_code == 405
    assert response.json() == {"status": "method not allowed"}


def test_body_over_the_cap_is_413(server: Server) -> None:
    assert httpx.post(f"{server.url}/echo", content=b"x" * CAP).status_code == 202
    response = httpx.post(f"{server.url}/echo", content=b"x" * (CAP + 1))
    assert response.status_code == 413
    assert server.rejected()[-1]["status"] == 413
    assert _healthy(server.url)


def test_post_without_a_length_is_411_and_a_bad_length_is_400(server: Server) -> None:
    no_length = raw_exchange(server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_of(no_length) == 411
    chunked = raw_exchange(
        server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    assert status_of(chunked) == 411
    bad_length = raw_exchange(server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    assert status_of(bad_length) == 400


def test_keep_alive_serves_several_requests_on_one_connection(server: Server) -> None:
    local_ports = set()
    with httpx.Client(base_url=server.url, limits=httpx.Limits(max_connections=1)) as client:
        for _ in range(3):
            response = client.get("/health")
            assert response.status_code == 200
            assert response.headers.get("connection", "keep-alive").lower() != "close"
            local_ports.add(response.extensions["network_stream"].get_extra_info("socket").getsockname()[1])
        assert client.post("/echo", content=b"abc").json()["received"] == 3
    assert len(local_ports) == 1


def test_keep_alive_requests_do_not_wait_for_delayed_acks(server: Server) -> None:
    # With Nagle's algorithm on, each response's body waits out the client's delayed ACK: ≈40 ms a request.
    with httpx.Client(base_url=server.url) as client:
        client.get("/health")
        timings = []
        for _ in range(20):
            began = time.perf_counter()
            assert client.post("/echo", content=b"x" * 100).status_code == 202
            timings.append(time.perf_counter() - began)
    assert sorted(timings)[10] < 0.030


def test_a_stalled_body_is_408(server: Server) -> None:
    began = time.monotonic()
    response = raw_exchange(server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
    assert status_of(response) == 408
    assert time.monotonic() - began < 3
    assert server.rejected()[-1]["status"] == 408


MALFORMED = {
    "garbage": b"GARBAGE\r\n\r\n",
    "header-without-colon": b"GET /health HTTP/1.1\r\nHost x\r\n\r\n",
    "http11-without-host": b"GET /health HTTP/1.1\r\n\r\n",
    "negative-length": b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    "two-lengths": b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "tls-hello": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),
    "huge-header": b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
    "bad-version": b"GET /health HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n",
    "nul-in-path": b"GET /he\x00alth HTTP/1.1\r\nHost: x\r\n\r\n",
    "bad-json-to-route": b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 3\r\n\r\n{x:",
}


def test_malformed_requests_never_get_a_5xx(server: Server) -> None:
    for name, payload in MALFORMED.items():
        status = status_of(raw_exchange(server.port, payload))
        # a refusal, or (an oversized header, an odd version, a body only the ingress reads) a tolerant answer
        assert status is None or status < 500, name
        assert _healthy(server.url), name


def test_an_ingress_bug_is_a_500_and_the_server_carries_on(server: Server) -> None:
    response = httpx.post(f"{server.url}/echo", content=b"{}", headers={"X-Fail": "raise"})
    assert response.status_code == 500
    assert server.rejected()[-1]["error"] == "RuntimeError: echo ingress bug"
    assert _healthy(server.url)


def test_concurrency_over_the_limit_is_503(start_server: Callable[..., Server]) -> None:
    server = start_server(maxConcurrency=2)
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    try:
        time.sleep(0.2)  # let the server register both connections
        with httpx.Client() as client:
            assert client.get(f"{server.url}/health").status_code == 503
    finally:
        for sock in idle:
            sock.close()
    wait_for(lambda: _healthy(server.url))


def test_sigterm_shuts_down_gracefully(server: Server) -> None:
    with httpx.Client(base_url=server.url) as client:  # an idle keep-alive connection must not hold it up
        assert client.get("/health").status_code == 200
        began = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=10) == 0
    assert time.monotonic() - began < 3
    names = [record["event"] for record in server.env.events()]
    assert names.index("server.stopped") < names.index("daemon.stopped")
    assert not (server.env.root / "gh-webhook.pid").exists()


def test_once_starts_listening_then_stops(env: LoopEnv) -> None:
    port = free_port()
    write_server_config(env, port)
    result = env.run("daemon", "run", "gh-webhook", "--once")
    assert result.returncode == 0, result.stderr
    events = [record for record in env.events() if record["event"].startswith("server.")]
    assert [record["event"] for record in events] == ["server.started", "server.stopped"]
    assert events[0]["port"] == port
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)


def test_server_events_carry_no_secret(server: Server) -> None:
    httpx.post(f"{server.url}/echo", content=b"x" * (CAP + 10))
    httpx.get(f"{server.url}/nope")
    text = (server.env.root / "logs" / "events.jsonl").read_text()
    assert "test-secret" not in text
    assert all(json.loads(line)["source"] == "gh-webhook" for line in text.splitlines())


# ------------------------------------------------------------------------------- hostile clients (issue 16)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def post_echo(port: int) -> int | None:
    request = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
    return status_of(raw_exchange(port, request))


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (b"".join(b"X-H-%d: v\r\n" % i for i in range(150)), "too many request headers"),
        (b"X-Big: " + b"a" * (70 * 1024) + b"\r\n", "request head too large"),
    ],
    ids=["150-headers", "70-KiB-header"],
)
def test_issue_16_an_oversized_request_head_gets_431_and_is_logged(server: Server, head: bytes, reason: str) -> None:
    response = raw_exchange(server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\n" + head + b"Content-Length: 0\r\n\r\n")
    assert status_of(response) == 431
    assert [r for r in server.rejected() if r["status"] == 431 and r["reason"] == reason]
    assert post_echo(server.port) == 202  # and the server serves on


def test_issue_16_endless_header_lines_are_cut_off_and_the_receivers_memory_stays_flat(server: Server) -> None:
    """Item 1: three connections sending header lines without end; each is closed early with a 431."""
    before = rss_kib(server.process.pid)
    sent = []
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
            total = 0
            try:
                while total < 64 * 1024 * 1024:  # the server must cut it off long before
                    sock.sendall(b"X-Flood-%d: %s\r\n" % (total, b"v" * 1000))
                    total += 1010
            except (BrokenPipeError, ConnectionResetError):
                pass
            sent.append(total)
    assert max(sent) < 2 * 1024 * 1024, sent
    assert rss_kib(server.process.pid) - before < 20 * 1024  # KiB: flat, not gigabytes
    assert len([r for r in server.rejected() if r["status"] == 431]) == 3
    assert post_echo(server.port) == 202


def test_issue_16_silent_and_slow_head_connections_are_closed_and_never_starve_a_delivery(server: Server) -> None:
    """Item 2: 70 connections from one peer that send nothing (and one that sends a header every second) hold
    at most half the slots and are closed after the head timeout; a delivery from elsewhere is served at once."""
    idle = []
    for _ in range(70):
        sock = socket.socket()
        sock.bind(("127.0.0.2", 0))  # another address on loopback: another peer
        sock.settimeout(10)
        sock.connect(("127.0.0.1", server.port))
        idle.append(sock)
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    slow.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
    try:
        started = time.monotonic()
        assert post_echo(server.port) == 202  # not a 503: idle sockets from one peer never take every slot
        assert time.monotonic() - started < 2
        wait_for(
            lambda: len([r for r in server.rejected() if r["reason"] == "too many connections from one peer"]) >= 38
        )
        for _ in range(3):
            slow.sendall(b"X-Slow: 1\r\n")
            time.sleep(1)
        answers = [status_of(sock.recv(4096)) for sock in idle]
        assert answers.count(503) == 38 and answers.count(408) == 32, answers
        assert status_of(slow.recv(4096)) == 408
        reasons = {r["reason"] for r in server.rejected()}
        assert {"idle connection", "request head timeout", "too many connections from one peer"} <= reasons
    finally:
        for sock in [*idle, slow]:
            sock.close()


def test_issue_16_a_request_over_the_concurrency_limit_gets_503_and_the_refusal_is_logged(
    start_server: Callable[..., Server],
) -> None:
    """uvicorn's own 503 for ``maxConcurrency`` was silent; it is a ``server.rejected`` line now."""
    server = start_server(maxConcurrency=2)
    held = []
    for address in ("127.0.0.2", "127.0.0.3"):  # two peers, one connection each (the per-peer cap is 1 here)
        sock = socket.socket()
        sock.bind((address, 0))
        sock.connect(("127.0.0.1", server.port))
        held.append(sock)
    try:
        wait_for(lambda: status_of(raw_exchange(server.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")) == 503)
        assert [r for r in server.rejected() if r["status"] == 503 and r["reason"] == "concurrency limit"]
    finally:
        for sock in held:
            sock.close()
