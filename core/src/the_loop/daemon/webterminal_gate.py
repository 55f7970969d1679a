"""The web terminal's gate: the only way in to ttyd, which listens on a Unix socket in a private directory.

The gate listens on ``routing.webTerminal.host:port`` and passes a request on to ttyd only with this start's
credential: the login link (``/?token=<credential>``) sets it as an ``HttpOnly; SameSite=Strict`` cookie and every
later request must carry it. A WebSocket upgrade must also come with an ``Origin`` naming the gate itself, so a
web page the operator happens to open elsewhere can neither read the terminal nor type into it. ttyd (started with
``-H``) trusts the header the gate sets; whatever a client sent under that name is dropped first.

The credential exists only in this process: the operator gets the login link from ``the-loop status`` or
``the-loop sessions attach --web``, which ask the gate over its control socket (in the same 0700 directory). Every
refused request is logged as ``webterminal.refused`` with its reason, never with the credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import socket
import threading
from collections.abc import Callable
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

__all__ = ["AUTH_HEADER", "COOKIE", "Gate", "ask_login"]

AUTH_HEADER = "X-The-Loop-Operator"
COOKIE = "the_loop_terminal"
MAX_HEAD_BYTES = 16 * 1024
HEAD_TIMEOUT_SECONDS = 5.0
MAX_CONNECTIONS = 64  # a browser terminal opens a handful; more is somebody holding sockets open
CHUNK = 64 * 1024


class Gate:
    """The authenticating reverse proxy in front of ttyd, on its own event loop in a daemon thread."""

    def __init__(
        self,
        host: str,
        port: int,
        upstream: Path,
        control: Path,
        token: str,
        refused: Callable[[str, str], None] = lambda reason, peer: None,
    ) -> None:
        self.host, self.port, self.upstream, self.control = host, port, upstream, control
        self._token = token
        self._refused = refused
        self._open = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.AbstractServer] = []

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    @property
    def login_url(self) -> str:
        return f"{self.url}?token={self._token}"

    # ------------------------------------------------------------------------------------------------ life

    def start(self) -> None:
        """Listen on the port and the control socket; raises OSError when either cannot be bound."""
        loop = asyncio.new_event_loop()
        ready: list[BaseException | None] = []
        started = threading.Event()

        async def listen() -> None:
            try:
                self._servers = [
                    await asyncio.start_server(
                        self._client, self.host, self.port, reuse_address=True, limit=MAX_HEAD_BYTES
                    ),
                    await asyncio.start_unix_server(self._answer_control, str(self.control)),
                ]
                os.chmod(self.control, 0o600)
                ready.append(None)
            except BaseException as exc:
                ready.append(exc)
            started.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(listen())
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="webterminal-gate", daemon=True)
        self._thread.start()
        started.wait(10)
        if ready and ready[0] is not None:
            self.stop()
            raise ready[0]

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def close() -> None:
            for server in self._servers:
                server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(close(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        with contextlib.suppress(FileNotFoundError):
            self.control.unlink()

    # ------------------------------------------------------------------------------------------- requests

    async def _answer_control(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write((json.dumps({"url": self.url, "login": self.login_url}) + "\n").encode())
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str((writer.get_extra_info("peername") or ("?",))[0])
        if self._open >= MAX_CONNECTIONS:
            self._refused("too-many-connections", peer)
            writer.close()
            return
        self._open += 1
        try:
            await self._serve(reader, writer, peer)
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._open -= 1
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_SECONDS)
        except TimeoutError:
            return await self._refuse(writer, peer, 408, "head-timeout")
        except asyncio.LimitOverrunError:
            return await self._refuse(writer, peer, 431, "head-too-large")
        request_line, headers = _parse(head)
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return await self._refuse(writer, peer, 400, "bad-request")
        method, target, version = parts
        query = parse_qs(urlsplit(target).query)
        if "token" in query:
            if not self._valid(query["token"][0]):
                return await self._refuse(writer, peer, 401, "bad-credential")
            cookie = f"{COOKIE}={self._token}; HttpOnly; SameSite=Strict; Path=/"
            return await _respond(writer, 303, "", {"Location": "/", "Set-Cookie": cookie})
        if not self._valid(_cookie(headers)):
            return await self._refuse(writer, peer, 401, "no-credential")
        upgrade = headers.get("upgrade", "").lower() == "websocket"
        if upgrade and not _same_origin(headers):
            return await self._refuse(writer, peer, 403, "cross-origin")
        await self._forward(reader, writer, method, target, version, headers, upgrade)

    def _valid(self, offered: str) -> bool:
        return bool(offered) and hmac.compare_digest(offered.encode(), self._token.encode())

    async def _refuse(self, writer: asyncio.StreamWriter, peer: str, status: int, reason: str) -> None:
        self._refused(reason, peer)
        text = "open the web terminal with its link: the-loop sessions attach --web\n" if status == 401 else ""
        await _respond(writer, status, text or f"{reason}\n", {})

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: str,
        target: str,
        version: str,
        headers: dict[str, str],
        upgrade: bool,
    ) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(self.upstream))
        kept = {k: v for k, v in headers.items() if k not in (AUTH_HEADER.lower(), "cookie", "connection")}
        kept[AUTH_HEADER.lower()] = "operator"
        kept["connection"] = headers.get("connection", "Upgrade") if upgrade else "close"  # one request each
        lines = [f"{method} {target} {version}", *(f"{k}: {v}" for k, v in kept.items()), "", ""]
        up_writer.write("\r\n".join(lines).encode("latin-1"))
        await up_writer.drain()

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while chunk := await source.read(CHUNK):
                    sink.write(chunk)
                    await sink.drain()
            with contextlib.suppress(OSError):
                sink.write_eof() if sink.can_write_eof() else sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        up_writer.close()


def _parse(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _cookie(headers: dict[str, str]) -> str:
    jar: SimpleCookie = SimpleCookie()
    with contextlib.suppress(Exception):
        jar.load(headers.get("cookie", ""))
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else ""


def _same_origin(headers: dict[str, str]) -> bool:
    origin, host = headers.get("origin", ""), headers.get("host", "")
    return bool(host) and urlsplit(origin).netloc.lower() == host.lower()


async def _respond(writer: asyncio.StreamWriter, status: int, body: str, extra: dict[str, str]) -> None:
    reasons = {303: "See Other", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 408: "Request Timeout"}
    data = body.encode()
    head = [f"HTTP/1.1 {status} {reasons.get(status, 'Request Header Fields Too Large')}"]
    head += [f"{k}: {v}" for k, v in {**extra, "Content-Length": str(len(data)), "Connection": "close"}.items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
    with contextlib.suppress(OSError):
        await writer.drain()


def ask_login(control: Path, timeout: float = 2.0) -> dict[str, str] | None:
    """The running gate's ``{"url", "login"}``, asked over its control socket; None when no gate answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(timeout)
            client.connect(str(control))
            data = b""
            while chunk := client.recv(4096):
                data += chunk
    except OSError:
        return None
    try:
        answer = json.loads(data)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None
