"""A fake Slack on 127.0.0.1: the Web API methods the plugin calls, and a Socket Mode websocket server.

The Web API keeps channels of messages with increasing ``ts``, records every call (method, bearer token, params)
and takes fault scripts per method: an HTTP status (500, 429 with ``Retry-After``) or an ``ok: false`` error, for
the next N calls or until cleared. slack-sdk's real ``WebClient`` talks to it through ``apiBaseUrl``.

The Socket Mode server is a real websocket server (the ``websockets`` package): ``apps.connections.open`` hands out
its URL, it greets each client with ``hello``, sends the envelopes a test queues and records the acks.
"""

from __future__ import annotations

import itertools
import json
import queue
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlparse

BOT_USER = "UBOT0001"


@dataclass
class Fault:
    status: int = 200
    error: str = ""
    retry_after: int | None = None
    times: int | None = None  # None: until cleared


@dataclass
class Call:
    method: str
    token: str
    params: dict[str, Any]


@dataclass
class FakeSlack:
    """State and scripts of the fake. Use :func:`serve` to run it."""

    channels: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    faults: dict[str, Fault] = field(default_factory=dict)
    page_size: int = 100
    no_ts: int = 0  # the next N chat.postMessage answers are ok but carry no ts
    delays: dict[str, float] = field(default_factory=dict)  # method -> seconds to wait before answering
    socket_url: str = ""
    scopes: str = "chat:write,channels:history,groups:history,im:history,mpim:history,reactions:write,app_mentions:read"
    files: dict[str, bytes] = field(default_factory=dict)  # path under /files/ -> bytes served (bearer required)
    redirects: dict[str, str] = field(default_factory=dict)  # path under /files/ -> Location answered with a 302
    downloads: list[Call] = field(default_factory=list)  # every GET under /files/ (path as method, bearer token)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ts: itertools.count = field(default_factory=lambda: itertools.count(1))

    def next_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    def fail(
        self,
        method: str,
        status: int = 500,
        *,
        error: str = "",
        retry_after: int | None = None,
        times: int | None = None,
    ) -> None:
        self.faults[method] = Fault(status, error, retry_after, times)

    def heal(self, method: str | None = None) -> None:
        if method is None:
            self.faults.clear()
        else:
            self.faults.pop(method, None)

    def add_message(self, channel: str, *, user: str = "", text: str = "", thread_ts: str = "", **extra: Any) -> str:
        """A message someone wrote (not through the API); its ts."""
        with self.lock:
            ts = self.next_ts()
            message = {"type": "message", "ts": ts, "text": text, **extra}
            if user:
                message["user"] = user
            if thread_ts:
                message["thread_ts"] = thread_ts
            self.channels.setdefault(channel, []).append(message)
            return ts

    def download(self, path: str, token: str) -> tuple[int, dict[str, str], bytes]:
        """A file download (``url_private``): the bytes with a bot token, a redirect when scripted, else 404."""
        with self.lock:
            self.downloads.append(Call(path, token, {}))
            if path in self.redirects:
                return 302, {"Location": self.redirects[path]}, b""
            if not token.startswith("xoxb-"):
                return 403, {}, b"not authed"
            data = self.files.get(path)
            return (404, {}, b"") if data is None else (200, {"Content-Type": "application/octet-stream"}, data)

    def posts(self, method: str = "chat.postMessage") -> list[Call]:
        return [call for call in self.calls if call.method == method]

    # ------------------------------------------------------------------------------------------------ api

    def handle(self, method: str, token: str, params: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        time.sleep(self.delays.get(method, 0.0))
        with self.lock:
            self.calls.append(Call(method, token, params))
            fault = self.faults.get(method)
            if fault is not None:
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        del self.faults[method]
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                if fault.status != 200:
                    return fault.status, headers, {"ok": False, "error": fault.error or "fatal_error"}
                return 200, headers, {"ok": False, "error": fault.error}
            if not token.startswith(("xoxb-", "xapp-")):
                return 200, {}, {"ok": False, "error": "not_authed"}
            handler = getattr(self, "api_" + method.replace(".", "_"), None)
            if handler is None:
                return 200, {}, {"ok": False, "error": "unknown_method"}
            return handler(params, token)

    def api_auth_test(self, params: dict[str, Any], token: str) -> tuple[int, dict[str, str], dict[str, Any]]:
        return 200, {"x-oauth-scopes": self.scopes}, {"ok": True, "user_id": BOT_USER, "bot_id": "BBOT0001"}

    def api_chat_postMessage(self, params: dict[str, Any], token: str) -> Any:
        channel = str(params.get("channel") or "")
        if "thread_ts" in params and not params["thread_ts"]:
            return 200, {}, {"ok": False, "error": "invalid_thread_ts"}
        if self.no_ts > 0:
            self.no_ts -= 1
            return 200, {}, {"ok": True, "channel": channel}
        ts = self.next_ts()
        message = {"type": "message", "ts": ts, "text": params.get("text", ""), "user": BOT_USER, "bot_id": "BBOT0001"}
        if params.get("blocks"):
            blocks = params["blocks"]
            message["blocks"] = json.loads(blocks) if isinstance(blocks, str) else blocks
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        self.channels.setdefault(channel, []).append(message)
        return 200, {}, {"ok": True, "channel": channel, "ts": ts, "message": message}

    def api_chat_update(self, params: dict[str, Any], token: str) -> Any:
        """A posted message rewritten (a press's outcome on a picker): its text and blocks replaced."""
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        found = next((m for m in self.channels.get(channel, []) if m["ts"] == ts), None)
        if found is None:
            return 200, {}, {"ok": False, "error": "message_not_found"}
        found.update(text=params.get("text", ""), blocks=params.get("blocks") or [])
        return 200, {}, {"ok": True, "channel": channel, "ts": ts}

    def api_chat_postEphemeral(self, params: dict[str, Any], token: str) -> Any:
        return 200, {}, {"ok": True, "message_ts": self.next_ts()}

    def api_chat_getPermalink(self, params: dict[str, Any], token: str) -> Any:
        link = f"https://fake.slack.example/archives/{params.get('channel')}/p{params.get('message_ts')}"
        return 200, {}, {"ok": True, "permalink": link}

    def api_conversations_replies(self, params: dict[str, Any], token: str) -> Any:
        channel, root = str(params.get("channel")), str(params.get("ts"))
        oldest = float(params.get("oldest") or 0)
        thread = [
            m
            for m in self.channels.get(channel, [])
            if (m["ts"] == root or m.get("thread_ts") == root) and float(m["ts"]) >= oldest
        ]
        start = int(params.get("cursor") or 0)
        size = min(int(params.get("limit") or 100), self.page_size)
        page = thread[start : start + size]
        more = start + size < len(thread)
        return (
            200,
            {},
            {
                "ok": True,
                "messages": page,
                "has_more": more,
                "response_metadata": {"next_cursor": str(start + size) if more else ""},
            },
        )

    def api_conversations_history(self, params: dict[str, Any], token: str) -> Any:
        """Top-level messages (and thread roots) newest first, strictly after ``oldest``, paged by ``cursor``."""
        channel = str(params.get("channel"))
        oldest = float(params.get("oldest") or 0)
        found = [
            m
            for m in reversed(self.channels.get(channel, []))
            if (not m.get("thread_ts") or m.get("thread_ts") == m["ts"]) and float(m["ts"]) > oldest
        ]
        start = int(params.get("cursor") or 0)
        size = min(int(params.get("limit") or 100), self.page_size)
        more = start + size < len(found)
        cursor = str(start + size) if more else ""
        data = {"ok": True, "messages": found[start : start + size], "has_more": more}
        return 200, {}, {**data, "response_metadata": {"next_cursor": cursor}}

    def api_conversations_info(self, params: dict[str, Any], token: str) -> Any:
        return 200, {}, {"ok": True, "channel": {"id": params.get("channel")}}

    def api_conversations_list(self, params: dict[str, Any], token: str) -> Any:
        found = [{"id": cid, "name": f"name-{cid.lower()}"} for cid in self.channels]
        return 200, {}, {"ok": True, "channels": found, "response_metadata": {"next_cursor": ""}}

    def api_reactions_add(self, params: dict[str, Any], token: str) -> Any:
        return 200, {}, {"ok": True}

    def api_apps_connections_open(self, params: dict[str, Any], token: str) -> Any:
        if not token.startswith("xapp-"):
            return 200, {}, {"ok": False, "error": "invalid_auth"}
        return 200, {}, {"ok": True, "url": self.socket_url}


def _handler(fake: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return

        def _answer(self) -> None:
            url = urlparse(self.path)
            if url.path.startswith("/files/"):
                auth = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
                status, headers, raw = fake.download(unquote(url.path), auth)
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(raw)
                return
            method = url.path.rsplit("/", 1)[-1]
            params: dict[str, Any] = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if body:
                if "json" in (self.headers.get("Content-Type") or ""):
                    params.update(json.loads(body))
                else:
                    params.update({k: v[-1] for k, v in parse_qs(body.decode()).items()})
            auth = self.headers.get("Authorization") or ""
            token = auth.removeprefix("Bearer ").strip() or str(params.pop("token", ""))
            status, headers, data = fake.handle(method, token, params)
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(raw)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(raw)

        do_GET = _answer
        do_POST = _answer

    return Handler


class Server:
    """A running fake Web API (and, when asked, its Socket Mode server)."""

    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()
        self.socket: SocketServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}/api/"

    def add_file(self, file_id: str, name: str, data: bytes, mimetype: str = "application/octet-stream") -> dict:
        """A file someone uploaded, served at ``/files/<id>/<name>``; its ``files[]`` entry on a message."""
        path = f"/files/{file_id}/{name.replace('/', '_')}"
        self.fake.files[path] = data
        return {
            "id": file_id,
            "name": name,
            "size": len(data),
            "mimetype": mimetype,
            "url_private": f"{self.origin}{quote(path)}",
            "url_private_download": f"{self.origin}{quote(path)}?download=1",
            "permalink": f"https://example.slack.com/files/{file_id}",
        }

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def start_socket(self) -> SocketServer:
        self.socket = SocketServer()
        self.fake.socket_url = self.socket.url
        return self.socket

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close()
        self.http.shutdown()
        self.http.server_close()


class SocketServer:
    """A Socket Mode endpoint: ``hello`` on connect, then every queued envelope to every client; acks recorded."""

    def __init__(self) -> None:
        from websockets.sync.server import serve

        self.acks: list[str] = []
        self.clients: list[Any] = []
        self.outbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self._ids = itertools.count(1)
        self.server = serve(self._serve, "127.0.0.1", 0)
        self.url = f"ws://127.0.0.1:{self.server.socket.getsockname()[1]}/link"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _serve(self, connection: Any) -> None:
        self.clients.append(connection)
        connection.send(json.dumps({"type": "hello", "num_connections": len(self.clients)}))
        reader = threading.Thread(target=self._read, args=(connection,), daemon=True)
        reader.start()
        while reader.is_alive():
            try:
                envelope = self.outbox.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                connection.send(json.dumps(envelope))
            except Exception:
                self.outbox.put(envelope)
                return

    def _read(self, connection: Any) -> None:
        try:
            for raw in connection:
                data = json.loads(raw)
                if "envelope_id" in data:
                    self.acks.append(data["envelope_id"])
        except Exception:
            return

    def send_raw(self, message: dict[str, Any]) -> None:
        """A frame that is not an envelope (``disconnect``, say)."""
        self.outbox.put(message)

    def send_event(self, event: dict[str, Any], *, envelope_id: str = "", kind: str = "events_api") -> str:
        envelope_id = envelope_id or f"env-{next(self._ids)}"
        payload = {"type": "event_callback", "event": event} if kind == "events_api" else event
        self.outbox.put(
            {"envelope_id": envelope_id, "type": kind, "payload": payload, "accepts_response_payload": False}
        )
        return envelope_id

    def press(self, channel: str, posted: dict[str, Any], user: str, value: str, *, envelope_id: str = "") -> str:
        """A member pressing the control on ``posted`` (a bot message in ``channel`` with an actions block) that
        carries ``value``: a ``block_actions`` envelope, as Slack sends it over Socket Mode."""
        [actions] = [block for block in posted["blocks"] if block["type"] == "actions"]
        elements = actions["elements"]
        if elements[0]["type"] == "static_select":
            action = {
                "action_id": elements[0]["action_id"],
                "type": "static_select",
                "selected_option": {"value": value},
            }
        else:  # the button offering ``value``, or (a forged value) the first button's id
            button = next((e for e in elements if e["value"] == value), elements[0])
            action = {"action_id": button["action_id"], "type": "button", "value": value}
        payload = {
            "type": "block_actions",
            "user": {"id": user},
            "channel": {"id": channel},
            "container": {"type": "message", "message_ts": posted["ts"], "channel_id": channel},
            "message": {"ts": posted["ts"], "thread_ts": posted.get("thread_ts", "")},
            "actions": [action],
        }
        return self.send_event(payload, envelope_id=envelope_id, kind="interactive")

    def wait_acked(self, envelope_id: str, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if envelope_id in self.acks:
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        self.server.shutdown()
