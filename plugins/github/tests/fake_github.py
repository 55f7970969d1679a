"""A fake GitHub REST API on 127.0.0.1 for tests: real HTTP, reached by the real PyGithub client.

It keeps repositories, issues and pull requests (with labels), comments, review comments and reactions in memory,
records every request (method, path, query, headers with the ``Authorization`` value redacted, JSON body, and the
login the token authenticated as), answers 404 for anything unknown and lets a test inject faults per route (a
status, a delay, or a dropped connection). Tokens map to logins, as on GitHub: a comment is authored by the token's
user, so a test can see which token a call used without the fake keeping the token anywhere it reports.

Usage::

    with FakeGitHub(tokens={"t": "the-loop-bot"}) as gh:
        gh.add_issue("octo/repo", 15, labels=["the-loop: auto-execute"])
        ...  # point integrations.github.api.baseUrl at gh.url
        assert gh.calls("POST")[0].path == "/repos/octo/repo/issues/15/comments"

Routes: ``GET /repos/{o}/{r}``, ``GET /repos/{o}/{r}/issues/{n}``, ``GET /repos/{o}/{r}/pulls/{n}``,
``POST /repos/{o}/{r}/issues``, ``GET|POST /repos/{o}/{r}/issues/{n}/comments``,
``GET /repos/{o}/{r}/issues/{n}/labels``,
``GET /repos/{o}/{r}/issues/comments/{id}``, ``GET /repos/{o}/{r}/pulls/comments/{id}``, ``POST`` reactions on
``issues/comments/{id}``, ``pulls/comments/{id}`` and ``issues/{n}``, ``GET /rate_limit``, and ``POST /graphql``
(a pull request's ``closingIssuesReferences`` only, set with :meth:`FakeGitHub.closes`); for ``init`` and ``doctor``,
``GET /user`` (the token's login), ``GET|POST /repos/{o}/{r}/labels[/{name}]`` and a repository's ``private``,
``has_issues`` and ``permissions``. A token listed in ``scopes`` is a classic one: its answers carry
``X-OAuth-Scopes``, as GitHub's do; any other is fine-grained (no header). A ``prefix`` (such as ``/api/v3``) makes it
look like a GitHub Enterprise Server API.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
REDACTED = "<redacted>"
TOKEN = "t"  # the default token, authenticating as BOT
BOT = "the-loop-bot"


@dataclass
class Recorded:
    """One request as the fake saw it. ``login`` is who the token authenticated as (None: no or a bad token)."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any
    login: str | None
    status: int = 0  # what the fake answered (304: a conditional hit GitHub does not count)


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int | None  # None: answer normally after the delay; 0: close the connection without answering
    delay: float
    remaining: int | None
    headers: dict[str, str] = field(default_factory=dict)  # e.g. X-RateLimit-Remaining / Retry-After
    message: str = "injected fault"


@dataclass
class Item:
    """An issue or a pull request (GitHub numbers both in one sequence per repository)."""

    number: int
    title: str
    state: str
    labels: list[str]
    pull_request: bool
    merged: bool
    body: str
    comments: list[int] = field(default_factory=list)
    reviews: list[dict[str, Any]] = field(default_factory=list)  # pull request reviews (any state)
    author: str = "octocat"
    updated_at: str = "2026-01-01T00:00:00Z"
    closed_by: str | None = None
    state_reason: str | None = None


