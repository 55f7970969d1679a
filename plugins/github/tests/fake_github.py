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
``GET|POST /repos/{o}/{r}/issues/{n}/comments``, ``GET /repos/{o}/{r}/issues/{n}/labels``,
``GET /repos/{o}/{r}/issues/comments/{id}``, ``GET /repos/{o}/{r}/pulls/comments/{id}``, ``POST`` reactions on
``issues/comments/{id}``, ``pulls/comments/{id}`` and ``issues/{n}``, and ``GET /rate_limit``. A ``prefix`` (such
as ``/api/v3``) makes it look like a GitHub Enterprise Server API.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

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


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int | None  # None: answer normally after the delay; 0: close the connection without answering
    delay: float
    remaining: int | None


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


class FakeGitHub:
    def __init__(self, tokens: dict[str, str] | None = None, prefix: str = "") -> None:
        self.tokens = dict(tokens if tokens is not None else {TOKEN: BOT})
        self.prefix = prefix.rstrip("/")
        self.requests: list[Recorded] = []
        self.repos: dict[str, str] = {}  # lower-cased full name → full name as created
        self.items: dict[tuple[str, int], Item] = {}
        self.comments: dict[int, dict[str, Any]] = {}  # issue comments and review comments, by id
        self.reactions: list[dict[str, Any]] = []
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self._next_id = 1000
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

    def add_repo(self, full_name: str) -> None:
        with self.lock:
            self.repos[full_name.lower()] = full_name

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
    ) -> Item:
        """Add an issue (or, with ``pull_request=True``, a pull request) to ``full_name``, creating the repo."""
        with self.lock:
            self.add_repo(full_name)
            item = Item(number, title, state, list(labels), pull_request, merged, body)
            self.items[(full_name.lower(), number)] = item
            return item

    def add_comment(self, full_name: str, number: int, body: str, login: str = "octocat", review: bool = False) -> int:
        """Add an issue comment (or a review comment on PR ``number``) and return its id."""
        with self.lock:
            item = self.items[(full_name.lower(), number)]
            comment_id = self._id()
            self.comments[comment_id] = self._comment_json(full_name, number, comment_id, body, login, review)
            item.comments.append(comment_id)
            return comment_id

    def comments_on(self, full_name: str, number: int) -> list[dict[str, Any]]:
        with self.lock:
            item = self.items.get((full_name.lower(), number))
            return [self.comments[i] for i in item.comments] if item else []

    def fault(
        self, method: str, path: str, *, status: int | None = None, delay: float = 0.0, times: int | None = None
    ) -> None:
        """Make requests matching ``method`` and the ``path`` regex (full match, without the prefix) fail with
        ``status`` (0 drops the connection) and/or wait ``delay`` seconds, ``times`` times (None: always)."""
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(path), status, delay, times))

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
        return {
            "id": comment_id,
            "node_id": f"IC_fake{comment_id}",
            "url": f"{self._base()}/repos/{full_name}/{kind}/comments/{comment_id}",
            "html_url": f"https://github.com/{full_name}/{page}/{number}#{anchor}",
            "body": body,
            "user": {"login": login, "type": "User"},
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
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
            "user": {"login": "octocat", "type": "User"},
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

    def answer(self, method: str, path: str, body: Any, login: str | None) -> tuple[int, Any]:
        """The status and JSON body for one authenticated request."""
        with self.lock:
            if method == "GET" and path == "/rate_limit":
                core = {"limit": 5000, "remaining": 4999, "reset": int(time.time()) + 3600, "used": 1}
                return 200, {"resources": {"core": core}, "rate": core}
            match = re.fullmatch(r"/repos/([^/]+)/([^/]+)(/.*)?", path)
            if not match or f"{match[1]}/{match[2]}".lower() not in self.repos:
                return 404, {"message": "Not Found"}
            full_name = self.repos[f"{match[1]}/{match[2]}".lower()]
            rest = match[3] or ""
            return self._repo_route(method, full_name, rest, body, login)

    def _repo_route(self, method: str, full_name: str, rest: str, body: Any, login: str | None) -> tuple[int, Any]:
        key = full_name.lower()
        owner, name = full_name.split("/")
        if method == "GET" and rest == "":
            return 200, {
                "id": 1,
                "name": name,
                "full_name": full_name,
                "owner": {"login": owner},
                "html_url": f"https://github.com/{full_name}",
                "url": f"{self._base()}/repos/{full_name}",
            }
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
                return 200, [self.comments[i] for i in item.comments]
            if method == "POST" and sub == "/comments":
                text = body.get("body") if isinstance(body, dict) else None
                if not isinstance(text, str) or not text:
                    return 422, {"message": "Validation Failed"}
                comment_id = self._id()
                comment = self._comment_json(full_name, item.number, comment_id, text, login or "?", False)
                self.comments[comment_id] = comment
                item.comments.append(comment_id)
                return 201, comment
            if method == "POST" and sub == "/reactions":
                return self._react(("issue", key, item.number), body, login)
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
        with fake.lock:
            fake.requests.append(Recorded(self.command, path, parts.query, headers, body, login))
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
                self._send(fault.status, {"message": "injected fault"})
                return
        if fake.tokens and login is None:  # no token, or one the fake does not know
            self._send(401, {"message": "Bad credentials"})
            return
        status, answer = fake.answer(self.command, path, body, login)
        self._send(status, answer)

    def _send(self, status: int, answer: Any) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-RateLimit-Limit", "5000")
        self.send_header("X-RateLimit-Remaining", "4999")
        self.send_header("X-RateLimit-Reset", str(int(time.time()) + 3600))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle
