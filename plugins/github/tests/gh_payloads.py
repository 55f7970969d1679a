"""Real GitHub webhook payloads (vendored from ``@octokit/webhooks-examples``, see ``payloads/README.md``), adapted
per test — repository, host, numbers, bodies, logins, labels — instead of hand-written dicts; and signing."""

from __future__ import annotations

import copy
import json
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from the_loop.ingress.signing import signature

PAYLOADS = Path(__file__).parent / "payloads"
SECRET = "s3cret"


@cache
def _read(name: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / f"{name}.json").read_text(encoding="utf-8"))


def load(name: str) -> dict[str, Any]:
    """A fresh copy of a vendored example: ``issue_comment.created``, ``ghes-3.5/issue_comment.created``, …"""
    return copy.deepcopy(_read(name))


def _subject(payload: dict[str, Any]) -> dict[str, Any] | None:
    for key in ("issue", "pull_request"):
        if isinstance(payload.get(key), dict):
            return payload[key]
    return None


def adapt(
    payload: dict[str, Any],
    *,
    repo: str = "octo/repo",
    host: str = "github.com",
    number: int | None = None,
    body: str | None = None,
    login: str | None = None,
    sender: str | None = None,
    labels: list[str] | None = None,
    merged: bool | None = None,
    pull_request: bool | None = None,
) -> dict[str, Any]:
    """``payload`` moved to ``https://<host>/<repo>`` (every web URL and name that named the example's repository),
    then the given fields set: the issue/PR ``number``, the comment or review ``body`` and author ``login``, the
    ``sender``, the item's ``labels``, a PR's ``merged``, and ``pull_request`` (an issue that is a PR, or not)."""
    original = payload["repository"]
    old_name = original["full_name"]
    old_host = original["html_url"].split("/")[2]
    text = json.dumps(payload)
    text = text.replace(f"https://{old_host}/{old_name}", f"https://{host}/{repo}")
    text = text.replace(f"/repos/{old_name}", f"/repos/{repo}").replace(f'"{old_name}"', f'"{repo}"')
    adapted = json.loads(text)
    owner, name = repo.split("/")
    adapted["repository"].update(name=name, full_name=repo, html_url=f"https://{host}/{repo}")
    adapted["repository"]["owner"]["login"] = owner

    subject = _subject(adapted)
    if subject is not None and pull_request is not None and "issue" in adapted:
        if pull_request:
            subject["pull_request"] = {"html_url": subject.get("html_url", ""), "merged_at": None}
        else:
            subject.pop("pull_request", None)
    if subject is not None and number is not None:
        subject["number"] = number
        page = "pull" if "pull_request" in subject or "pull_request" in adapted else "issues"
        subject["html_url"] = f"https://{host}/{repo}/{page}/{number}"
    comment = adapted.get("comment") if isinstance(adapted.get("comment"), dict) else None
    review = adapted.get("review") if isinstance(adapted.get("review"), dict) else None
    if comment is not None and subject is not None:
        anchor = "discussion_r" if "pull_request" in adapted else "issuecomment-"
        page = "pull" if "pull_request" in adapted else "issues"
        comment["html_url"] = f"https://{host}/{repo}/{page}/{subject['number']}#{anchor}{comment['id']}"
    for target in (comment, review):
        if target is not None:
            if body is not None:
                target["body"] = body
            if login is not None:
                target["user"]["login"] = login
    if sender is not None or (login is not None and comment is None and review is None):
        adapted["sender"]["login"] = sender or login
    if labels is not None and subject is not None:
        subject["labels"] = [
            {"id": i + 1, "name": label, "color": "ededed", "default": False} for i, label in enumerate(labels)
        ]
    if merged is not None and "pull_request" in adapted:
        adapted["pull_request"]["merged"] = merged
    return adapted


def new_comment(payload: dict[str, Any], comment_id: int) -> dict[str, Any]:
    """``payload`` (a comment event) as another comment: a new id and node id."""
    comment = payload["comment"]
    comment["id"] = comment_id
    comment["node_id"] = f"IC_kwDOtest{comment_id}"
    comment["html_url"] = comment["html_url"].split("#")[0] + f"#issuecomment-{comment_id}"
    return payload


def encode(payload: dict[str, Any] | bytes) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")


def headers(event: str, body: bytes, *, delivery: str | None = None, secret: str | None = SECRET) -> dict[str, str]:
    """The headers GitHub sends with ``body``: event, delivery id (a fresh one by default), signature (none when
    ``secret`` is None), JSON content type."""
    found = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/test",
    }
    if secret is not None:
        found["X-Hub-Signature-256"] = signature(secret, body)
    return found
