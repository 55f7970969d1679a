"""The control plane as a service and its commands, through the real CLI: tokens are printed once and kept hashed,
the one-time link works once, `the-loop start` starts the service when `service.enabled` and `status` shows its
URL and health, and over TLS (a real certificate from a test CA) the cookie is `Secure`."""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx
import pytest
import trustme

from the_loop.testing import LoopEnv, free_port, kill_lock_holders


@pytest.fixture
def machine(loop_env: LoopEnv) -> Any:
    loop_env.write_config({"service": {"enabled": True, "port": free_port()}})
    yield loop_env
    loop_env.run("stop")
    kill_lock_holders(loop_env.root)


def test_token_create_prints_the_token_alone_once_and_keeps_only_its_hash(machine: LoopEnv) -> None:
    made = machine.run("web", "token", "create", "ci-bot", "--role", "viewer")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert made.stdout == token + "\n" and token.startswith("tl_") and len(token) >= 40
    stored = json.loads((machine.root / "local" / "web-tokens.json").read_text())
    assert stored["tokens"]["ci-bot"]["role"] == "viewer" and token not in json.dumps(stored)
    assert len(stored["tokens"]["ci-bot"]["hash"]) == 64
    again = machine.run("web", "token", "create", "ci-bot", "--role", "operator")
    assert again.returncode == 1 and "exists" in again.stderr and again.stdout == ""
    for bad in ("-rm", "a b", "x" * 65, "../up"):
        refused = machine.run("web", "token", "create", bad, "--role", "viewer")
        assert refused.returncode != 0 and "Traceback" not in refused.stderr, bad
    wrong_role = machine.run("web", "token", "create", "eve", "--role", "admin")
    assert wrong_role.returncode == 2 and "admin" in wrong_role.stderr
    listed = machine.run("web", "token", "list")
    assert listed.returncode == 0 and listed.stdout.split()[:2] == ["ci-bot", "viewer"] and token not in listed.stdout
    rows = json.loads(machine.run("web", "token", "list", "--format", "json").stdout)
    assert [(row["name"], row["role"]) for row in rows] == [("ci-bot", "viewer")]
    events = [json.loads(line) for line in (machine.root / "logs" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events if e["event"].startswith("web.")] == ["web.token_created"]


def test_start_runs_the_service_and_status_shows_its_url_and_health(machine: LoopEnv) -> None:
    machine.run("web", "token", "create", "me", "--role", "operator")
    started = machine.run("start", "service")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "service" in started.stdout and "started" in started.stdout
    port = json.loads(machine.run("config", "show", "--format", "json").stdout)["config"]["service"]["port"]
    status = machine.run("status")
    assert f"url:        http://127.0.0.1:{port} (health: ok)" in status.stdout, status.stdout
    row = next(
        r for r in json.loads(machine.run("status", "--format", "json").stdout)["services"] if r["service"] == "service"
    )
    assert row["running"] and row["health"] == "ok" and row["url"] == f"http://127.0.0.1:{port}"
    link = machine.run("web", "open")
    assert link.returncode == 0 and link.stdout.startswith(f"http://127.0.0.1:{port}/login#link=tl_")
    secret = link.stdout.strip().split("#link=", 1)[1]
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    assert client.post("/login", json={"link": secret}).json()["principal"].startswith("local:")
    assert client.get("/api/v1/work-items").status_code == 200
    assert httpx.post(f"http://127.0.0.1:{port}/login", json={"link": secret}).status_code == 401  # used up
    stopped = machine.run("stop", "service")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert "not running [enabled]" in machine.run("status").stdout


def test_over_tls_the_service_serves_https_and_its_cookie_is_secure(machine: LoopEnv) -> None:
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1", "localhost")
    cert, key = machine.tmp / "cert.pem", machine.tmp / "key.pem"
    certificate.private_key_and_cert_chain_pem.write_to_path(str(cert))
    certificate.private_key_pem.write_to_path(str(key))
    port = free_port()
    machine.write_config(
        {
            "service": {
                "enabled": True,
                "host": "0.0.0.0",
                "port": port,
                "tls": {"certFile": str(cert), "keyFile": str(key)},
            }
        }
    )
    assert machine.run("config", "validate").returncode == 0
    token = machine.run("web", "token", "create", "me", "--role", "viewer").stdout.strip()
    assert machine.run("start", "service").returncode == 0
    context = ssl.create_default_context()
    authority.configure_trust(context)
    client = httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=context, timeout=30)
    assert client.get("/api/v1/health").status_code == 200  # start waited for it
    login = client.post("/login", json={"token": token})
    assert login.status_code == 200 and "secure" in login.headers["set-cookie"].lower()
    assert client.get("/api/v1/instance").json()["url"] == f"https://0.0.0.0:{port}"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=5)  # no clear-text answer on the TLS port
    assert "(health: ok)" in machine.run("status").stdout


def test_a_bad_certificate_stops_the_start_with_the_error(machine: LoopEnv) -> None:
    cert, key = machine.tmp / "cert.pem", machine.tmp / "key.pem"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    machine.write_config(
        {"service": {"enabled": True, "port": free_port(), "tls": {"certFile": str(cert), "keyFile": str(key)}}}
    )
    started = machine.run("start", "service")
    assert started.returncode != 0
    assert "service" in started.stdout + started.stderr
    missing = machine.tmp / "gone.pem"
    machine.write_config(
        {"service": {"enabled": True, "port": free_port(), "tls": {"certFile": str(missing), "keyFile": str(key)}}}
    )
    status = machine.run("status")
    assert f"service.tls.certFile: {missing} is not a readable file" in status.stdout
