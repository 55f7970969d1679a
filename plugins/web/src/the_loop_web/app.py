"""The control plane's Starlette app: the route table, the checks every route goes through, the wiring.

Routes are declared once, in :data:`ROUTES`, with who may use them; the app and its OpenAPI document
(:mod:`the_loop_web.openapi`) are both built from that table, so the document cannot leave a route out. Every
route but ``health`` and the login page is behind :mod:`the_loop_web.auth`: a credential, the role, and for a
browser's state change its CSRF token and its own Origin.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from the_loop import events
from the_loop_web import api, login, standing, views
from the_loop_web.auth import CSRF_HEADER, same_origin
from the_loop_web.context import ACTIONS, API, ITEMS, Web, error, refuse
from the_loop_web.openapi import openapi_document

if TYPE_CHECKING:
    from the_loop.interfaces import Config

__all__ = ["ACTIONS", "ROUTES", "Spec", "build_app"]


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


async def openapi(_web: Web, _request: Request) -> Response:
    return JSONResponse(openapi_document(ROUTES, TERMINAL_PATH))


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
    Spec("GET", f"{API}/health", api.health, None, "Liveness: {status: ok}. The one API route served without a login."),
    Spec("GET", f"{API}/openapi.json", openapi, "viewer", "This document."),
    Spec("GET", f"{API}/instance", api.instance, "viewer", "This machine: name, role, version, url."),
    Spec(
        "GET",
        ITEMS,
        api.work_items,
        "viewer",
        "Work items, newest activity first: state, harness, model, last activity, waiting, stale.",
        (
            ("state", "query", "comma-separated states (running, parked, armed, paused, ended, …)"),
            ("provider", "query", "github or jira"),
            ("repository", "query", "owner/name"),
            ("waiting", "query", "true: only items waiting for a person (an open question, the start gate)"),
            ("offset", "query", "skip this many (paging)"),
            ("limit", "query", f"at most this many (default {api.PAGE_DEFAULT}, at most {api.PAGE_MAX})"),
        ),
    ),
    Spec(
        "GET",
        f"{ITEMS}/{{ref}}",
        api.work_item,
        "viewer",
        "One work item: where it stands, its portable record, sessions, channel thread, pull requests, last events.",
        (REF_PARAM,),
    ),
    *(
        Spec(
            "POST",
            f"{ITEMS}/{{ref}}/{name}",
            api.action,
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
    Spec("GET", f"{API}/sessions", api.sessions, "viewer", "Every session endpoint, with its pane's state."),
    Spec(
        "GET",
        f"{API}/events",
        api.event_log,
        "viewer",
        "The decision log, newest last: the filters of `the-loop events`.",
        (*EVENT_PARAMS, ("limit", "query", f"newest N (default {api.EVENTS_DEFAULT}, at most {api.EVENTS_MAX})")),
    ),
    Spec(
        "GET",
        f"{API}/events/stream",
        api.event_stream,
        "viewer",
        "Server-sent events: each matching record appended from now on (data: the record; its `event` is its type).",
        EVENT_PARAMS,
    ),
    Spec("GET", f"{API}/questions", api.questions, "viewer", "The agents' open questions (the-loop ask), unanswered."),
    Spec(
        "GET",
        standing.STANDING,
        standing.listing,
        "viewer",
        "Standing sessions: declared and recorded, with tmux's answer.",
    ),
    Spec(
        "GET",
        f"{standing.STANDING}/one",
        standing.one,
        "viewer",
        "One standing session's row.",
        (("name", "query", "the standing session's name"),),
    ),
    Spec(
        "POST",
        f"{standing.STANDING}/create",
        standing.create,
        "operator",
        "Make a standing session at run time and start it (as `the-loop standing create`).",
        body=(
            "name",
            "harness",
            "cwd",
            "prompt",
            "description",
            "harnessArgs",
            "slack",
            "slackChannel",
            "autoStart",
            "start",
        ),
    ),
    Spec(
        "POST",
        f"{standing.STANDING}/delete",
        standing.delete,
        "operator",
        "Stop a created standing session and remove its record.",
        body=("name",),
    ),
    Spec(
        "POST",
        f"{standing.STANDING}/control",
        standing.control,
        "operator",
        "Start, stop or restart a standing session (a recorded conversation is resumed).",
        body=("name", "action"),
    ),
    Spec(
        "POST",
        f"{standing.STANDING}/say",
        standing.say,
        "operator",
        "Paste text into a running standing session, framed with the caller's name (never starts it).",
        body=("name", "text"),
    ),
    Spec("GET", "/login", login.login_page, None, "The login page.", api=False),
    Spec(
        "POST",
        "/login",
        login.login,
        None,
        "Log in with a token or a one-time link: sets the session cookie.",
        body=("token", "link"),
        api=False,
    ),
    Spec("POST", "/logout", login.logout, "viewer", "End this login.", api=False),
    Spec("GET", "/", views.list_page, "viewer", "The dashboard: every work item, updated live.", api=False),
    Spec(
        "GET",
        "/work-items/{ref}",
        views.item_page,
        "viewer",
        "A work item's page: timeline, questions, actions, terminal.",
        api=False,
    ),
    Spec(
        "GET",
        "/static/{name}",
        views.static,
        None,  # checks its own: the login page's script and style are public, the rest needs a login
        "The dashboard's scripts and styles (xterm.js vendored).",
        api=False,
    ),
)
TERMINAL_PATH = f"{ITEMS}/{{ref}}/terminal"


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