class FakeGitHub:
    def __init__(
        self, tokens: dict[str, str] | None = None, prefix: str = "", scopes: dict[str, str] | None = None
    ) -> None:
        self.tokens = dict(tokens if tokens is not None else {TOKEN: BOT})
        self.scopes = dict(scopes or {})  # login → its classic token's X-OAuth-Scopes ("repo, read:org")
        self.settings: dict[str, dict[str, Any]] = {}  # lower-cased full name → private, has_issues, hidden_from
        self.labels: dict[str, list[str]] = {}  # lower-cased full name → labels defined on the repository
        self.prefix = prefix.rstrip("/")
        self.requests: list[Recorded] = []
        self.repos: dict[str, str] = {}  # lower-cased full name → full name as created
        self.items: dict[tuple[str, int], Item] = {}
        self.comments: dict[int, dict[str, Any]] = {}  # issue comments and review comments, by id
        self.reactions: list[dict[str, Any]] = []
        self.faults: list[Fault] = []
        self.closing: dict[tuple[str, int], list[tuple[str, int]]] = {}  # PR → issues it closes (GraphQL)
        self.uploads: dict[str, bytes] = {}  # path → bytes: files people attached to comments (user-attachments)
        self.upload_redirects: dict[str, str] = {}  # path → Location: an upload served from elsewhere
        self.lock = threading.RLock()
        self._next_id = 1000
        self._tick = 1767225600  # 2026-01-01T00:00:00Z; every change moves this server clock one second on
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------------------------- lifecycle

    def start(self) -> FakeGitHub:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-github", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the fake is not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The API base URL (``integrations.github.api.baseUrl``)."""
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def config(self) -> dict[str, Any]:
        """The config keys that point the GitHub plugin at this fake."""
        return {"integrations": {"github": {"api": {"baseUrl": self.url}}}}

    # -------------------------------------------------------------------------------------------- data

    def _id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id

    def add_repo(
        self,
        full_name: str,
        *,
        private: bool = False,
        has_issues: bool = True,
        hidden_from: tuple[str, ...] = (),
        labels: tuple[str, ...] = (),
    ) -> None:
        """Create ``full_name`` (again: its settings change only when given). ``hidden_from`` logins get 404 for it,
        as GitHub answers a token without access; ``labels`` are defined on it (an issue's labels are too)."""
        with self.lock:
            key = full_name.lower()
            self.repos[key] = full_name
            settings = self.settings.setdefault(key, {"private": False, "has_issues": True, "hidden_from": ()})
            if private or not has_issues or hidden_from:
                settings.update(private=private, has_issues=has_issues, hidden_from=tuple(hidden_from))
            self.labels.setdefault(key, []).extend(name for name in labels if name not in self.labels[key])

    def add_upload(self, path: str, data: bytes) -> str:
        """A file a person attached to a comment (``/user-attachments/files/<id>/<name>`` …); its URL, which needs a
        token (a private repository's uploads do)."""
        with self.lock:
            self.uploads[path] = data
        return f"http://127.0.0.1:{self.port}{path}"

    def upload_requests(self) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path in self.uploads or r.path in self.upload_redirects]

    def defined_labels(self, full_name: str) -> list[str]:
        """The labels on ``full_name``: those defined on it and those its items carry."""
        with self.lock:
            key = full_name.lower()
            used = [name for (repo, _), item in self.items.items() if repo == key for name in item.labels]
            return list(dict.fromkeys([*self.labels.get(key, []), *used]))

    def add_issue(
        self,
        full_name: str,
        number: int,
        *,
        title: str = "An issue",
        state: str = "open",
        labels: list[str] | tuple[str, ...] = (),
        pull_request: bool = False,
        merged: bool = False,
        body: str = "",
        author: str = "octocat",
    ) -> Item:
        """Add an issue (or, with ``pull_request=True``, a pull request) to ``full_name``, creating the repo."""
        with self.lock:
            self.add_repo(full_name)
            item = Item(number, title, state, list(labels), pull_request, merged, body, author=author)
            item.updated_at = self.stamp()
            self.items[(full_name.lower(), number)] = item
            return item

    def add_comment(self, full_name: str, number: int, body: str, login: str = "octocat", review: bool = False) -> int:
        """Add an issue comment (or a review comment on PR ``number``) and return its id."""
        with self.lock:
            item = self.items[(full_name.lower(), number)]
            comment_id = self._id()
            self.comments[comment_id] = self._comment_json(full_name, number, comment_id, body, login, review)
            item.comments.append(comment_id)
            item.updated_at = self.comments[comment_id]["updated_at"]
            return comment_id

    def add_inline_comment(self, full_name: str, number: int, body: str, path: str, line: int, login: str) -> int:
        """A review comment on a pull request's diff (``GET /pulls/{n}/comments``)."""
        comment_id = self.add_comment(full_name, number, body, login, review=True)
        with self.lock:
            self.comments[comment_id].update(path=path, line=line, node_id=f"PRRC_fake{comment_id}")
        return comment_id

    def add_review(
        self, full_name: str, number: int, body: str, state: str = "COMMENTED", login: str = "octocat"
    ) -> int:
        """A pull request review (``GET /pulls/{n}/reviews``); a PENDING one has no ``submitted_at``."""
        with self.lock:
            item = self.items[(full_name.lower(), number)]
            review_id = self._id()
            stamp = self.stamp()
            item.reviews.append(
                {
                    "id": review_id,
                    "node_id": f"PRR_fake{review_id}",
                    "user": {"login": login, "type": "User"},
                    "body": body,
                    "state": state,
                    "html_url": f"https://github.com/{full_name}/pull/{number}#pullrequestreview-{review_id}",
                    "submitted_at": None if state == "PENDING" else stamp,
                }
            )
            item.updated_at = stamp
            return review_id

    def close(self, full_name: str, number: int, *, by: str | None = None, reason: str = "completed") -> None:
        """Close (a pull request: merge, when it was created ``merged=True``) an item, as ``by``."""
        with self.lock:
            item = self.items[(full_name.lower(), number)]
            item.state, item.closed_by, item.state_reason = "closed", by, reason
            item.updated_at = self.stamp()

    def stamp(self) -> str:
        """The fake server's clock, one second on per change, so ``since`` and ``updated_at`` order strictly."""
        with self.lock:
            self._tick += 1
            return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._tick))

    def conditional_hits(self) -> int:
        """Requests answered 304 (GitHub does not count them against the rate limit)."""
        with self.lock:
            return sum(1 for r in self.requests if r.status == 304)

    def comments_on(self, full_name: str, number: int) -> list[dict[str, Any]]:
        with self.lock:
            item = self.items.get((full_name.lower(), number))
            return [self.comments[i] for i in item.comments] if item else []

    def fault(
        self,
        method: str,
        path: str,
        *,
        status: int | None = None,
        delay: float = 0.0,
        times: int | None = None,
        headers: dict[str, str] | None = None,
        message: str = "injected fault",
    ) -> None:
        """Make requests matching ``method`` and the ``path`` regex (full match, without the prefix) fail with
        ``status`` (0 drops the connection) and/or wait ``delay`` seconds, ``times`` times (None: always);
        ``headers`` and ``message`` go with the failure (rate-limit headers, "Issues are disabled …")."""
        with self.lock:
            self.faults.append(
                Fault(method.upper(), re.compile(path), status, delay, times, dict(headers or {}), message)
            )

    def closes(self, full_name: str, number: int, *issues: tuple[str, int]) -> None:
        """Make PR ``number`` report ``issues`` (``(full name, number)``) as its GraphQL closingIssuesReferences."""
        with self.lock:
            self.closing[(full_name.lower(), number)] = list(issues)

    def _graphql(self, body: Any) -> tuple[int, Any]:
        """``POST /graphql``: only the closingIssuesReferences query (variables owner, name, number)."""
        variables = body.get("variables") if isinstance(body, dict) else None
        if not isinstance(variables, dict) or "closingIssuesReferences" not in str(body.get("query")):
            return 200, {"errors": [{"message": "unsupported query"}]}
        key = (f"{variables.get('owner')}/{variables.get('name')}".lower(), variables.get("number"))
        item = self.items.get(key)  # type: ignore[arg-type]
        if item is None or not item.pull_request:
            return 200, {"data": {"repository": None}, "errors": [{"type": "NOT_FOUND", "message": "not found"}]}
        nodes = [
            {"number": n, "url": f"https://github.com/{repo}/issues/{n}", "repository": {"nameWithOwner": repo}}
            for repo, n in self.closing.get(key, [])  # type: ignore[arg-type]
        ]
        return 200, {"data": {"repository": {"pullRequest": {"closingIssuesReferences": {"nodes": nodes}}}}}

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def calls(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        """The recorded requests, optionally only those of ``method`` and whose path matches the ``path`` regex."""
        with self.lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method.upper()) and (path is None or re.fullmatch(path, r.path))
            ]

    # ------------------------------------------------------------------------------------------- JSON

    def _base(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def _comment_json(
        self, full_name: str, number: int, comment_id: int, body: str, login: str, review: bool
    ) -> dict[str, Any]:
        kind = "pulls" if review else "issues"
        anchor = f"discussion_r{comment_id}" if review else f"issuecomment-{comment_id}"
        page = "pull" if review else "issues"
        stamp = self.stamp()
        return {
            "id": comment_id,
            "node_id": f"IC_fake{comment_id}",
            "url": f"{self._base()}/repos/{full_name}/{kind}/comments/{comment_id}",
            "html_url": f"https://github.com/{full_name}/{page}/{number}#{anchor}",
            "body": body,
            "user": {"login": login, "type": "User"},
            "created_at": stamp,
            "updated_at": stamp,
        }

    def _item_json(self, full_name: str, item: Item) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": item.number + 500000,
            "node_id": f"I_fake{item.number}",
            "number": item.number,
            "title": item.title,
            "state": item.state,
            "body": item.body,
            "url": f"{self._base()}/repos/{full_name}/issues/{item.number}",
            "html_url": f"https://github.com/{full_name}/{'pull' if item.pull_request else 'issues'}/{item.number}",
            "labels": [{"name": name, "color": "ededed"} for name in item.labels],
            "comments": len(item.comments),
            "user": {"login": item.author, "type": "User"},
            "updated_at": item.updated_at,
            "closed_by": {"login": item.closed_by, "type": "User"} if item.closed_by else None,
            "state_reason": item.state_reason,
        }
        if item.pull_request:
            data["pull_request"] = {
                "url": f"{self._base()}/repos/{full_name}/pulls/{item.number}",
                "html_url": data["html_url"],
                "merged_at": "2026-01-01T00:00:00Z" if item.merged else None,
            }
        return data

    def _pull_json(self, full_name: str, item: Item) -> dict[str, Any]:
        data = self._item_json(full_name, item)
        data.pop("pull_request", None)
        data.update(merged=item.merged, merged_at="2026-01-01T00:00:00Z" if item.merged else None, draft=False)
        data["url"] = f"{self._base()}/repos/{full_name}/pulls/{item.number}"
        return data

    # ---------------------------------------------------------------------------------------- routing

    def answer(self, method: str, path: str, body: Any, login: str | None, query: str = "") -> tuple[Any, ...]:
        """The status and JSON body (and extra headers, such as ``Link``) for one authenticated request."""
        with self.lock:
            if method == "POST" and path == "/graphql":
                return self._graphql(body)
            if method == "GET" and path == "/rate_limit":
                core = {"limit": 5000, "remaining": 4999, "reset": int(time.time()) + 3600, "used": 1}
                return 200, {"resources": {"core": core}, "rate": core}
            if method == "GET" and path == "/user":
                return 200, {"login": login, "id": 1, "type": "User", "url": f"{self._base()}/users/{login}"}
            match = re.fullmatch(r"/repos/([^/]+)/([^/]+)(/.*)?", path)
            key = f"{match[1]}/{match[2]}".lower() if match else ""
            if not match or key not in self.repos or login in self.settings.get(key, {}).get("hidden_from", ()):
                return 404, {"message": "Not Found"}
            full_name = self.repos[f"{match[1]}/{match[2]}".lower()]
            rest = match[3] or ""
            if method == "GET" and rest in ("/issues", "/pulls"):
                return self._listing(full_name, rest == "/pulls", parse_qs(query))
            if method == "GET" and (m := re.fullmatch(r"/pulls/(\d+)/(reviews|comments)", rest)):
                return self._pull_surface(full_name, int(m[1]), m[2], parse_qs(query))
            return self._repo_route(method, full_name, rest, body, login, query)

    def _listing(self, full_name: str, pulls_only: bool, query: dict[str, list[str]]) -> tuple[Any, ...]:
        """``GET /issues`` (issues and pull requests, every label required) or ``GET /pulls``, open ones newest
        updated first, paginated with a ``Link`` header."""
        state = query.get("state", ["open"])[0]
        wanted = [name for name in query.get("labels", [""])[0].split(",") if name]
        found = [
            item
            for (repo, _), item in self.items.items()
            if repo == full_name.lower()
            and (state == "all" or item.state == state)
            and (item.pull_request or not pulls_only)
            and all(name in item.labels for name in wanted)
        ]
        found.sort(key=lambda item: (item.updated_at, item.number), reverse=True)
        render = self._pull_json if pulls_only else self._item_json
        path = f"/repos/{full_name}/{'pulls' if pulls_only else 'issues'}"
        return self._page([render(full_name, item) for item in found], query, path)

    def _pull_surface(self, full_name: str, number: int, surface: str, query: dict[str, list[str]]) -> tuple[Any, ...]:
        item = self.items.get((full_name.lower(), number))
        if item is None or not item.pull_request:
            return 404, {"message": "Not Found"}
        if surface == "reviews":
            return self._page(list(item.reviews), query, f"/repos/{full_name}/pulls/{number}/reviews")
        since = query.get("since", [""])[0]
        found = [self.comments[i] for i in item.comments if "/pulls/" in self.comments[i]["url"]]
        found = [c for c in found if c["updated_at"] >= since]
        return self._page(found, query, f"/repos/{full_name}/pulls/{number}/comments")

    def _page(self, rows: list[Any], query: dict[str, list[str]], path: str) -> tuple[Any, ...]:
        per_page = max(1, min(100, int(query.get("per_page", ["30"])[0] or 30)))
        page = max(1, int(query.get("page", ["1"])[0] or 1))
        chunk = rows[(page - 1) * per_page : page * per_page]
        if page * per_page >= len(rows):
            return 200, chunk
        rest = {k: v[0] for k, v in query.items() if k != "page"}
        following = urlencode({**rest, "page": page + 1})
        return 200, chunk, {"Link": f'<{self._base()}{path}?{following}>; rel="next"'}

    def _repo_route(
        self, method: str, full_name: str, rest: str, body: Any, login: str | None, query: str = ""
    ) -> tuple[int, Any]:
        key = full_name.lower()
        owner, name = full_name.split("/")
        if method == "GET" and rest == "":
            settings = self.settings.get(key, {})
            return 200, {
                "id": 1,
                "name": name,
                "full_name": full_name,
                "owner": {"login": owner},
                "private": settings.get("private", False),
                "has_issues": settings.get("has_issues", True),
                "permissions": {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True},
                "html_url": f"https://github.com/{full_name}",
                "url": f"{self._base()}/repos/{full_name}",
            }
        if m := re.fullmatch(r"/labels(?:/([^/]+))?", rest):
            return self._label_route(method, full_name, unquote(m[1]) if m[1] else None, body)
        if m := re.fullmatch(r"/(issues|pulls)/comments/(\d+)(/reactions)?", rest):
            comment = self.comments.get(int(m[2]))
            review = m[1] == "pulls"
            if (
                comment is None
                or ("/pulls/" in comment["url"]) != review
                or f"/repos/{full_name}/" not in comment["url"]
            ):
                return 404, {"message": "Not Found"}
            if m[3] and method == "POST":
                return self._react(("review-comment" if review else "issue-comment", key, int(m[2])), body, login)
            if not m[3] and method == "GET":
                return 200, comment
            return 404, {"message": "Not Found"}
        if rest == "/issues" and method == "POST":  # a new issue: the next free number, its labels as given
            title = body.get("title") if isinstance(body, dict) else None
            if not isinstance(title, str) or not title:
                return 422, {"message": "Validation Failed"}
            number = 1 + max((n for (k, n) in self.items if k == key), default=0)
            item = Item(
                number, title, "open", list(body.get("labels") or []), False, False, str(body.get("body") or "")
            )
            item.author, item.updated_at = login or "?", self.stamp()
            self.items[(key, number)] = item
            return 201, self._item_json(full_name, item)
        if m := re.fullmatch(r"/(issues|pulls)/(\d+)(/comments|/labels|/reactions)?", rest):
            item = self.items.get((key, int(m[2])))
            if item is None or (m[1] == "pulls" and not item.pull_request):
                return 404, {"message": "Not Found"}
            sub = m[3] or ""
            if m[1] == "pulls":
                return (200, self._pull_json(full_name, item)) if method == "GET" and not sub else (404, {})
            if method == "GET" and sub == "":
                return 200, self._item_json(full_name, item)
            if method == "GET" and sub == "/labels":
                return 200, [{"name": label, "color": "ededed"} for label in item.labels]
            if method == "GET" and sub == "/comments":
                since = parse_qs(query).get("since", [""])[0]
                found = [self.comments[i] for i in item.comments if "/pulls/" not in self.comments[i]["url"]]
                page = [c for c in found if c["updated_at"] >= since]
                return self._page(page, parse_qs(query), f"/repos/{full_name}{rest}")  # type: ignore[return-value]
            if method == "POST" and sub == "/comments":
                text = body.get("body") if isinstance(body, dict) else None
                if not isinstance(text, str) or not text:
                    return 422, {"message": "Validation Failed"}
                comment_id = self._id()
                comment = self._comment_json(full_name, item.number, comment_id, text, login or "?", False)
                self.comments[comment_id] = comment
                item.comments.append(comment_id)
                item.updated_at = comment["updated_at"]
                return 201, comment
            if method == "POST" and sub == "/reactions":
                return self._react(("issue", key, item.number), body, login)
        return 404, {"message": "Not Found"}

    def _label_route(self, method: str, full_name: str, name: str | None, body: Any) -> tuple[int, Any]:
        defined = self.defined_labels(full_name)
        if method == "GET" and name is None:
            return 200, [{"name": label, "color": "ededed"} for label in defined]
        if method == "GET" and name is not None:
            found = next((label for label in defined if label.lower() == name.lower()), None)
            return (200, {"name": found, "color": "ededed"}) if found else (404, {"message": "Not Found"})
        if method == "POST" and name is None:
            wanted = body.get("name") if isinstance(body, dict) else None
            if not isinstance(wanted, str) or not wanted or any(label.lower() == wanted.lower() for label in defined):
                return 422, {"message": "Validation Failed"}
            self.labels.setdefault(full_name.lower(), []).append(wanted)
            return 201, {"name": wanted, "color": body.get("color", "ededed"), "description": body.get("description")}
        return 404, {"message": "Not Found"}

    def _react(self, target: tuple[str, str, int], body: Any, login: str | None) -> tuple[int, Any]:
        content = body.get("content") if isinstance(body, dict) else None
        if content not in REACTIONS:
            return 422, {"message": "Validation Failed"}
        kind, repo, object_id = target
        for reaction in self.reactions:
            if (reaction["kind"], reaction["repository"], reaction["id"]) == target and (
                reaction["content"],
                reaction["login"],
            ) == (content, login):
                return 200, {"id": reaction["reaction_id"], "content": content, "user": {"login": login}}
        reaction_id = self._id()
        self.reactions.append(
            {
                "kind": kind,
                "repository": repo,
                "id": object_id,
                "content": content,
                "login": login,
                "reaction_id": reaction_id,
            }
        )
        return 201, {"id": reaction_id, "content": content, "user": {"login": login}}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub
    protocol_version = "HTTP/1.1"  # keep-alive, as PyGithub's session expects
    disable_nagle_algorithm = True  # headers and body are separate writes: without this, each answer waits ~40 ms

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _handle(self) -> None:
        fake = self.fake
        parts = urlsplit(self.path)
        path = parts.path
        if fake.prefix and path.startswith(fake.prefix + "/"):
            path = path[len(fake.prefix) :]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        authorization = self.headers.get("Authorization") or ""
        token = authorization.split(" ", 1)[1].strip() if " " in authorization else ""
        login = fake.tokens.get(token) if token else None
        headers = {k: (REDACTED if k.lower() == "authorization" else v) for k, v in self.headers.items()}
        recorded = Recorded(self.command, path, parts.query, headers, body, login)
        self._recorded = recorded
        with fake.lock:
            fake.requests.append(recorded)
            fault = next((f for f in fake.faults if f.method == self.command and f.pattern.fullmatch(path)), None)
            if fault is not None and fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    fake.faults.remove(fault)
        if fault is not None:
            time.sleep(fault.delay)
            if fault.status == 0:
                self.close_connection = True
                self.connection.close()
                return
            if fault.status is not None:
                self._send(fault.status, {"message": fault.message}, fault.headers)
                return
        if self.command == "GET" and path in fake.upload_redirects:
            self._send(302, {}, {"Location": fake.upload_redirects[path]})
            return
        if self.command == "GET" and path in fake.uploads:
            self._send_bytes(fake.uploads[path] if login is not None else None)
            return
        if fake.tokens and login is None:  # no token, or one the fake does not know
            self._send(401, {"message": "Bad credentials"})
            return
        result = fake.answer(self.command, path, body, login, parts.query)
        extra = dict(result[2]) if len(result) > 2 else {}
        if login in fake.scopes:
            extra["X-OAuth-Scopes"] = fake.scopes[login]
        self._send(result[0], result[1], extra)

    def _send_bytes(self, data: bytes | None) -> None:
        """An upload's bytes, or 404 without a valid token (as GitHub answers for a private repository's)."""
        self._recorded.status = 200 if data is not None else 404
        payload = data if data is not None else b"Not Found"
        self.send_response(self._recorded.status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send(self, status: int, answer: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(answer).encode()
        etag = f'"{hashlib.sha1(data).hexdigest()}"'
        if self.command == "GET" and status == 200 and self.headers.get("If-None-Match") == etag:
            status, data = 304, b""  # unchanged: a conditional hit, free on GitHub
        self._recorded.status = status
        extra = dict(extra or {})
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if self.command == "GET" and status in (200, 304):
            self.send_header("ETag", etag)
        self.send_header("X-RateLimit-Limit", "5000")
        self.send_header("X-RateLimit-Remaining", extra.pop("X-RateLimit-Remaining", "4999"))
        self.send_header("X-RateLimit-Reset", extra.pop("X-RateLimit-Reset", str(int(time.time()) + 3600)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle
