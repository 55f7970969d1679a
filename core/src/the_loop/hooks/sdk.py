"""Host a lifecycle hook outside the daemon: the JSON-RPC 2.0 side of a ``hooks: [{url: …}]`` entry.

Write a :class:`LifecycleHooks` subclass (the same class a ``module``/``path`` entry would load) and serve it::

    from the_loop.hooks.sdk import HookServer, LifecycleHooks

    class Roster(LifecycleHooks):
        def work_item_start(self, ctx):
            if ctx.actor not in {"alice", "bob"}:
                return {"proceed": False, "reason": "not on roster"}
            return None

    HookServer(Roster(), host="127.0.0.1", port=8000, token_env="ROSTER_TOKEN").serve_forever()

``GET …/health`` answers ``{"ok": true, "points": [...]}`` without authentication; every ``POST`` is one JSON-RPC
request whose ``method`` is the point and ``params`` the context, and needs ``Authorization: Bearer <token>`` when
``token_env`` is set. This module imports only the standard library and :mod:`the_loop.hooks.lifecycle` (with the
contexts of :mod:`the_loop.lifecycle`), so a side-car needs no daemon, and uses the standard library's threading HTTP
server: it is the operator's small helper, not the-loop's own receiver.
"""

from __future__ import annotations

import hmac
import json
import os
from http.server import BaseHTTPRequestHandler
from typing import Any

from the_loop.hooks.background_server import BackgroundServer
from the_loop.hooks.lifecycle import (
    CONTEXTS,
    AnswerError,
    Decision,
    InputReceived,
    LifecycleContext,
    LifecycleHooks,
    PhaseChanged,
    SessionSpawn,
    SessionSpawned,
    WaitingForInput,
    WorkItemComplete,
    WorkItemFacts,
    WorkItemStart,
    answer_decisions,
)

__all__ = [
    "Decision",
    "HookServer",
    "InputReceived",
    "LifecycleHooks",
    "PhaseChanged",
    "SessionSpawn",
    "SessionSpawned",
    "WaitingForInput",
    "WorkItemComplete",
    "WorkItemFacts",
    "WorkItemStart",
    "handle_request",
]

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, HOOK_ERROR = -32700, -32600, -32601, -32602, -32000
MAX_BODY = 1024 * 1024


def _reply(request_id: Any, *, result: Any = None, code: int = 0, message: str = "") -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    if code:
        body["error"] = {"code": code, "message": message}
    else:
        body["result"] = result
    return json.dumps(body).encode("utf-8")


def handle_request(executor: LifecycleHooks, body: bytes) -> bytes:
    """Answer one JSON-RPC 2.0 request for ``executor``; always returns a JSON-RPC reply, never raises.

    Codes: -32700 not JSON · -32600 not a request · -32601 not a point · -32602 a known param of the wrong type ·
    -32000 the hook raised or answered something that is not a decision.
    """
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _reply(None, code=PARSE_ERROR, message="parse error: the body is not JSON")
    if not isinstance(request, dict):
        return _reply(None, code=INVALID_REQUEST, message="invalid request: not an object")
    request_id = request.get("id")
    method, params = request.get("method"), request.get("params", {})
    valid_id = request_id is None or (isinstance(request_id, (int, str)) and not isinstance(request_id, bool))
    if request.get("jsonrpc") != "2.0" or not isinstance(method, str) or not valid_id or not isinstance(params, dict):
        return _reply(request_id if valid_id else None, code=INVALID_REQUEST, message="invalid request")
    cls = CONTEXTS.get(method)
    if cls is None:
        return _reply(request_id, code=METHOD_NOT_FOUND, message=f"unknown point {method!r}")
    try:
        ctx = cls.from_params(params)
    except TypeError as exc:
        return _reply(request_id, code=INVALID_PARAMS, message=f"invalid params: {exc}")
    try:
        answer = getattr(executor, method)(ctx)
        result = _as_result(ctx, answer)
    except Exception as exc:
        return _reply(request_id, code=HOOK_ERROR, message=f"the hook failed: {type(exc).__name__}: {exc}")
    return _reply(request_id, result=result)


def _as_result(ctx: LifecycleContext, answer: object) -> dict[str, Any] | None:
    """The JSON result for an answer: its checked decisions (only those that differ from the context's for a
    returned context), or null."""
    if answer is None:
        return None
    try:
        decisions = answer_decisions(ctx, answer)
    except AnswerError as exc:
        raise ValueError(str(exc)) from None
    if isinstance(answer, LifecycleContext):
        decisions = {k: v for k, v in decisions.items() if v != getattr(ctx, k)}
    return decisions or None


class HookServer(BackgroundServer):
    """A small threading HTTP server for one executor. ``port=0`` picks a free port (see :attr:`port`).

    Use :meth:`serve_forever` in a side-car's main, or :meth:`start`/:meth:`stop` (and ``with``) to run it in a
    background thread.
    """

    thread_name = "hook-server"

    def __init__(
        self, executor: LifecycleHooks, host: str = "127.0.0.1", port: int = 8000, token_env: str = ""
    ) -> None:
        self.executor = executor
        self.token_env = token_env
        super().__init__(_handler(self), host, port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def authorized(self, header: str | None) -> bool:
        if not self.token_env:
            return True
        token = os.environ.get(self.token_env, "")
        if not token or not header:
            return False  # a server told to check a token it does not have refuses everyone
        return hmac.compare_digest(header.encode(), f"Bearer {token}".encode())


def _handler(server: HookServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: without this, 40 ms per call on loopback

        def _send(self, status: int, body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the caller gave up (its timeout): nothing to tell it

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0].rstrip("/").endswith("/health"):
                points = type(server.executor).handled_points()
                self._send(200, json.dumps({"ok": True, "points": list(points)}).encode())
            else:
                self._send(404, b'{"error": "not found"}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.close_connection = True
                self._send(413, b'{"error": "body too large"}')
                return
            body = self.rfile.read(length)
            if not server.authorized(self.headers.get("Authorization")):
                self._send(401, b'{"error": "unauthorized"}')
                return
            self._send(200, handle_request(server.executor, body))

        def log_message(self, format: str, *args: Any) -> None:
            return  # quiet: a side-car's output is its operator's

    return Handler
