"""The dashboard's HTML, rendered on the server: the login page, the list of work items and a work item's page.

Every value that comes from a ticket, an agent or a record is escaped (:func:`esc`): a title or a question is
hostile input. The pages carry no inline script or style — ``static/dashboard.js`` and ``static/dashboard.css``
do the rest — so the Content-Security-Policy (:data:`HEADERS`) can forbid everything else.
"""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import quote

HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",  # no-referrer would make a form's Origin "null"
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}
TIMELINE_FIELDS = ("effect", "command", "reason", "actor", "delivery_id", "tmux_target", "principal", "status")


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def item_href(ref: str) -> str:
    return "/work-items/" + quote(ref, safe="")


def _page(title: str, body: str, *, meta: dict[str, str] | None = None, terminal: bool = False) -> str:
    metas = "".join(f'<meta name="{esc(name)}" content="{esc(value)}">' for name, value in (meta or {}).items())
    styles = '<link rel="stylesheet" href="/static/dashboard.css">'
    scripts = '<script src="/static/dashboard.js" defer></script>'
    if terminal:
        styles += '<link rel="stylesheet" href="/static/xterm.css">'
        scripts = (
            '<script src="/static/xterm.js" defer></script><script src="/static/addon-fit.js" defer></script>' + scripts
        )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · the-loop</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">{metas}{styles}{scripts}</head>'
        f'<body><header><a class="brand" href="/">the-loop</a>{_who(meta)}</header><main>{body}</main></body></html>'
    )


def _who(meta: dict[str, str] | None) -> str:
    if not meta or "principal" not in meta:
        return ""
    return (
        f'<span class="who">{esc(meta["principal"])} ({esc(meta.get("role", ""))})</span>'
        '<button id="logout" type="button">log out</button>'
    )


def _meta(caller: Any) -> dict[str, str]:
    return {
        "csrf-token": caller.login.csrf if caller.login is not None else "",
        "role": caller.principal.role,
        "principal": caller.principal.name,
    }


def refused(status: int, reason: str) -> str:
    return _page(str(status), f'<p class="refused">{esc(reason)}</p><p><a href="/login">log in</a></p>')


def login() -> str:
    body = (
        '<h1>Log in</h1><form id="login" method="post" action="/login">'
        '<label>Access token <input name="token" type="password" autocomplete="off" required></label>'
        '<button type="submit">log in</button></form>'
        '<p class="hint">A token comes from <code>the-loop web token create NAME --role viewer|operator</code>; '
        "a one-time link from <code>the-loop web open</code>.</p>"
        '<p id="login-error" class="refused" hidden></p>'
    )
    return _page("Log in", body, meta={"page": "login"})


# ------------------------------------------------------------------------------------------------ the list


def badges(item: dict[str, Any]) -> str:
    found = []
    if item.get("waiting"):
        found.append('<span class="badge waiting">waiting for input</span>')
    if item.get("stale"):
        found.append('<span class="badge stale">stale</span>')
    return "".join(found)


def model_text(item: dict[str, Any]) -> str:
    model, effort = item.get("model") or "", item.get("effort") or ""
    return f"{model} ({effort})" if effort else model


def list_row(item: dict[str, Any]) -> str:
    ref = item["ref"]
    return (
        f'<tr data-ref="{esc(ref)}"><td><a href="{esc(item_href(ref))}">{esc(ref)}</a></td>'
        f'<td class="state {esc(item["state"])}">{esc(item["state"])}</td><td>{esc(item.get("harness"))}</td>'
        f"<td>{esc(model_text(item))}</td><td>{esc(item.get('lastActivity') or '')}</td><td>{badges(item)}</td></tr>"
    )


def dashboard(found: dict[str, Any], caller: Any, stale_after: int) -> str:
    rows = "".join(list_row(item) for item in found["items"])
    empty = "" if found["items"] else '<p class="empty">No work items on this machine yet.</p>'
    body = (
        f'<h1>Work items <span class="count">{esc(found["total"])}</span></h1>'
        f'<p class="hint">Stale: a live session that showed nothing for {esc(stale_after)} minutes. '
        "The list follows every event as it happens.</p>"
        '<table id="items"><thead><tr><th>Work item</th><th>State</th><th>Harness</th><th>Model</th>'
        f"<th>Last activity</th><th></th></tr></thead><tbody>{rows}</tbody></table>{empty}"
    )
    return _page("Work items", body, meta={**_meta(caller), "page": "list"})


