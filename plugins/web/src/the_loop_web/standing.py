"""The standing sessions' API (issue-277, S15): list and read them (viewer); create, delete, start, stop, restart
and say (operator).

The same calls as ``the-loop standing`` (``toolkit.standing_sessions``), on a worker thread; each change is logged
as ``web.action`` with the acting principal, who is also the actor ``say`` frames the text with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from the_loop import events, toolkit
from the_loop_web.context import API, Web, error, json_body

if TYPE_CHECKING:
    from the_loop_web.auth import Caller

STANDING = f"{API}/standing-sessions"
OK = ("started", "resumed", "already-running", "stopped", "not-running", "said", "created", "deleted")
_TEXT = ("harness", "cwd", "prompt", "description", "slackChannel")
_FLAGS = ("slack", "autoStart", "start")


async def listing(web: Web, _request: Request) -> Response:
    return JSONResponse({"sessions": await run_in_threadpool(toolkit.standing_sessions.listing, web.config)})


async def one(web: Web, request: Request) -> Response:
    name = request.query_params.get("name", "")
    found = [
        row for row in await run_in_threadpool(toolkit.standing_sessions.listing, web.config) if row["name"] == name
    ]
    return JSONResponse(found[0]) if found else error(404, f"no standing session named {name!r}")


async def control(web: Web, request: Request) -> Response:
    body = await json_body(request)
    if isinstance(body, Response):
        return body
    action = body.get("action")
    if action not in toolkit.standing_sessions.ACTIONS:
        return error(400, "action: start, stop or restart")
    return await _run(
        web, request, body, str(action), lambda name: toolkit.standing_sessions.act(web.config, name, action)
    )


async def say(web: Web, request: Request) -> Response:
    body = await json_body(request)
    if isinstance(body, Response):
        return body
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        return error(400, "text: what to say, not empty")
    actor = request.state.caller.principal.label
    return await _run(
        web, request, body, "say", lambda name: [toolkit.standing_sessions.say_to(web.config, name, text, actor)]
    )


async def create(web: Web, request: Request) -> Response:
    body = await json_body(request)
    if isinstance(body, Response):
        return body
    for key in _TEXT:
        if body.get(key) is not None and not isinstance(body[key], str):
            return error(400, f"{key}: a string")
    for key in _FLAGS:
        if body.get(key) is not None and not isinstance(body[key], bool):
            return error(400, f"{key}: true or false")
    args = body.get("harnessArgs")
    if args is not None and not (isinstance(args, list) and all(isinstance(arg, str) for arg in args)):
        return error(400, "harnessArgs: a list of strings")
    sessions = toolkit.standing_sessions

    def call(name: str) -> list[dict[str, Any]]:
        definition = sessions.inherit(
            web.config,
            name,
            declared=False,
            harness=body.get("harness") or None,
            harness_args=args,
            cwd=body.get("cwd"),
            description=body.get("description") or "",
            prompt=body.get("prompt") or "",
            auto_start=body.get("autoStart") is not False,
            slack_enabled=body.get("slack") is True,
            slack_channel=body.get("slackChannel") or "",
        )
        return sessions.create(web.config, definition, start_now=body.get("start") is not False)

    return await _run(web, request, body, "create", call)


async def delete(web: Web, request: Request) -> Response:
    body = await json_body(request)
    if isinstance(body, Response):
        return body
    return await _run(web, request, body, "delete", lambda name: toolkit.standing_sessions.delete(web.config, name))


async def _run(web: Web, request: Request, body: dict[str, Any], action: str, call: Any) -> Response:
    """Check the name, run ``call(name)`` off the event loop, log it; 200 when every row went well, else 409."""
    name = body.get("name")
    if not isinstance(name, str) or not toolkit.standing_sessions.valid_name(name):
        return error(400, "name: a standing session's name ([a-z0-9][a-z0-9-]{0,39})")
    try:
        rows = await run_in_threadpool(call, name)
    except LookupError as exc:
        return error(404, str(exc))
    except ValueError as exc:  # a declared name, or one that exists: the request cannot be carried out
        return error(409, str(exc))
    ok = all(row["outcome"] in OK for row in rows)
    caller: Caller = request.state.caller
    events.emit(
        "web.action",
        action=f"standing.{action}",
        standing=name,
        principal=caller.principal.name,
        ok=ok,
        effect=rows[-1]["outcome"],
    )
    return JSONResponse({"name": name, "ok": ok, "rows": rows}, status_code=200 if ok else 409)
