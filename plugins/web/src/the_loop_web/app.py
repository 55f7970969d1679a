"""The control plane's Starlette app: the API under ``/api/v1/``, the login, the dashboard and the terminal.

Routes are declared once, in :data:`ROUTES`, with who may use them; the app and its OpenAPI document are both built
from that table, so the document cannot leave a route out. Every route but ``health`` and the login page is behind
:mod:`the_loop_web.auth`. Actions run an operator's operations (``toolkit.operations``) — the ones the CLI runs —
on a worker thread, and are logged with the acting principal.
"""

from __future__ import annotations

import hmac
import json
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from the_loop import __version__, events, toolkit
from the_loop.refs import RefError, parse_ref
from the_loop_web import pages
from the_loop_web.auth import COOKIE, CSRF_HEADER, Caller, Gatekeeper, same_origin
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
PAGE_DEFAULT, PAGE_MAX = 50, 500
EVENTS_DEFAULT, EVENTS_MAX = 100, 1000
ITEM_EVENTS = 50
ACTIVITY_SECONDS = 2.0  # how long one tmux answer about the panes' activity is used again
STATIC = {  # name → content type: only these files are served
    "xterm.js": "text/javascript",
    "xterm.css": "text/css",
    "addon-fit.js": "text/javascript",
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "LICENSE.xterm": "text/plain",
}
Handler = Callable[["Web", Request], Awaitable[Response]]


@dataclass(frozen=True)
class Spec:
    """One route: its method and path, the role it needs (None: public), whether it changes state (CSRF), and
    what the OpenAPI document says of it."""

    method: str
    path: str
    handler: Any
    role: str | None
    summary: str
    parameters: tuple[tuple[str, str, str], ...] = ()  # (name, in, description)
    body: tuple[str, ...] = ()  # JSON body fields
    api: bool = True  # in the OpenAPI document

    @property
    def changes_state(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


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


# ------------------------------------------------------------------------------------------------ helpers


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
    return HTMLResponse(pages.refused(status, reason), status_code=status)


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


def _int(request: Request, name: str, default: int, top: int) -> int:
    value = request.query_params.get(name, "")
    return max(0, min(top, int(value))) if value.isdigit() else default


def _flag(request: Request, name: str) -> bool | None:
    value = request.query_params.get(name, "").lower()
    return {"true": True, "1": True, "false": False, "0": False}.get(value)


# ------------------------------------------------------------------------------------------------ the rows


def _stale(web: Web, row: dict[str, Any], activity: dict[str, float], now: float) -> tuple[str | None, bool]:
    """The item's last activity (a delivery, or its pane printing) and whether its live session has shown none
    for ``web.staleAfterMinutes``."""
    session = row["session"] or {}
    last = events.parse_instant(row["lastActivity"]) if row["lastActivity"] else None
    printed = activity.get(session.get("tmuxTarget") or "")
    newest = max(filter(None, (last, printed)), default=None)
    stale = (
        session.get("status") == "active"
        and newest is not None
        and now - newest > web.settings.stale_after_minutes * 60
    )
    return (events.timestamp(newest) if newest else None), stale


def item_row(web: Web, row: dict[str, Any], activity: dict[str, float], now: float) -> dict[str, Any]:
    session = row["session"] or {}
    last, stale = _stale(web, row, activity, now)
    question = row["question"]
    return {
        "ref": row["workItem"],
        "url": row["url"] or "",
        "state": row["state"],
        "harness": session.get("harness", ""),
        "model": session.get("model", ""),
        "effort": session.get("effort", ""),
        "status": session.get("status", ""),
        "tmuxTarget": session.get("tmuxTarget", ""),
        "lastActivity": last,
        "waiting": question is not None or row["state"] == "parked",
        "stale": stale,
        "question": {"id": question.get("id"), "askedAt": question.get("askedAt")} if question else None,
    }


def _matches(row: dict[str, Any], request: Request) -> bool:
    params = request.query_params
    states = {s for s in params.get("state", "").split(",") if s}
    if states and row["state"] not in states:
        return False
    provider, _, rest = row["ref"].partition(":")
    if params.get("provider") and provider != params["provider"].lower():
        return False
    repository = rest.rpartition("#")[0] if "#" in rest else ""
    if params.get("repository") and repository.lower() != params["repository"].lower():
        return False
    waiting = _flag(request, "waiting")
    return waiting is None or row["waiting"] == waiting


def listing(web: Web, request: Request) -> dict[str, Any]:
    """``GET /api/v1/work-items``, as the list page renders it too."""
    rows = web.catalog.rows()
    activity, now = web.activity(), time.time()
    shaped = [item_row(web, row, activity, now) for row in rows]
    matched = [row for row in shaped if _matches(row, request)]
    offset = _int(request, "offset", 0, 10**9)
    limit = _int(request, "limit", PAGE_DEFAULT, PAGE_MAX)
    return {"total": len(matched), "offset": offset, "limit": limit, "items": matched[offset : offset + limit]}


def detail(web: Web, ref: WorkItemRef) -> dict[str, Any] | None:
    """``GET /api/v1/work-items/{ref}``: where it stands, its portable record, sessions, thread, PRs, events."""
    config = web.config
    report = toolkit.standing.standing(config, ref)
    if report["state"] == "not-tracked":
        return None
    record = config.store.read(ref) or {}
    found = events.read_events(config.state.events_path, events.EventFilter(work_item=str(ref)), ITEM_EVENTS)
    return {
        "ref": str(ref),
        "state": report["state"],
        "headline": report["headline"],
        "standing": report,
        "record": record,
        "sessions": report["endpoints"],
        "channels": record.get("channels") or {},
        "pullRequests": report["pullRequests"],
        "question": toolkit.operations.open_question(config, ref),
        "events": [entry for _raw, entry in found],
    }


# ------------------------------------------------------------------------------------------------ handlers


async def health(_web: Web, _request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def instance(web: Web, _request: Request) -> Response:
    config = web.config
    name = config.raw_at("instance.name")
    return JSONResponse(
        {
            "name": name if isinstance(name, str) and name else socket.gethostname(),
            "role": "gateway-worker",  # one machine: it takes the events in and runs the sessions
            "version": __version__,
            "url": web.service.url,
        }
    )


async def work_items(web: Web, request: Request) -> Response:
    return JSONResponse(await run_in_threadpool(listing, web, request))


async def work_item(web: Web, request: Request) -> Response:
    text, rest = item_path(request, ITEMS)
    ref = ref_of(text)
    if ref is None or rest:
        return error(404, "not a work item ref (URL-encode it as one path segment)")
    found = await run_in_threadpool(detail, web, ref)
    return JSONResponse(found) if found is not None else error(404, f"{ref} is not tracked on this machine")


async def sessions(web: Web, _request: Request) -> Response:
    def rows() -> list[dict[str, Any]]:
        panes = toolkit.runner_for(web.config).probe_all()
        found = []
        for row in web.catalog.rows():
            for endpoint in row["endpoints"]:
                target = endpoint["tmuxTarget"]
                pane = None if panes is None or not target else panes.get(target, "absent")
                found.append({"workItem": row["workItem"], "endpoint": endpoint["ref"], **endpoint, "pane": pane})
        return found

    return JSONResponse({"sessions": await run_in_threadpool(rows)})


def _filter(request: Request) -> events.EventFilter | Response:
    params = request.query_params
    since = None
    if params.get("since"):
        try:
            since = events.parse_since(params["since"])
        except ValueError as exc:
            return error(400, str(exc))
    level = params.get("level") or None
    if level is not None and level not in events.LEVELS:
        return error(400, f"level: one of {', '.join(events.LEVELS)}")
    return events.EventFilter(
        types=tuple(params.getlist("type")),
        work_item=params.get("workItem") or None,
        delivery_id=params.get("deliveryId") or None,
        source=params.get("source") or None,
        level=level,
        since=since,
    )


async def event_log(web: Web, request: Request) -> Response:
    flt = _filter(request)
    if isinstance(flt, Response):
        return flt
    limit = _int(request, "limit", EVENTS_DEFAULT, EVENTS_MAX)
    found = await run_in_threadpool(events.read_events, web.config.state.events_path, flt, limit)
    return JSONResponse({"events": [entry for _raw, entry in found]})


async def event_stream(web: Web, request: Request) -> Response:
    flt = _filter(request)
    if isinstance(flt, Response):
        return flt
    if not web.open_stream():
        return refuse(request, 503, "too many live streams")

    async def body() -> Any:
        try:
            async for chunk in web.tail.subscribe(flt):
                yield chunk
        finally:
            web.close_stream()

    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


async def questions(web: Web, _request: Request) -> Response:
    def rows() -> list[dict[str, Any]]:
        return [
            {"workItem": row["workItem"], **row["question"]}
            for row in web.catalog.rows()
            if row["question"] is not None
        ]

    return JSONResponse({"questions": await run_in_threadpool(rows)})


async def action(web: Web, request: Request) -> Response:
    text, name = item_path(request, ITEMS)
    ref = ref_of(text)
    if ref is None or name not in ACTIONS:
        return error(404, f"not an action: POST {ITEMS}/<ref>/{{{'|'.join(ACTIONS)}}}")
    body = await json_body(request)
    if isinstance(body, Response):
        return body
    caller: Caller = request.state.caller
    actor = caller.principal.label
    ops = toolkit.operations
    config = web.config
    comment = body.get("comment")
    if comment is not None and not isinstance(comment, bool):
        return error(400, "comment: true or false")
    if name in ("say", "answer"):
        said = body.get("text")
        if not isinstance(said, str) or not said.strip():
            return error(400, "text: what to deliver, not empty")
        if name == "say":
            call = lambda: ops.say(config, ref, said, source="web", actor=actor)  # noqa: E731
        else:
            question = body.get("question")
            if not isinstance(question, str) or not question:
                return error(400, "question: the id of the question answered (GET /api/v1/questions)")
            call = lambda: ops.answer(config, ref, said, question_id=question, source="web", actor=actor)  # noqa: E731
    elif name == "cleanup":
        call = lambda: ops.cleanup(config, ref, source="web", actor=actor, comment=comment)  # noqa: E731
    else:
        act = getattr(ops, name)
        call = lambda: act(config, ref, source="web", actor=actor, comment=True if comment is None else comment)  # noqa: E731
    done = await run_in_threadpool(call)
    events.emit(
        "web.action", action=name, work_item=str(ref), principal=caller.principal.name, ok=done.ok, effect=done.effect
    )
    return JSONResponse(done.to_dict(), status_code=200 if done.ok else 409)


async def openapi(_web: Web, _request: Request) -> Response:
    return JSONResponse(openapi_document())


# ------------------------------------------------------------------------------------------------ login


async def login_page(web: Web, request: Request) -> Response:
    return HTMLResponse(pages.login(), headers={"cache-control": "no-store"})


async def login(web: Web, request: Request) -> Response:
    address = peer(request)
    if request.headers.get("origin") and not same_origin(request, web.settings.allowed_origins):
        return refuse(request, 403, "cross-origin login")
    wait = web.gate.limiter.blocked(address)
    if wait:
        events.emit("web.login_limited", level="warning", peer=address, retry_after=round(wait))
        return JSONResponse(
            {"error": "too many failed logins: wait"}, status_code=429, headers={"retry-after": str(int(wait) + 1)}
        )
    form = await _login_fields(request)
    if isinstance(form, Response):
        return form
    secret, how = (form.get("link"), "link") if form.get("link") else (form.get("token"), "token")
    secret = secret if isinstance(secret, str) else ""
    if how == "link":
        principal = await run_in_threadpool(web.store.redeem_link, secret)
    else:
        principal = web.store.authenticate(secret) if web.store.readable else None
    if principal is None:
        web.gate.limiter.failed(address)
        reason = "unknown or used link" if how == "link" else ("no token" if not secret else "unknown token")
        events.emit("web.login_failed", level="warning", reason=reason, peer=address, how=how)
        return JSONResponse({"error": "login refused"}, status_code=401)
    cookie, made = web.gate.login(principal, how)
    events.emit("web.login", principal=principal.name, role=principal.role, how=how, peer=address)
    wants_json = "application/json" in request.headers.get("content-type", "")
    response: Response = (
        JSONResponse({"ok": True, "principal": principal.name, "role": principal.role, "csrf": made.csrf})
        if wants_json
        else RedirectResponse("/", status_code=303)
    )
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(made.expires - time.time()),
        path="/",
        httponly=True,
        samesite="strict",
        secure=web.secure,
    )
    return response


async def _login_fields(request: Request) -> dict[str, Any] | Response:
    if "application/json" in request.headers.get("content-type", ""):
        return await json_body(request)
    body = await toolkit.read_body(request, 4096, BODY_SECONDS)
    if isinstance(body, Response):
        return body
    from urllib.parse import parse_qs

    fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=4)
    return {key: values[0] for key, values in fields.items() if values}


async def logout(web: Web, request: Request) -> Response:
    caller: Caller = request.state.caller
    web.gate.logout(request.cookies.get(COOKIE, ""))
    events.emit("web.logout", principal=caller.principal.name)
    response = JSONResponse({"ok": True})
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=web.secure)
    return response


# ------------------------------------------------------------------------------------------------ pages


async def list_page(web: Web, request: Request) -> Response:
    caller: Caller = request.state.caller
    found = await run_in_threadpool(listing, web, request)
    return HTMLResponse(pages.dashboard(found, caller, web.settings.stale_after_minutes), headers=_page_headers())


async def item_page(web: Web, request: Request) -> Response:
    caller: Caller = request.state.caller
    text, rest = item_path(request, "/work-items")
    ref = ref_of(text)
    if ref is None or rest:
        return HTMLResponse(pages.refused(404, "not a work item ref"), status_code=404)
    found = await run_in_threadpool(detail, web, ref)
    if found is None:
        return HTMLResponse(pages.refused(404, f"{ref} is not tracked on this machine"), status_code=404)
    return HTMLResponse(pages.work_item(found, caller), headers=_page_headers())


def _page_headers() -> dict[str, str]:
    return {"cache-control": "no-store"}


async def static(_web: Web, request: Request) -> Response:
    name = request.path_params.get("name", "")
    if name not in STATIC:
        return error(404, "not found")
    data = resources.files("the_loop_web").joinpath("static", name).read_bytes()
    return Response(data, media_type=STATIC[name], headers={"cache-control": "private, max-age=3600"})


# ------------------------------------------------------------------------------------------------ the table


REF_PARAM = ("ref", "path", "the work item's ref, URL-encoded as one segment: github%3Aocto%2Fdemo%237")
EVENT_PARAMS = (
    ("type", "query", "event type glob (repeatable; any matches)"),
    ("workItem", "query", "only events about this work item"),
    ("deliveryId", "query", "only events of this delivery"),
    ("source", "query", "only events written by this source"),
    ("level", "query", "minimum level: debug, info, warning, error"),
    ("since", "query", "relative (30s, 15m, 2h, 1d) or an ISO-8601 time"),
)
ROUTES: tuple[Spec, ...] = (
    Spec("GET", f"{API}/health", health, None, "Liveness: {status: ok}. The one API route served without a login."),
    Spec("GET", f"{API}/openapi.json", openapi, "viewer", "This document."),
    Spec("GET", f"{API}/instance", instance, "viewer", "This machine: name, role, version, url."),
    Spec(
        "GET",
        ITEMS,
        work_items,
        "viewer",
        "Work items, newest activity first: state, harness, model, last activity, waiting, stale.",
        (
            ("state", "query", "comma-separated states (running, parked, armed, paused, ended, …)"),
            ("provider", "query", "github or jira"),
            ("repository", "query", "owner/name"),
            ("waiting", "query", "true: only items waiting for a person (an open question, the start gate)"),
            ("offset", "query", "skip this many (paging)"),
            ("limit", "query", f"at most this many (default {PAGE_DEFAULT}, at most {PAGE_MAX})"),
        ),
    ),
    Spec(
        "GET",
        f"{ITEMS}/{{ref}}",
        work_item,
        "viewer",
        "One work item: where it stands, its portable record, sessions, channel thread, pull requests, last events.",
        (REF_PARAM,),
    ),
    *(
        Spec(
            "POST",
            f"{ITEMS}/{{ref}}/{name}",
            action,
            "operator",
            summary,
            (REF_PARAM,),
            body,
        )
        for name, summary, body in (
            ("say", "Deliver text into the session through the dispatcher (FIFO with every event).", ("text",)),
            (
                "answer",
                "Answer the agent's open question: the text is delivered, the question closed.",
                ("text", "question"),
            ),
            ("pause", "Pause: events are dropped until resumed; tmux is untouched.", ("comment",)),
            ("resume", "Resume a paused work item.", ("comment",)),
            ("stop", "Stop: record stop and close its session (no event starts it again).", ("comment",)),
            (
                "cleanup",
                "Kill its sessions, remove its checkout and local record; keep the portable record.",
                ("comment",),
            ),
        )
    ),
    Spec("GET", f"{API}/sessions", sessions, "viewer", "Every session endpoint, with its pane's state."),
    Spec(
        "GET",
        f"{API}/events",
        event_log,
        "viewer",
        "The decision log, newest last: the filters of `the-loop events`.",
        (*EVENT_PARAMS, ("limit", "query", f"newest N (default {EVENTS_DEFAULT}, at most {EVENTS_MAX})")),
    ),
    Spec(
        "GET",
        f"{API}/events/stream",
        event_stream,
        "viewer",
        "Server-sent events: each matching record appended from now on (event: its type; data: the record).",
        EVENT_PARAMS,
    ),
    Spec("GET", f"{API}/questions", questions, "viewer", "The agents' open questions (the-loop ask), unanswered."),
    Spec("GET", "/login", login_page, None, "The login page.", api=False),
    Spec(
        "POST",
        "/login",
        login,
        None,
        "Log in with a token or a one-time link: sets the session cookie.",
        body=("token", "link"),
        api=False,
    ),
    Spec("POST", "/logout", logout, "viewer", "End this login.", api=False),
    Spec("GET", "/", list_page, "viewer", "The dashboard: every work item, updated live.", api=False),
    Spec(
        "GET",
        "/work-items/{ref}",
        item_page,
        "viewer",
        "A work item's page: timeline, questions, actions, terminal.",
        api=False,
    ),
    Spec(
        "GET", "/static/{name}", static, "viewer", "The dashboard's scripts and styles (xterm.js vendored).", api=False
    ),
)
TERMINAL_PATH = f"{ITEMS}/{{ref}}/terminal"


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API, from :data:`ROUTES`."""
    paths: dict[str, Any] = {}
    for spec in ROUTES:
        if not spec.api:
            continue
        operation: dict[str, Any] = {
            "summary": spec.summary,
            "operationId": re.sub(r"[^A-Za-z0-9]+", "_", f"{spec.method} {spec.path}").strip("_"),
            "responses": {"200": {"description": "OK"}},
        }
        if spec.role is not None:
            operation["security"] = [{"bearer": []}, {"cookie": []}]
            operation["responses"]["401"] = {"description": "no credential, or one that is not (or no longer) valid"}
            operation["x-role"] = spec.role
            if spec.role == "operator":
                operation["responses"]["403"] = {"description": "a viewer's token, or a browser request without CSRF"}
                operation["responses"]["409"] = {"description": "not done: the body says why (effect, message)"}
        else:
            operation["security"] = []
        if spec.parameters:
            operation["parameters"] = [
                {
                    "name": name,
                    "in": where,
                    "required": where == "path",
                    "description": text,
                    "schema": {"type": "string"},
                }
                for name, where, text in spec.parameters
            ]
        if spec.body:
            operation["requestBody"] = {
                "required": spec.body[0] in ("text",),
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                field: {"type": "boolean"} if field == "comment" else {"type": "string"}
                                for field in spec.body
                            },
                        }
                    }
                },
            }
        paths.setdefault(spec.path, {})[spec.method.lower()] = operation
    paths[TERMINAL_PATH] = {
        "get": {
            "summary": "WebSocket: the live terminal of the work item's session (tmux attach; read-only for a "
            "viewer). Frames: binary = terminal bytes; text JSON {type: resize, cols, rows}.",
            "operationId": "terminal",
            "parameters": [{"name": "ref", "in": "path", "required": True, "schema": {"type": "string"}}],
            "security": [{"bearer": []}, {"cookie": []}],
            "x-role": "viewer",
            "responses": {"101": {"description": "switching protocols"}, "401": {"description": "no credential"}},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "the-loop control plane", "version": __version__},
        "servers": [{"url": "/"}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "the-loop web token create"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": COOKIE},
            }
        },
        "paths": paths,
    }


# ------------------------------------------------------------------------------------------------ wiring


def guarded(web: Web, spec: Spec) -> Callable[[Request], Awaitable[Response]]:
    """The route's endpoint behind its checks: a credential, the role, and for a browser's state change the
    CSRF token and the Origin."""

    async def endpoint(request: Request) -> Response:
        if spec.role is None:
            return await spec.handler(web, request)
        caller = web.gate.caller(request)
        if caller is None:
            return refuse(request, 401, "unauthenticated")
        if spec.changes_state and caller.by_cookie:
            sent = request.headers.get(CSRF_HEADER, "")
            if not sent or caller.login is None or not hmac.compare_digest(sent, caller.login.csrf):
                return refuse(request, 403, "csrf", caller)
            if request.headers.get("origin") and not same_origin(request, web.settings.allowed_origins):
                return refuse(request, 403, "cross-origin", caller)
        if spec.role == "operator" and not caller.principal.can_act:
            return refuse(request, 403, "viewer role", caller)
        request.state.caller = caller
        return await spec.handler(web, request)

    return endpoint


def _path_of(spec: Spec) -> str:
    """Starlette's pattern: a ref spans the rest of the path (it is parsed from the raw path)."""
    return spec.path.replace("{ref}/", "{rest:path}/").replace("{ref}", "{rest:path}")


