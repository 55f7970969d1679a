"""The browser terminal's WebSocket, driven by the ``websockets`` client against the real control plane: who may
attach, what a viewer's and an operator's bytes do to the real tmux pane and the fake harness in it, and that
nothing is left behind (no tmux client, no secret in the attach client's environment)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from gh_world import REF, TARGET
from web_world import WebWorld
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from the_loop.testing import wait_for

PROMPT = b"fake-harness>"
PATH = f"/api/v1/work-items/{quote(REF, safe='')}/terminal"


def ws_url(world: WebWorld, path: str = PATH) -> str:
    return f"ws://127.0.0.1:{world.port}{path}"


@contextmanager
def terminal(
    world: WebWorld, *, token: str | None = None, cookie: str | None = None, origin: str | None = None, path: str = PATH
) -> Iterator[ClientConnection]:
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if cookie is not None:
        headers["Cookie"] = f"the_loop_session={cookie}"
    sent = Origin(origin) if origin is not None else None
    with connect(ws_url(world, path), additional_headers=headers, origin=sent, open_timeout=10) as socket:
        yield socket


def refused(world: WebWorld, **how: Any) -> int:
    """The HTTP status the handshake was answered with (the test fails if it was accepted)."""
    with pytest.raises(InvalidStatus) as caught, terminal(world, **how):
        pass
    return caught.value.response.status_code


def cookie_of(world: WebWorld, token: str) -> str:
    """A browser's login: the session cookie ``POST /login`` sets."""
    response = httpx.post(f"{world.url}/login", json={"token": token}, timeout=10)
    assert response.status_code == 200, response.text
    return response.cookies["the_loop_session"]


def read_until(socket: ClientConnection, wanted: bytes, timeout: float = 10) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{wanted!r} not on the terminal within {timeout}s; it showed {seen[-400:]!r}"
        try:
            message = socket.recv(timeout=left)
        except TimeoutError:
            continue
        assert isinstance(message, bytes), f"the server sent text: {message!r}"
        seen += message
    return seen


def drain(socket: ClientConnection, seconds: float) -> bytes:
    """Everything the terminal shows for ``seconds``."""
    seen = b""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = socket.recv(timeout=left)
        except TimeoutError:
            break
        seen += message if isinstance(message, bytes) else b""
    return seen


def clients(world: WebWorld, fmt: str = "#{client_pid}") -> list[str]:
    return world.gh.tmux("list-clients", "-F", fmt).stdout.split()


def pane(world: WebWorld) -> str:
    return world.gh.tmux("capture-pane", "-p", "-t", f"={TARGET}:").stdout


def environ(pid: str) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode(errors="replace").partition("=")[::2] for entry in raw if entry)


@pytest.fixture
def world(web_world: Any) -> WebWorld:
    made: WebWorld = web_world()
    made.gh.start_work()
    return made


def test_no_credential_and_a_wrong_one_are_refused(web_world: Any) -> None:
    world = web_world()  # no session needed: a credential is asked for before anything else
    assert refused(world) == 401
    assert refused(world, token="tl_not-a-token") == 401
    assert refused(world, cookie="not-a-login", origin=world.url) == 401
    assert clients(world) == []
    assert {e["reason"] for e in world.gh.events("web.refused")} == {"unauthenticated"}


def test_a_login_cookie_from_another_origin_is_refused_and_from_its_own_attaches(world: WebWorld) -> None:
    cookie = cookie_of(world, world.viewer)
    assert refused(world, cookie=cookie, origin="http://evil.example") == 403
    assert refused(world, cookie=cookie) == 403  # a cookie with no Origin at all: not a page of this service
    assert clients(world) == []
    with terminal(world, cookie=cookie, origin=world.url) as socket:
        read_until(socket, PROMPT)
    refusals = world.gh.events("web.refused")
    assert [(e["status"], e["reason"], e["principal"]) for e in refusals] == [(403, "cross-origin", "viewer")] * 2


def test_a_bearer_token_needs_no_origin_but_one_it_sends_must_be_this_service(world: WebWorld) -> None:
    assert refused(world, token=world.operator, origin="http://evil.example") == 403
    with terminal(world, token=world.operator) as socket:
        read_until(socket, PROMPT)


def test_an_untracked_item_or_one_without_a_session_is_not_found(world: WebWorld) -> None:
    other = "/api/v1/work-items/" + quote("github:octo/repo#99", safe="") + "/terminal"
    assert refused(world, token=world.viewer, path=other) == 404
    world.gh.tmux("kill-session", "-t", f"={TARGET}")  # recorded, but tmux no longer has it
    assert refused(world, token=world.viewer) == 404


def test_a_viewers_bytes_never_reach_the_pane(world: WebWorld) -> None:
    harness = world.gh.harness()
    seen = len(harness.records())
    with terminal(world, token=world.viewer) as socket:
        read_until(socket, PROMPT)
        assert clients(world, "#{client_readonly}") == ["1"]  # tmux attach -r
        socket.send(b"viewer typed this\r")
        socket.send(b"\x1b[200~a pasted line\x1b[201~\r")
        shown = drain(socket, 1.0)
    assert harness.records()[seen:] == []
    assert b"viewer typed" not in shown and "viewer typed" not in pane(world)


