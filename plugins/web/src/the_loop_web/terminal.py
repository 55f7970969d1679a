"""The browser terminal: a WebSocket bridged to ``tmux attach-session`` on a pty.

``GET /api/v1/work-items/{ref}/terminal`` (a WebSocket) attaches one tmux client to the work item's own session,
read-only (``-r``) for a viewer. Binary frames carry the terminal's bytes both ways; a text frame
``{"type": "resize", "cols": N, "rows": M}`` resizes the pty. The checks come before the handshake is accepted: a
credential, for the cookie (a browser) an ``Origin`` that is this service (any ``Origin`` sent must be), a tracked
work item with a live tmux session, and a free place under ``web.maxStreams``. A refusal is an HTTP answer to the
handshake where the server can send one (401, 403, 404, 503), otherwise a close code 4000 + that status.

The tmux client runs in a session of its own with the environment's secrets removed; when either side ends, the
client (never the tmux session) is ended: SIGTERM to its process group, SIGKILL after two seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from the_loop import events, toolkit
from the_loop_web import context
from the_loop_web.auth import Caller, same_origin

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef

MAX_FRAME = 64 * 1024  # a keystroke or a paste; anything larger is refused (close 1009)
READ_CHUNK = 64 * 1024
OUT_QUEUE = 64  # chunks read from the pty and not yet sent: past this the pty is not read (backpressure)
TERM_GRACE_SECONDS = 2.0
SIZE_MIN, SIZE_MAX = 1, 500
DEFAULT_SIZE = (24, 80)  # rows, cols: until the browser says its size
SECRET_SUFFIXES = ("_TOKEN", "_SECRET", "_KEY", "_PASSWORD")
SECRET_NAMES = frozenset({"GH_TOKEN", "GITHUB_TOKEN"})
NOT_INHERITED = frozenset({"TMUX", "TMUX_PANE"})  # tmux refuses to attach from "inside" another tmux


def attach_env(base: dict[str, str], withheld: Sequence[str] = ()) -> dict[str, str]:
    """The tmux client's environment: ``base`` without any secret-looking name or one the config withholds."""
    env = {
        name: value
        for name, value in base.items()
        if not name.endswith(SECRET_SUFFIXES)
        and name not in SECRET_NAMES
        and name not in NOT_INHERITED
        and name not in withheld
    }
    env["TERM"] = "xterm-256color"
    return env


def clamp(value: Any) -> int | None:
    return max(SIZE_MIN, min(SIZE_MAX, value)) if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Target:
    tmux_target: str
    closed: bool  # a closed session is only watched, as `the-loop sessions attach` does


def _target(web: context.Web, ref: WorkItemRef) -> Target | None:
    """The work item's own session's tmux target, when it has one and tmux has it."""
    config = web.config
    record = config.registry.load(str(ref))
    own = record.own if record is not None else None
    if own is None or not own.tmux_target:
        return None
    if toolkit.runner_for(config).probe(own.tmux_target) == "absent":
        return None
    return Target(own.tmux_target, own.status == "closed")


async def _deny(websocket: WebSocket, status: int, reason: str, caller: Caller | None = None) -> None:
    """Refuse the handshake: an HTTP answer where the server supports it, else a close with 4000 + status."""
    response = context.refuse(websocket, status, reason, caller)  # logs web.refused
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(code=4000 + status, reason=reason)


async def serve(web: context.Web, websocket: WebSocket) -> None:
    caller = web.gate.caller(websocket)
    if caller is None:
        return await _deny(websocket, 401, "unauthenticated")
    # A browser sends the cookie with a WebSocket any site opens: only this service's own pages may. A program
    # with a bearer token need not send an Origin, but one that does must be this service too.
    if (caller.by_cookie or websocket.headers.get("origin")) and not same_origin(
        websocket, web.settings.allowed_origins
    ):
        return await _deny(websocket, 403, "cross-origin", caller)
    text, rest = context.item_path(websocket, context.ITEMS)
    ref = context.ref_of(text)
    if ref is None or rest != "terminal":
        return await _deny(websocket, 404, "not a work item ref (URL-encode it as one path segment)", caller)
    target = await run_in_threadpool(_target, web, ref)
    if target is None:
        return await _deny(websocket, 404, f"{ref} has no live tmux session", caller)
    if not web.open_stream():
        return await _deny(websocket, 503, "too many live streams", caller)
    read_only = target.closed or not caller.principal.can_act
    fields = {"work_item": str(ref), "principal": caller.principal.name, "read_only": read_only}
    started: float | None = None
    bridge: Bridge | None = None
    try:
        await websocket.accept()
        runner = toolkit.runner_for(web.config)
        flags = ["-r"] if read_only else []
        argv = [*runner.command_prefix, "attach-session", *flags, "-t", f"={target.tmux_target}"]
        bridge = Bridge(websocket, argv, attach_env(dict(os.environ), runner.strip_env), writable=not read_only)
        events.emit("web.terminal_opened", **fields)
        started = time.monotonic()
        await bridge.run()
    finally:
        web.close_stream()
        if started is not None:  # said once the client is gone and its place given back
            seconds = round(time.monotonic() - started, 1)
            failed = {"level": "error", "error": bridge.error} if bridge is not None and bridge.error else {}
            events.emit("web.terminal_closed", **fields, seconds=seconds, **failed)


@dataclass
class Bridge:
    """One WebSocket and one tmux client on a pty, until either ends."""

    websocket: WebSocket
    argv: list[str]
    env: dict[str, str]
    writable: bool
    master: int = -1
    process: subprocess.Popen[bytes] | None = None
    out: asyncio.Queue[bytes | None] = field(default_factory=lambda: asyncio.Queue(OUT_QUEUE))
    reading: bool = False
    eof: bool = False
    error: str = ""

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self.spawn()
        except OSError as exc:  # no tmux binary, no pty left: said on the socket and in the closing event
            self.error = f"tmux attach: {exc}"[:200]
            await self.websocket.close(code=1011, reason="the terminal could not be started")
            return
        self._read_on(loop)
        tasks = [asyncio.ensure_future(self.to_browser()), asyncio.ensure_future(self.from_browser())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._read_off(loop)
            await self.end()
            if self.websocket.application_state == WebSocketState.CONNECTED:
                with contextlib.suppress(Exception):
                    await self.websocket.close(code=1000, reason="the terminal ended")

    # ------------------------------------------------------------------------------------ the tmux client

    def spawn(self) -> None:
        master, slave = pty.openpty()
        try:
            self._winsize(master, *DEFAULT_SIZE)
            self.process = subprocess.Popen(
                self.argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,  # its own process group: ended as one, never by a signal meant for us
                env=self.env,
                close_fds=True,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        self.master = master

    @staticmethod
    def _winsize(fd: int, rows: int, cols: int) -> None:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def resize(self, rows: int, cols: int) -> None:
        self._winsize(self.master, rows, cols)
        # The client has no controlling terminal (Popen cannot give it one without preexec_fn, unsafe in a
        # threaded server), so the kernel sends it no SIGWINCH: send it ourselves, and it reads the new size.
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGWINCH)

    async def end(self) -> None:
        """End the attach client (only it: the tmux session lives on) and close the pty."""
        process = self.process
        if process is not None and process.poll() is None:
            self._signal(process, signal.SIGTERM)
            deadline = time.monotonic() + TERM_GRACE_SECONDS
            while process.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if process.poll() is None:
                self._signal(process, signal.SIGKILL)
                await run_in_threadpool(process.wait)
        if self.master >= 0:
            os.close(self.master)
            self.master = -1

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)

    # ------------------------------------------------------------------------------------ pty → browser

    def _read_on(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.reading and not self.eof and self.master >= 0:
            loop.add_reader(self.master, self._readable)
            self.reading = True

    def _read_off(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.reading:
            loop.remove_reader(self.master)
            self.reading = False

    def _readable(self) -> None:
        """Called with the reader on, so with room in the queue: it is turned off once the queue is full."""
        try:
            data = os.read(self.master, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: the client exited and the pty has no other end
            data = b""
        loop = asyncio.get_running_loop()
        if not data:
            self.eof = True
            self._read_off(loop)
            self.out.put_nowait(None)
            return
        self.out.put_nowait(data)
        if self.out.full():  # the browser is slow: stop reading until it catches up (tmux holds the rest)
            self._read_off(loop)

    async def to_browser(self) -> None:
        loop = asyncio.get_running_loop()
        while (data := await self.out.get()) is not None:
            await self.websocket.send_bytes(data)
            self._read_on(loop)

    # ------------------------------------------------------------------------------------ browser → pty

    async def from_browser(self) -> None:
        while True:
            try:
                message = await self.websocket.receive()
            except WebSocketDisconnect:
                return
            if message["type"] == "websocket.disconnect":
                return
            data, text = message.get("bytes"), message.get("text")
            if len(data or b"") > MAX_FRAME or len(text or "") > MAX_FRAME:
                await self.websocket.close(code=1009, reason="frame too large")
                return
            if data:
                if self.writable:  # a viewer's keystrokes go nowhere (and tmux -r would ignore them too)
                    await self._write(data)
            elif text:
                self._control(text)

    def _control(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            return
        if isinstance(message, dict) and message.get("type") == "resize":
            rows, cols = clamp(message.get("rows")), clamp(message.get("cols"))
            if rows is not None and cols is not None:
                self.resize(rows, cols)

    async def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.master, view) :]
            except BlockingIOError:
                await asyncio.sleep(0.01)  # the pty's input buffer is full: tmux is reading it
            except OSError:
                return