def build_app(config: Config, latest: Callable[[], Config] | None = None) -> Starlette:
    from the_loop_web import terminal

    web = Web(config, latest)
    routes: list[BaseRoute] = []
    # Actions first: "/work-items/{ref}/say" must not be taken by "/work-items/{ref}" (a ref spans slashes).
    for spec in sorted(ROUTES, key=lambda s: s.path.count("/") * -1):
        routes.append(Route(_path_of(spec), guarded(web, spec), methods=[spec.method], name=spec.path + spec.method))

    async def terminal_endpoint(websocket: WebSocket) -> None:
        await terminal.serve(web, websocket)

    routes.insert(0, WebSocketRoute(_path_of(Spec("GET", TERMINAL_PATH, None, None, "")), terminal_endpoint))
    handlers = {404: _not_found, 405: _not_allowed, Exception: _failed}
    app = Starlette(routes=routes, exception_handlers=handlers)  # type: ignore[arg-type]
    app.router.redirect_slashes = False
    app.state.web = web
    return app


async def _not_found(request: Request, _exc: Exception) -> Response:
    # An unknown path says nothing more to a caller without credentials than a known one does.
    if request.app.state.web.gate.caller(request) is None:
        return refuse(request, 401, "unauthenticated")
    return error(404, "not found")


async def _failed(request: Request, exc: Exception) -> Response:
    """A bug of ours: logged with where it happened, answered with a bare 500 (no traceback leaves the process)."""
    import traceback

    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    events.emit(
        "web.error",
        level="error",
        path=request.url.path[:200],
        error=f"{type(exc).__name__}: {exc}"[:500],
        at=f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else None,
    )
    return error(500, "internal error (logged as web.error)")


async def _not_allowed(request: Request, _exc: Exception) -> Response:
    if request.app.state.web.gate.caller(request) is None:
        return refuse(request, 401, "unauthenticated")
    return error(405, "method not allowed")
