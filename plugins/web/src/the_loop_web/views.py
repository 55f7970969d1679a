"""The dashboard's pages: the list of work items and a work item's own page, rendered on the server
(:mod:`the_loop_web.pages`), and the static files they load (xterm.js vendored)."""

from __future__ import annotations

from importlib import resources

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from the_loop_web import pages
from the_loop_web.api import detail, listing
from the_loop_web.auth import Caller
from the_loop_web.context import Web, error, item_path, ref_of, refuse

STATIC = {  # name → content type: only these files are served
    "xterm.js": "text/javascript",
    "xterm.css": "text/css",
    "addon-fit.js": "text/javascript",
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "LICENSE.xterm": "text/plain",
}
PUBLIC = ("dashboard.js", "dashboard.css")  # the login page's own: nothing in them is anybody's


async def list_page(web: Web, request: Request) -> Response:
    caller: Caller = request.state.caller
    found = await run_in_threadpool(listing, web, request)
    return HTMLResponse(pages.dashboard(found, caller, web.settings.stale_after_minutes), headers=_page_headers())


async def item_page(web: Web, request: Request) -> Response:
    caller: Caller = request.state.caller
    text, rest = item_path(request, "/work-items")
    ref = ref_of(text)
    if ref is None or rest:
        return HTMLResponse(pages.refused(404, "not a work item ref"), status_code=404, headers=_page_headers())
    found = await run_in_threadpool(detail, web, ref)
    if found is None:
        return HTMLResponse(
            pages.refused(404, f"{ref} is not tracked on this machine"), status_code=404, headers=_page_headers()
        )
    return HTMLResponse(pages.work_item(found, caller), headers=_page_headers())


def _page_headers() -> dict[str, str]:
    return dict(pages.HEADERS)


async def static(web: Web, request: Request) -> Response:
    """The pages' files; only the login page's own are served before a login."""
    name = request.path_params.get("name", "")
    if name not in PUBLIC and web.gate.caller(request) is None:
        return refuse(request, 401, "unauthenticated")
    if name not in STATIC:
        return error(404, "not found")
    data = resources.files("the_loop_web").joinpath("static", name).read_bytes()
    headers = {"cache-control": "private, max-age=3600", "x-content-type-options": "nosniff"}
    return Response(data, media_type=STATIC[name], headers=headers)
