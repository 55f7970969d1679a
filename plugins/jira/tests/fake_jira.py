"""A fake Jira REST API on 127.0.0.1 (E §A.6 fixture): stdlib HTTP server, real sockets, recorded requests.

Serves ``myself``, ``project/{key}`` (a key in ``projects`` or of an issue), ``search/jql`` (Cloud,
``nextPageToken``), ``search`` (DC, ``startAt``/``total``), issue get/put,
comments (listed in pages, by id, posted), transitions (list, post). Each request is recorded with its method, path,
query, headers and body. ``fail(method, pattern, status)`` injects an error answer (optionally echoing the request
headers, as a careless proxy would) for the next ``times`` matching requests; ``slow(method, pattern, seconds)`` answers
matching requests normally, but only after ``seconds``; ``drop(method, pattern)`` applies the next matching request
and then hangs up without answering (a connection lost after Jira acted).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

BOT = "acc-bot"


def adf(text: str) -> dict[str, Any]:
    """A plain-text comment body as ADF, one paragraph per blank-line-separated block."""
    blocks = [b for b in text.split("\n\n") if b]
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": b}]} for b in blocks],
    }


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Issue:
    key: str
    id: str
    summary: str
    labels: list[str]
    category: str = "new"
    comments: list[dict[str, Any]] = field(default_factory=list)
    transitions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    times: int
    echo_headers: bool
    drop: bool = False


class FakeJira:
    def __init__(self) -> None:
        self.issues: dict[str, Issue] = {}
        self.moved: dict[str, str] = {}  # old key → the key Jira now answers under
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.delays: list[tuple[str, re.Pattern[str], float]] = []
        self.myself = {"accountId": BOT, "key": "bot", "name": "bot"}
        self.projects: set[str] = set()  # project keys GET project/{key} knows, besides those of its issues
        self._next_id = 10000
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    # ------------------------------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeJira:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---------------------------------------------------------------------------------------------- data

    def add_issue(self, key: str, *, summary: str = "A ticket", labels: list[str] | None = None) -> Issue:
        self._next_id += 1
        issue = Issue(key=key, id=str(self._next_id), summary=summary, labels=list(labels or []))
        issue.transitions = [
            {"id": "11", "name": "Start", "to": {"name": "In Progress", "statusCategory": {"key": "indeterminate"}}},
            {"id": "31", "name": "Done", "to": {"name": "Done", "statusCategory": {"key": "done"}}},
        ]
        self.issues[key] = issue
        return issue

    def add_comment(self, key: str, text: str | dict[str, Any], author: str, comment_id: int | None = None) -> str:
        with self._lock:
            if comment_id is None:
                self._next_id += 1
                comment_id = self._next_id
            body = text if isinstance(text, dict) else adf(text)
            self.issues[key].comments.append(
                {
                    "id": str(comment_id),
                    "author": {"accountId": author, "key": author, "name": author},
                    "body": body,
                    "created": f"2026-11-30T10:{len(self.issues[key].comments):02d}:00.000+0000",
                }
            )
        return str(comment_id)

    def fail(self, method: str, pattern: str, status: int, *, times: int = 1, echo_headers: bool = False) -> None:
        self.faults.append(Fault(method, re.compile(pattern), status, times, echo_headers))

    def drop(self, method: str, pattern: str, *, times: int = 1) -> None:
        self.faults.append(Fault(method, re.compile(pattern), 0, times, False, drop=True))

    def slow(self, method: str, pattern: str, seconds: float) -> None:
        self.delays.append((method, re.compile(pattern), seconds))

    def seen(self, method: str, pattern: str) -> list[Request]:
        regex = re.compile(pattern)
        return [r for r in self.requests if r.method == method and regex.search(r.path)]

    # ------------------------------------------------------------------------------------------- answers

    def _issue_json(self, issue: Issue, version: str) -> dict[str, Any]:
        return {
            "id": issue.id,
            "key": issue.key,
            "self": f"{self.url}/rest/api/{version}/issue/{issue.id}",
            "fields": {
                "summary": issue.summary,
                "labels": list(issue.labels),
                "status": {"name": issue.category, "statusCategory": {"key": issue.category}},
            },
        }

    def _find(self, key_or_id: str) -> Issue | None:
        key_or_id = self.moved.get(key_or_id, key_or_id)
        for issue in self.issues.values():
            if key_or_id in (issue.key, issue.id):
                return issue
        return None

    def _search(self, jql: str) -> list[Issue]:
        project = re.search(r'project = "([^"]+)"', jql)
        labels = re.findall(r'labels = "((?:[^"\\]|\\.)*)"', jql)
        found = [
            issue
            for issue in self.issues.values()
            if project
            and issue.key.startswith(project.group(1) + "-")
            and all(label in issue.labels for label in labels)
            and issue.category != "done"
        ]
        return found

    def answer(self, request: Request) -> tuple[int, Any]:
        match = re.match(r"^/rest/api/(2|3)/(.*)$", request.path)
        if not match:
            return 404, {"errorMessages": ["no such route"]}
        version, rest = match.groups()
        query = request.query
        if rest == "myself":
            return 200, self.myself
        if project_key := re.fullmatch(r"project/([A-Z][A-Z0-9_]*)", rest):
            key = project_key.group(1)
            known = key in self.projects or any(issue.key.startswith(key + "-") for issue in self.issues.values())
            return (200, {"key": key, "name": f"Project {key}"}) if known else (404, {"errorMessages": ["No project"]})
        if rest in ("search/jql", "search"):
            found = self._search(query.get("jql", ""))
            size = int(query.get("maxResults", "50"))
            if rest == "search/jql":
                start = int(query.get("nextPageToken") or 0)
                page = found[start : start + size]
                last = start + size >= len(found)
                body: dict[str, Any] = {"issues": [self._issue_json(i, version) for i in page], "isLast": last}
                if not last:
                    body["nextPageToken"] = str(start + size)
                return 200, body
            start = int(query.get("startAt", "0"))
            page = found[start : start + size]
            return 200, {"issues": [self._issue_json(i, version) for i in page], "total": len(found), "startAt": start}
        parts = rest.split("/")
        if parts[0] != "issue":
            return 404, {"errorMessages": ["no such route"]}
        if len(parts) == 1 and request.method == "POST":
            fields = (request.body or {}).get("fields", {})
            key = f"{fields.get('project', {}).get('key', 'PROJ')}-{len(self.issues) + 100}"
            self.add_issue(key, summary=fields.get("summary", ""), labels=fields.get("labels", []))
            return 201, {"key": key, "id": self.issues[key].id}
        issue = self._find(parts[1]) if len(parts) > 1 else None
        if issue is None:
            return 404, {"errorMessages": ["Issue does not exist or you do not have permission to see it."]}
        if len(parts) == 2:
            if request.method == "GET":
                return 200, self._issue_json(issue, version)
            if request.method == "PUT":
                for op in ((request.body or {}).get("update") or {}).get("labels") or []:
                    if "add" in op and op["add"] not in issue.labels:
                        issue.labels.append(op["add"])
                    if "remove" in op and op["remove"] in issue.labels:
                        issue.labels.remove(op["remove"])
                return 204, None
        if parts[2] == "comment":
            if len(parts) == 4:
                for comment in issue.comments:
                    if comment["id"] == parts[3]:
                        return 200, comment
                return 404, {"errorMessages": ["no such comment"]}
            if request.method == "POST":
                comment_id = self.add_comment(issue.key, (request.body or {}).get("body"), self.myself["accountId"])
                return 201, {"id": comment_id}
            start = int(query.get("startAt", "0"))
            size = int(query.get("maxResults", "50"))
            page = issue.comments[start : start + size]
            return 200, {"comments": page, "startAt": start, "maxResults": size, "total": len(issue.comments)}
        if parts[2] == "transitions":
            if request.method == "POST":
                wanted = ((request.body or {}).get("transition") or {}).get("id")
                for transition in issue.transitions:
                    if transition["id"] == wanted:
                        issue.category = transition["to"]["statusCategory"]["key"]
                        return 204, None
                return 400, {"errorMessages": ["no such transition"]}
            return 200, {"transitions": issue.transitions}
        return 404, {"errorMessages": ["no such route"]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: without this, Nagle + delayed ACK cost 40 ms a request.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                request = Request(
                    self.command, parts.path, query, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with fake._lock:
                    fake.requests.append(request)
                    fault = next(
                        (
                            f
                            for f in fake.faults
                            if f.times > 0 and f.method == self.command and f.pattern.search(parts.path)
                        ),
                        None,
                    )
                    if fault is not None:
                        fault.times -= 1
                for method, pattern, seconds in list(fake.delays):
                    if method == self.command and pattern.search(parts.path):
                        time.sleep(seconds)
                if fault is not None and fault.drop:
                    fake.answer(request)  # acted on, then the connection is lost before the answer
                    self.close_connection = True
                    return
                if fault is not None:
                    status = fault.status
                    answer: Any = {"errorMessages": [f"injected {status}"]}
                    if fault.echo_headers:
                        answer["headers"] = dict(self.headers.items())
                else:
                    try:
                        status, answer = fake.answer(request)
                    except Exception as exc:  # a fake bug: say so loudly
                        status, answer = 599, {"errorMessages": [repr(exc)]}
                data = json.dumps(answer).encode() if answer is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a timeout test)
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        return Handler
