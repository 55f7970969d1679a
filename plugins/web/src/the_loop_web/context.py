"""What every route of the control plane shares: the :class:`Web` object (config, tokens and logins, the catalog of
work items, the live tail), and the small helpers that parse a ref from a path, read a body and refuse a request."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from the_loop import events, toolkit
from the_loop.refs import RefError, parse_ref
from the_loop_web import pages
from the_loop_web.auth import Caller, Gatekeeper
from the_loop_web.stream import EventTail
from the_loop_web.tokens import TokenStore

if TYPE_CHECKING:
    from the_loop.interfaces import Config
    from the_loop.refs import WorkItemRef

API = "/api/v1"
ITEMS = f"{API}/work-items"
ACTIONS = ("say", "answer", "pause", "resume", "stop", "cleanup")
MAX_BODY = 64 * 1024
BODY_SECONDS = 10.0
ACTIVITY_SECONDS = 2.0  # how long one tmux answer about the panes' activity is used again


class Web:
    """What the routes share: the config, the token file and logins, the catalog of work items, the live tail."""

    def __init__(self, config: Config, latest: Callable[[], Config] | None = None) -> None:
        from the_loop_web.cli import store_of

        self._config = config
        self._latest = latest
        self.service = config.section("service")
        self.settings = config.section("web")
        self.store: TokenStore = store_of(config)
        self.gate = Gatekeeper(
            self.store,
            session_seconds=self.settings.session_hours * 3600,
            attempts=self.settings.login_attempts,
            window=self.settings.login_window_seconds,
        )
        self.catalog = toolkit.standing.Catalog(config)
        self.tail = EventTail(config.state.events_path)
        self.streams = 0
        self._activity: tuple[float, dict[str, float]] = (0.0, {})

    @property
    def config(self) -> Config:
        """The config as the daemon last loaded it (a running service follows edits to the file)."""
        current = self._latest() if self._latest is not None else self._config
        if current is not self.catalog.config:
            self.catalog = toolkit.standing.Catalog(current)
        return current

    @property
    def secure(self) -> bool:
        return bool(self.service.tls.enabled)

    def activity(self) -> dict[str, float]:
        """When each tmux session last printed anything, asked of tmux at most every two seconds."""
        at, found = self._activity
        if time.monotonic() - at > ACTIVITY_SECONDS:
            found = toolkit.runner_for(self.config).activity_all() or {}
            self._activity = (time.monotonic(), found)
        return found

    def open_stream(self) -> bool:
        if self.streams >= self.settings.max_streams:
            return False
        self.streams += 1
        return True

    def close_stream(self) -> None:
        self.streams = max(0, self.streams - 1)


def peer(connection: HTTPConnection) -> str:
    return connection.client.host if connection.client else ""


def refuse(connection: HTTPConnection, status: int, reason: str, caller: Caller | None = None) -> Response:
    events.emit(
        "web.refused",
        level="warning",
        status=status,
        reason=reason,
        path=connection.url.path[:200],
        peer=peer(connection),
        principal=caller.principal.name if caller else None,
    )
    if connection.url.path.startswith(API) or connection.scope["type"] == "websocket":
        return JSONResponse({"error": reason}, status_code=status)
    return HTMLResponse(pages.refused(status, reason), status_code=status, headers=dict(pages.HEADERS))


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def item_path(connection: HTTPConnection, prefix: str) -> tuple[str, str]:
    """``(ref, rest)`` from the raw path after ``prefix``: the ref is URL-encoded as one segment
    (``github%3Aocto%2Fdemo%237``); an unencoded ``/`` inside it is tolerated when ``rest`` is a known suffix."""
    raw = (connection.scope.get("raw_path") or connection.url.path.encode()).decode("latin-1")
    raw = raw.split("?", 1)[0]
    tail = raw[len(prefix) :].strip("/") if raw.startswith(prefix) else ""
    parts = tail.split("/")
    rest = ""
    if len(parts) > 1 and unquote(parts[-1]) in (*ACTIONS, "terminal"):
        rest = unquote(parts.pop())
    return unquote("/".join(parts)), rest


def ref_of(text: str) -> WorkItemRef | None:
    try:
        return parse_ref(text)
    except RefError:
        return None


async def json_body(request: Request) -> dict[str, Any] | Response:
    body = await toolkit.read_body(request, MAX_BODY, BODY_SECONDS)
    if isinstance(body, Response):
        return body
    if not body:
        return {}
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return error(400, "the body is not JSON")
    return data if isinstance(data, dict) else error(400, "the body is not a JSON object")


def int_param(request: Request, name: str, default: int, top: int) -> int:
    value = request.query_params.get(name, "")
    return max(0, min(top, int(value))) if value.isdigit() else default


def flag_param(request: Request, name: str) -> bool | None:
    value = request.query_params.get(name, "").lower()
    return {"true": True, "1": True, "false": False, "0": False}.get(value)