def test_an_operators_bytes_reach_the_harness_and_resizes_reach_tmux(world: WebWorld) -> None:
    harness = world.gh.harness()
    submitted = len(harness.submitted())
    with terminal(world, token=world.operator) as socket:
        read_until(socket, PROMPT)
        assert clients(world, "#{client_readonly}") == ["0"]
        socket.send(b"operator typed this\r")
        assert harness.wait_for_submitted(submitted + 1)[-1] == "operator typed this"
        read_until(socket, b"[submitted 19 chars]")
        socket.send(json.dumps({"type": "resize", "cols": 101, "rows": 31}))
        wait_for(lambda: clients(world, "#{client_width}x#{client_height}") == ["101x31"], timeout=5)
        socket.send(json.dumps({"type": "resize", "cols": 100_000, "rows": 0}))  # clamped to 1..500
        wait_for(lambda: clients(world, "#{client_width}x#{client_height}") == ["500x1"], timeout=5)
        socket.send(json.dumps({"type": "resize", "cols": "wide"}))  # ignored, the socket stays up
        socket.send(b"\r")
        assert harness.wait_for_submitted(submitted + 2)[-1] == ""


def closed_events(world: WebWorld, count: int) -> list[dict[str, Any]]:
    """The web.terminal_closed records once there are ``count`` (each is said once its client was reaped)."""

    def found() -> list[dict[str, Any]] | None:
        records = world.gh.events("web.terminal_closed")
        return records if len(records) >= count else None

    return wait_for(found, timeout=5)


def test_closing_the_socket_ends_the_attach_client_and_never_the_session(world: WebWorld) -> None:
    with terminal(world, token=world.operator) as socket:
        read_until(socket, PROMPT)
        [pid] = clients(world)
    [closed] = closed_events(world, 1)
    assert not Path(f"/proc/{pid}").exists()
    assert clients(world) == []
    assert world.gh.tmux("has-session", "-t", f"={TARGET}").returncode == 0  # the agent's session lives on
    assert world.gh.harness().records("exit") == []
    [opened] = world.gh.events("web.terminal_opened")
    assert (opened["work_item"], opened["principal"], opened["read_only"]) == (REF, "operator", False)
    assert closed["seconds"] >= 0 and closed["work_item"] == REF

    with terminal(world, token=world.viewer) as socket:  # a browser that vanishes without a close frame
        read_until(socket, PROMPT)
        [pid] = clients(world)
        socket.socket.close()
    closed_events(world, 2)
    assert not Path(f"/proc/{pid}").exists() and clients(world) == []
    assert world.gh.tmux("has-session", "-t", f"={TARGET}").returncode == 0


def test_the_socket_closes_when_the_tmux_session_ends(world: WebWorld) -> None:
    with terminal(world, token=world.viewer) as socket:
        read_until(socket, PROMPT)
        world.gh.tmux("kill-session", "-t", f"={TARGET}")  # the agent's session ends under the watcher
        with pytest.raises(ConnectionClosed) as caught:
            while True:
                socket.recv(timeout=10)
    assert caught.value.rcvd is not None and caught.value.rcvd.code == 1000
    closed_events(world, 1)


def test_the_attach_client_runs_without_the_services_secrets(world: WebWorld) -> None:
    service = environ(str(world.process.pid))
    assert "GH_TOKEN" in service and "THE_LOOP_GH_WEBHOOK_SECRET" in service  # what there was to strip
    with terminal(world, token=world.viewer) as socket:
        read_until(socket, PROMPT)
        [pid] = clients(world)
        env = environ(pid)
    assert env["TERM"] == "xterm-256color"
    assert not [name for name in env if name in ("GH_TOKEN", "GITHUB_TOKEN") or name.endswith(("_TOKEN", "_SECRET"))]
    assert env.get("HOME") == service["HOME"]  # the rest of the environment is kept


def test_a_frame_over_64_kib_closes_the_socket(world: WebWorld) -> None:
    harness = world.gh.harness()
    seen = len(harness.records())
    with terminal(world, token=world.operator) as socket:
        read_until(socket, PROMPT)
        socket.send(b"x" * (64 * 1024 + 1))
        with pytest.raises(ConnectionClosed) as caught:
            while True:
                socket.recv(timeout=10)
    assert caught.value.rcvd is not None and caught.value.rcvd.code == 1009
    assert harness.records()[seen:] == []
    wait_for(lambda: clients(world) == [], timeout=5)


def test_terminals_count_against_the_live_stream_cap(world: WebWorld) -> None:
    world.env.edit_config(lambda config: config.update(web={"maxStreams": 1}))
    world.close()
    world.start()
    with terminal(world, token=world.viewer) as socket:
        read_until(socket, PROMPT)
        assert refused(world, token=world.viewer) == 503
    wait_for(lambda: world.gh.events("web.terminal_closed"), timeout=5)  # said once the place was given back
    with terminal(world, token=world.viewer) as socket:
        read_until(socket, PROMPT)
