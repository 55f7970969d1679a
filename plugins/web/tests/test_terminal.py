"""The browser terminal at the WebSocket level (the ``websockets`` client against the real control plane and a
private tmux server): a viewer watches and what they send never reaches the pane, an operator's keystrokes do,
resizes are taken, the tmux client ends with the socket (the session lives on), and the client's environment
carries no secret."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import websockets
import websockets.exceptions
from gh_world import TARGET
from web_world import ITEM, WebWorld

from the_loop.testing import wait_for


async def _screen(socket: Any, wanted: str, timeout: float = 10) -> str:
    seen = b""
    deadline = asyncio.get_running_loop().time() + timeout
    while wanted.encode() not in seen:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise AssertionError(f"{wanted!r} not on the terminal: {seen[-400:]!r}")
        frame = await asyncio.wait_for(socket.recv(), left)
        seen += frame if isinstance(frame, bytes) else frame.encode()
    return seen.decode(errors="replace")


def connect(world: WebWorld, token: str) -> Any:
    url = f"ws://127.0.0.1:{world.port}{ITEM}/terminal"
    return websockets.connect(url, additional_headers={"authorization": f"Bearer {token}"}, max_size=None)


def clients(world: WebWorld) -> list[str]:
    return [line for line in world.gh.tmux("list-clients", "-F", "#{client_tty}").stdout.splitlines() if line]


def test_a_viewer_watches_but_sends_nothing_an_operator_types(web_world: Any) -> None:
    world = web_world()
    harness = world.gh.start_work()

    async def viewer() -> None:
        async with connect(world, world.viewer) as socket:
            await socket.send(json.dumps({"type": "resize", "cols": 100, "rows": 30}))
            await _screen(socket, "fake-harness>")
            await socket.send(b"viewer keys\r")
            await asyncio.sleep(1)

    asyncio.run(viewer())
    assert not any("viewer keys" in text for text in harness.submitted())

    async def operator() -> None:
        async with connect(world, world.operator) as socket:
            await _screen(socket, "fake-harness>")
            await socket.send(b"operator keys\r")
            await _screen(socket, "operator keys")

    asyncio.run(operator())
    wait_for(lambda: "operator keys" in harness.submitted(), timeout=10)
    opened = [(e["principal"], e["read_only"]) for e in world.gh.events("web.terminal_opened")]
    assert opened == [("viewer", True), ("operator", False)]
    wait_for(lambda: len(world.gh.events("web.terminal_closed")) == 2, timeout=10)  # logged as the server closes
    assert all(e["seconds"] >= 0 for e in world.gh.events("web.terminal_closed"))


def test_the_tmux_client_ends_with_the_socket_and_the_session_lives_on(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()

    async def watch() -> None:
        async with connect(world, world.viewer) as socket:
            await _screen(socket, "fake-harness>")
            assert len(clients(world)) == 1

    asyncio.run(watch())
    wait_for(lambda: clients(world) == [], timeout=10)
    assert world.gh.tmux("has-session", "-t", f"={TARGET}").returncode == 0


def test_the_attach_client_has_no_secret_in_its_environment(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    assert world.env.env.get("GH_TOKEN")  # the service itself has one

    async def watch() -> None:
        async with connect(world, world.viewer) as socket:
            await _screen(socket, "fake-harness>")
            pid = world.gh.tmux("list-clients", "-F", "#{client_pid}").stdout.split()[0]
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
            assert "GH_TOKEN" not in names and "THE_LOOP_GH_WEBHOOK_SECRET" not in names
            assert "TERM" in names

    asyncio.run(watch())


def test_a_work_item_without_a_session_is_refused(web_world: Any) -> None:
    world = web_world()

    async def attempt() -> str:
        try:
            async with connect(world, world.operator) as socket:
                await asyncio.wait_for(socket.recv(), 5)
                return "open"
        except websockets.exceptions.InvalidStatus as exc:
            return f"refused {exc.response.status_code}"

    assert asyncio.run(attempt()) == "refused 404"  # nothing spawned yet