# ------------------------------------------------------------------------------------------------ one item


def timeline_row(entry: dict[str, Any]) -> str:
    detail = " ".join(f"{key}={entry[key]}" for key in TIMELINE_FIELDS if entry.get(key) not in (None, ""))
    return (
        f'<li><time>{esc(entry.get("ts"))}</time> <span class="event">{esc(entry.get("event"))}</span> '
        f'<span class="detail">{esc(detail)}</span></li>'
    )


def _sessions(found: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{esc(s['ref'])}</td><td>{esc(s['harness'])}</td><td>{esc(model_text(s))}</td>"
        f"<td>{esc(s['status'])}</td><td>{esc(s.get('pane') or '')}</td>"
        f"<td><code>{esc(s['tmuxTarget'])}</code></td></tr>"
        for s in found["sessions"]
    )
    if not rows:
        return '<p class="empty">No session yet.</p>'
    return (
        "<table><thead><tr><th>Endpoint</th><th>Harness</th><th>Model</th><th>Status</th><th>Pane</th>"
        f"<th>tmux</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _question(found: dict[str, Any], can_act: bool) -> str:
    question = found.get("question")
    if not question:
        return '<section id="question" hidden></section>'
    form = (
        f'<form id="answer" data-question="{esc(question["id"])}"><textarea name="text" required></textarea>'
        '<button type="submit">answer</button></form>'
        if can_act
        else ""
    )
    return (
        f'<section id="question"><h2>Question from the agent</h2><blockquote>{esc(question.get("text"))}</blockquote>'
        f'<p class="hint">asked {esc(question.get("askedAt"))}</p>{form}</section>'
    )


def _actions(can_act: bool) -> str:
    if not can_act:
        return '<p class="hint">Viewer: you can watch; an operator token is needed to act or type.</p>'
    buttons = "".join(
        f'<button type="button" class="action" data-action="{name}">{name}</button>'
        for name in ("pause", "resume", "stop", "cleanup")
    )
    return (
        '<section id="actions"><h2>Steer</h2><form id="say"><textarea name="text" required '
        'placeholder="Say something to the agent (delivered like a comment)"></textarea>'
        f'<button type="submit">say</button></form><div class="buttons">{buttons}</div>'
        '<p id="action-result" class="hint" aria-live="polite"></p></section>'
    )


def work_item(found: dict[str, Any], caller: Any) -> str:
    can_act = bool(caller.principal.can_act)
    ref = found["ref"]
    prs = "".join(f"<li>{esc(pr['ref'])}: {esc(pr['state'])}</li>" for pr in found["pullRequests"])
    thread = found.get("channels") or {}
    timeline = "".join(timeline_row(entry) for entry in found["events"])
    body = (
        f'<h1>{esc(ref)}</h1><p class="headline state {esc(found["state"])}">{esc(found["headline"])}</p>'
        f"<section><h2>Sessions</h2>{_sessions(found)}</section>"
        + (f"<section><h2>Pull requests</h2><ul>{prs}</ul></section>" if prs else "")
        + (
            f'<section><h2>Thread</h2><pre class="thread">{esc(json.dumps(thread, indent=1))}</pre></section>'
            if thread
            else ""
        )
        + _question(found, can_act)
        + _actions(can_act)
        + '<section><h2>Terminal</h2><div id="terminal"></div>'
        f'<p class="hint">{"read-only: you are a viewer" if not can_act else "your keystrokes reach the session"}</p>'
        "</section>"
        f'<section><h2>Timeline</h2><ol id="timeline">{timeline}</ol></section>'
    )
    meta = {**_meta(caller), "page": "work-item", "ref": ref}
    return _page(ref, body, meta=meta, terminal=True)
