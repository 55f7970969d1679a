"""The JSON API's handlers: work items (list, one), sessions, events (and their live stream), questions, actions.

Reads come from the catalog (``toolkit.standing``) and the event log; actions run an operator's operations
(``toolkit.operations``) — the ones the CLI runs — on a worker thread, and are logged with the acting principal.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from the_loop import __version__, events, toolkit
from the_loop_web.context import (
    ACTIONS,
    ITEMS,
    Web,
    error,
    flag_param,
    int_param,
    item_path,
    json_body,
    ref_of,
    refuse,
)

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef
    from the_loop_web.auth import Caller

PAGE_DEFAULT, PAGE_MAX = 50, 500
EVENTS_DEFAULT, EVENTS_MAX = 100, 1000
ITEM_EVENTS = 50


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


def _matcher(request: Request) -> Any:
    """The list's filters, read once: a catalog row → whether it is shown."""
    params = request.query_params
    states = {s for s in params.get("state", "").split(",") if s}
    provider = params.get("provider", "").lower()
    repository = params.get("repository", "").lower()
    waiting = flag_param(request, "waiting")

    def matches(row: dict[str, Any]) -> bool:
        if states and row["state"] not in states:
            return False
        scheme, _, rest = row["workItem"].partition(":")
        if provider and scheme != provider:
            return False
        if repository and (rest.rpartition("#")[0] if "#" in rest else "").lower() != repository:
            return False
        return waiting is None or (row["question"] is not None or row["state"] == "parked") == waiting

    return matches


def listing(web: Web, request: Request) -> dict[str, Any]:
    """``GET /api/v1/work-items``, as the list page renders it too: filtered on the catalog's rows, and only the
    page shaped (its stale badges need tmux's activity and the clock)."""
    matches = _matcher(request)
    matched = [row for row in web.catalog.rows() if matches(row)]
    offset = int_param(request, "offset", 0, 10**9)
    limit = int_param(request, "limit", PAGE_DEFAULT, PAGE_MAX)
    page = matched[offset : offset + limit]
    activity, now = (web.activity(), time.time()) if page else ({}, 0.0)
    items = [item_row(web, row, activity, now) for row in page]
    return {"total": len(matched), "offset": offset, "limit": limit, "items": items}


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
    limit = int_param(request, "limit", EVENTS_DEFAULT, EVENTS_MAX)
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
