"""Logging in and out: a token typed into the login page, or a one-time link from ``the-loop web open``.

Failed logins are counted per peer address and refused for a while past ``web.loginAttempts`` (429), each one
logged as ``web.login_failed`` with its reason and never with what was typed. A login sets the session cookie
(``HttpOnly``, ``SameSite=Strict``, ``Secure`` over TLS) and hands the page its CSRF token.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from the_loop import events, toolkit
from the_loop_web import pages
from the_loop_web.auth import COOKIE, Caller, same_origin
from the_loop_web.context import BODY_SECONDS, Web, json_body, peer, refuse


async def login_page(web: Web, request: Request) -> Response:
    return HTMLResponse(pages.login(), headers=dict(pages.HEADERS))


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
