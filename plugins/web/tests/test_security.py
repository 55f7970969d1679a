"""The control plane fails closed: every route of the app without a credential is 401 (enumerated from the app, so
a new route cannot be forgotten), a viewer cannot act, a browser's state change needs its CSRF token and its own
Origin, a cross-origin WebSocket is refused, a revoked token is refused at once, failed logins are rate-limited, a
token file that does not parse lets nobody in and is moved aside, and no credential ever reaches the event log."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
import websockets
import websockets.exceptions
from starlette.routing import Route, WebSocketRoute
from web_world import ITEM, WebWorld

import the_loop_web.plugin
from the_loop.config import load_config
from the_loop_web.app import ACTIONS, build_app

PUBLIC = {("GET", "/api/v1/health"), ("GET", "/login"), ("POST", "/login")}
PUBLIC_FILES = ("dashboard.js", "dashboard.css")  # the login page's own
SAMPLES = {"rest": "github%3Aocto%2Frepo%2315", "name": "xterm.js"}


def app_routes(world: WebWorld, plugin_host: Any) -> list[Any]:
    """The routes of the app the service runs, built from the same config."""
    plugin_host.register(the_loop_web.plugin, "web")
    return list(build_app(load_config(world.env.config_path, plugin_host)).routes)


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda match: SAMPLES[match[1]], path)


def login(world: WebWorld, token: str) -> tuple[httpx.Client, str]:
    """A browser-like client logged in with ``token`` (the cookie kept) and its CSRF token."""
    client = httpx.Client(base_url=world.url, timeout=30)
    answer = client.post("/login", json={"token": token})
    assert answer.status_code == 200, answer.text
    return client, answer.json()["csrf"]


def test_every_route_without_a_credential_is_401_but_health_and_the_login_page(
    web_world: Any, plugin_host: Any
) -> None:
    world = web_world()
    world.gh.start_work()
    routes = app_routes(world, plugin_host)
    http = [route for route in routes if isinstance(route, Route)]
    sockets = [route for route in routes if isinstance(route, WebSocketRoute)]
    assert len(http) >= 18 and sockets  # the table's routes and the terminal
    checked = 0
    for route in http:
        for method in sorted(route.methods - {"HEAD"}):
            path = concrete(route.path)
            if (method, route.path) in PUBLIC:
                continue
            answer = world.api(method, path, token=None, json={} if method == "POST" else None)
            assert answer.status_code == 401, (method, path, answer.status_code, answer.text)
            bogus = world.api(method, path, token="tl_not-a-token", json={} if method == "POST" else None)
            assert bogus.status_code == 401, (method, path)
            checked += 1
    assert checked >= 18
    assert world.api("GET", "/api/v1/health", token=None).status_code == 200
    assert world.api("GET", "/login", token=None).status_code == 200
    for name in PUBLIC_FILES:
        assert world.api("GET", f"/static/{name}", token=None).status_code == 200
    assert world.api("GET", "/static/xterm.js", token=None).status_code == 401
    assert world.api("GET", "/static/..%2Fapp.py").status_code == 404
    # A path that is no route says nothing more to a stranger.
    assert world.api("GET", "/api/v1/nothing-here", token=None).status_code == 401
    assert world.api("GET", "/api/v1/nothing-here").status_code == 404

    async def refused(path: str) -> None:
        with pytest.raises(websockets.exceptions.WebSocketException):
            async with websockets.connect(f"ws://127.0.0.1:{world.port}{path}") as socket:
                await socket.recv()

    for route in sockets:
        asyncio.run(refused(concrete(route.path)))


def test_a_viewer_can_read_but_not_act(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    assert world.api("GET", ITEM, token=world.viewer).status_code == 200
    for action in ACTIONS:
        answer = world.api("POST", f"{ITEM}/{action}", token=world.viewer, json={"text": "hi", "question": "q"})
        assert answer.status_code == 403, action
    assert world.gh.own()["status"] == "active"
    assert [e["reason"] for e in world.gh.events("web.refused")][-len(ACTIONS) :] == ["viewer role"] * len(ACTIONS)


def test_a_browser_state_change_needs_its_csrf_token_and_its_own_origin(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    client, csrf = login(world, world.operator)
    cookie = client.cookies.jar
    set_cookie = [c for c in cookie if c.name == "the_loop_session"]
    assert set_cookie and set_cookie[0].has_nonstandard_attr("HttpOnly")
    body = {"comment": False}
    assert client.post(f"{ITEM}/pause", json=body).status_code == 403  # no CSRF token
    assert client.post(f"{ITEM}/pause", json=body, headers={"x-csrf-token": "forged"}).status_code == 403
    other = {"x-csrf-token": csrf, "origin": "https://evil.example"}
    assert client.post(f"{ITEM}/pause", json=body, headers=other).status_code == 403
    assert world.gh.own()["status"] == "active"
    same = {"x-csrf-token": csrf, "origin": world.url}
    assert client.post(f"{ITEM}/pause", json=body, headers=same).status_code == 200
    assert world.gh.own()["status"] == "paused"
    reasons = [e["reason"] for e in world.gh.events("web.refused")]
    assert reasons.count("csrf") == 2 and reasons.count("cross-origin") == 1
    # A login posted from another site's page is refused before any token is looked at.
    assert (
        httpx.post(
            f"{world.url}/login", json={"token": world.operator}, headers={"origin": "https://evil.example"}
        ).status_code
        == 403
    )


def test_the_login_cookie_is_httponly_strict_and_logout_ends_it(web_world: Any) -> None:
    world = web_world()
    answer = httpx.post(f"{world.url}/login", data={"token": world.viewer}, timeout=30)
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    header = answer.headers["set-cookie"].lower()
    assert "httponly" in header and "samesite=strict" in header and "path=/" in header
    assert "secure" not in header  # served without TLS: a Secure cookie would never come back
    client, csrf = login(world, world.viewer)
    assert client.get("/api/v1/work-items").status_code == 200
    assert client.post("/logout", headers={"x-csrf-token": csrf}).status_code == 200
    assert client.get("/api/v1/work-items").status_code == 401


def test_a_cross_origin_websocket_is_refused(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    client, _csrf = login(world, world.operator)
    cookie = "; ".join(f"{c.name}={c.value}" for c in client.cookies.jar)
    url = f"ws://127.0.0.1:{world.port}{ITEM}/terminal"

    async def attempt(origin: str) -> str:
        try:
            async with websockets.connect(url, additional_headers={"cookie": cookie}, origin=origin) as socket:
                await asyncio.wait_for(socket.recv(), 5)
                return "open"
        except websockets.exceptions.InvalidStatus as exc:
            return f"refused {exc.response.status_code}"
        except websockets.exceptions.ConnectionClosed as exc:
            return f"closed {exc.rcvd.code if exc.rcvd else ''}"

    assert asyncio.run(attempt("https://evil.example")) != "open"
    assert asyncio.run(attempt(world.url)) == "open"


def test_a_revoked_token_is_refused_at_once_with_its_logins(web_world: Any) -> None:
    world = web_world()
    client, _csrf = login(world, world.viewer)
    assert world.api("GET", "/api/v1/work-items", token=world.viewer).status_code == 200
    revoked = world.env.run("web", "token", "revoke", "viewer")
    assert revoked.returncode == 0 and revoked.stdout.strip() == "revoked viewer"
    assert world.api("GET", "/api/v1/work-items", token=world.viewer).status_code == 401
    assert client.get("/api/v1/work-items").status_code == 401
    assert world.api("GET", "/api/v1/work-items", token=world.operator).status_code == 200
    listed = world.env.run("web", "token", "list", "--format", "json")
    assert [row["name"] for row in json.loads(listed.stdout)] == ["operator"]
    assert world.env.run("web", "token", "revoke", "viewer").returncode == 1


def test_fifty_wrong_logins_are_rate_limited_and_logged_without_the_token(web_world: Any) -> None:
    world = web_world()
    statuses = []
    for attempt in range(50):
        answer = httpx.post(f"{world.url}/login", json={"token": f"tl_wrong-{attempt}"}, timeout=30)
        statuses.append(answer.status_code)
    assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}
    limited = httpx.post(f"{world.url}/login", json={"token": world.operator}, timeout=30)
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1  # even the right one waits
    failed = world.gh.events("web.login_failed")
    assert len(failed) == 10 and {e["reason"] for e in failed} == {"unknown token"}
    assert world.gh.events("web.login_limited")
    assert "tl_wrong" not in (world.env.root / "logs" / "events.jsonl").read_text()


def test_no_token_or_cookie_value_reaches_the_event_log_or_the_service_log(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    client, csrf = login(world, world.operator)
    link = world.env.run("web", "open").stdout.strip()
    secret = link.split("#link=", 1)[1]
    assert httpx.post(f"{world.url}/login", json={"link": secret}, timeout=30).status_code == 200
    assert httpx.post(f"{world.url}/login", json={"link": secret}, timeout=30).status_code == 401  # once
    client.post(f"{ITEM}/say", json={"text": "hello"}, headers={"x-csrf-token": csrf})
    world.api("GET", "/api/v1/work-items", token="tl_bogus-value")
    cookie = next(c.value for c in client.cookies.jar)
    written = (world.env.root / "logs" / "events.jsonl").read_text()
    logs = "".join(path.read_text() for path in (world.env.root / "logs").glob("*.out"))
    tokens_file = (world.env.root / "local" / "web-tokens.json").read_text()
    for value in (world.viewer, world.operator, cookie, csrf, secret, "tl_bogus-value"):
        assert value not in written and value not in logs
        assert value not in tokens_file  # only hashes are kept
    assert (world.env.root / "local" / "web-tokens.json").stat().st_mode & 0o077 == 0


def test_a_token_file_that_does_not_parse_lets_nobody_in_and_is_moved_aside(web_world: Any) -> None:
    world = web_world()
    path = world.env.root / "local" / "web-tokens.json"
    path.write_text("{not json")
    assert world.api("GET", "/api/v1/work-items", token=world.operator).status_code == 401
    listed = world.env.run("web", "token", "list")
    assert listed.returncode == 1 and "did not parse" in listed.stderr and "Traceback" not in listed.stderr
    assert not path.exists() and list(path.parent.glob("web-tokens.json.corrupt-*"))
    fresh = world.token("again", "viewer")
    assert world.api("GET", "/api/v1/work-items", token=fresh).status_code == 200
