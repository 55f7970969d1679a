"""The one Jira client: a thin wrapper around the ``jira`` library's ``JIRA`` (J5-J9, J12, J24, J27, J29).

Every request is placed first (:func:`the_loop_jira.refs.place`), so a credential only ever goes to the configured
site's server. Credentials are read from the named env vars at each call; the SDK object is rebuilt when they change,
so rotating a token needs no restart. Every failure becomes one :class:`JiraError` carrying the HTTP status and the
server's answer, scrubbed — never the library's exception text, which includes the request headers — and the
library's own loggers are scrubbed too. Callers get plain dataclasses, never SDK resources.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from the_loop.config import ConfigError
from the_loop.refs import WorkItemRef
from the_loop_jira import markup
from the_loop_jira.config import safe_label
from the_loop_jira.refs import DIGITS, browse_url, comment_url, issue_key, place, ref_for

if TYPE_CHECKING:
    from jira import JIRA

    from the_loop_jira.config import JiraSettings

__all__ = [
    "CredentialsMissing",
    "JiraClient",
    "JiraComment",
    "JiraError",
    "JiraIssue",
    "JiraTransition",
    "jira_label",
    "scrub",
]

TIMEOUT_SECONDS = 30  # every call's (the library takes one timeout per session, none per request) …
POLL_TIMEOUT_SECONDS = 60  # … so the poller reads through a client of its own with the longer one (J7)
MAX_RETRIES = 2
MAX_RETRY_DELAY = 10  # the library's 429/503 backoff, capped: a poll cycle must not stall for minutes
PAGE = 100
MAX_ISSUES = 200
MAX_COMMENTS = 5000
ERROR_CHARS = 300
SCRUBBED = "[redacted]"
LOGGERS = ("jira", "jira.resilientsession")


class JiraError(RuntimeError):
    """A Jira call failed: ``status`` is the HTTP status, or None when the server was not reached."""

    def __init__(self, message: str, status: int | None = None, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.timed_out = timed_out

    @property
    def transient(self) -> bool:
        """Worth asking again later: not reached, throttled, or a server-side failure."""
        return self.status is None or self.status == 429 or self.status >= 500

    @property
    def throttled(self) -> bool:
        """The site asked us to slow down (429) or did not answer in time: stop asking it for now."""
        return self.status == 429 or self.timed_out


class CredentialsMissing(ConfigError):
    """No value in any of the named env vars; the message names the variables, never a value."""


# ------------------------------------------------------------------------------------------------ scrubbing

_SECRETS: set[str] = set()
_SECRETS_LOCK = threading.Lock()
_AUTH_HEADER = re.compile(r"(?i)(['\"]?authorization['\"]?\s*[:=]\s*['\"]?)(basic|bearer)?\s*[^'\",}\s]*")
_AUTH_ARGS = re.compile(r"(?i)(basic_auth\s*=\s*)\([^)]*\)|(token_auth\s*=\s*)\S+")


def _remember(*values: str) -> None:
    with _SECRETS_LOCK:
        _SECRETS.update(v for v in values if v and len(v) >= 4)


def scrub(text: str) -> str:
    """``text`` without Authorization values, ``basic_auth=(…)``/``token_auth=…``, nor any credential the client
    has used (the token, the email, base64 of ``email:token``)."""
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{SCRUBBED}", text)
    text = _AUTH_ARGS.sub(lambda m: f"{m.group(1) or m.group(2)}{SCRUBBED}", text)
    with _SECRETS_LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        text = text.replace(secret, SCRUBBED)
    return text


class _ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        record.msg, record.args = scrub(message), ()
        if record.exc_info:  # a formatted traceback would carry the library's exception text
            record.exc_info, record.exc_text = None, None
        return True


_FILTER = _ScrubFilter()


def _install_filter() -> None:
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


# -------------------------------------------------------------------------------------------- plain types


@dataclass(frozen=True)
class JiraIssue:
    key: str
    summary: str
    labels: tuple[str, ...]
    status_category: str  # new | indeterminate | done
    description_md: str = ""
    moved_to: str = ""  # the key Jira answered under, when it is not the one asked for
    url: str = ""
    self_url: str = ""


@dataclass(frozen=True)
class JiraComment:
    id: str
    author_id: str
    body_md: str
    created: str
    url: str
    is_self: bool = False


@dataclass(frozen=True)
class JiraTransition:
    id: str
    name: str
    to_status: str
    to_category: str


def jira_label(label: str) -> str:
    """J27's Jira-safe form (:func:`the_loop_jira.config.safe_label`), as a :class:`ConfigError` when it has none."""
    try:
        return safe_label(label)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def search_jql(project: str, labels: Sequence[str]) -> str:
    """J10: one clause per arming label; every value validated (project key) or quoted; nothing from a ticket."""
    clauses = [f"project = {_quote(project)}", *(f"labels = {_quote(jira_label(label))}" for label in labels)]
    return " AND ".join(clauses) + " AND statusCategory != Done ORDER BY updated DESC"


def _same_origin(url: str, server: str) -> bool:
    """Scheme, host and port equal — a bare prefix would let ``https://site.example.evil`` through."""
    a, b = urlsplit(url), urlsplit(server)
    try:
        ports = [u.port or {"http": 80, "https": 443}.get(u.scheme) for u in (a, b)]
        return (a.scheme, a.hostname, ports[0]) == (b.scheme, b.hostname, ports[1]) and bool(a.hostname)
    except ValueError:  # an unparsable port
        return False


# ----------------------------------------------------------------------------------------------- client


class JiraClient:
    """All Jira I/O for one configuration. Thread-safe enough for the receiver: the SDK object is rebuilt under a
    lock and only ever replaced, never mutated."""

    def __init__(self, settings: JiraSettings, *, timeout: float = TIMEOUT_SECONDS) -> None:
        self.settings = settings
        self.timeout = timeout
        self._lock = threading.Lock()
        self._sdk: JIRA | None = None
        self._identity: tuple[str, str, str] | None = None
        self._myself: str | None = None
        _install_filter()

    # ---------------------------------------------------------------------------------------- credentials

    def _first(self, names: Iterable[str]) -> str:
        for name in names:
            value = os.environ.get(name, "").strip()
            if value:
                return value
        return ""

    def credentials(self) -> tuple[str, str]:
        """(email, token) read now (J6); a missing one names the variables."""
        api = self.settings.api
        token = self._first(api.token_env)
        if not token:
            raise CredentialsMissing(
                f"no Jira token: set {' or '.join(api.token_env) or 'integrations.jira.api.tokenEnv'}"
            )
        email = ""
        if self.settings.cloud:
            email = self._first(api.email_env)
            if not email:
                raise CredentialsMissing(
                    f"no Jira account e-mail: set {' or '.join(api.email_env) or 'integrations.jira.api.emailEnv'}"
                )
            _remember(email, base64.b64encode(f"{email}:{token}".encode()).decode())
        _remember(token)
        return email, token

    def sdk(self) -> JIRA:
        """The ``JIRA`` object for the current credentials (J5, J7), rebuilt when they changed."""
        email, token = self.credentials()
        identity = (self.settings.deployment, email, token)
        with self._lock:
            if self._sdk is not None and self._identity == identity:
                return self._sdk
            from jira import JIRA

            auth: dict[str, Any] = {"basic_auth": (email, token)} if self.settings.cloud else {"token_auth": token}
            try:
                sdk = JIRA(
                    server=self.settings.server(),
                    options={"rest_api_version": self.settings.rest_version, "check_update": False},
                    get_server_info=False,
                    max_retries=MAX_RETRIES,
                    timeout=self.timeout,
                    **auth,
                )
            except Exception as exc:
                raise JiraError(f"Jira client not built: {type(exc).__name__}") from None
            sdk._session.max_retry_delay = MAX_RETRY_DELAY
            # Without the server-info probe the library cannot tell Cloud apart, and pages /search/jql wrongly.
            sdk.deploymentType = "Cloud" if self.settings.cloud else "Server"
            self._sdk, self._identity, self._myself = sdk, identity, None
            return sdk

    # ------------------------------------------------------------------------------------------- requests

    def _url(self, path: str) -> str:
        return f"{self.settings.server()}/rest/api/{self.settings.rest_version}/{path}"

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        url: str | None = None,
    ) -> Any:
        """One REST call through the SDK's session (auth, retries); JSON back, or :class:`JiraError`. Only a GET is
        retried: the library retries a dropped connection for any verb, which could post a comment twice."""
        from jira.exceptions import JIRAError
        from jira.resilientsession import raise_on_error
        from requests import RequestException, Session, Timeout

        sdk = self.sdk()
        target = url or self._url(path)
        shown = f"{method} /rest/api/{self.settings.rest_version}/{path}"
        data = json.dumps(body) if body is not None else None
        try:
            if method == "GET":
                response = sdk._session.request(method, target, params=params, data=data)
            else:  # the plain requests call underneath: same auth and headers, one attempt
                response = Session.request(
                    sdk._session, method, target, params=params, data=data, timeout=sdk._session.timeout
                )
                raise_on_error(response)
        except JIRAError as exc:
            text = scrub(" ".join(str(exc.text or "").split()))[:ERROR_CHARS]
            raise JiraError(f"Jira {shown}: {exc.status_code} {text}".rstrip(), exc.status_code) from None
        except RequestException as exc:  # a timeout included: ``unreachable (ReadTimeout)``
            timed_out = isinstance(exc, Timeout)
            raise JiraError(f"Jira {shown}: unreachable ({type(exc).__name__})", timed_out=timed_out) from None
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise JiraError(f"Jira {shown}: {response.status_code} answer is not JSON", response.status_code) from None

    # ------------------------------------------------------------------------------------------- identity

    def myself(self) -> str | None:
        """The service account's id (Cloud ``accountId``, DC ``key``), cached per credential. None when Jira will
        not say (J13: no relays then, the marker alone tells self); a failure that may pass raises, so the caller
        retries rather than judge a relayed command as a stranger's and drop it for good."""
        self.sdk()
        if self._myself is None:
            try:
                data = self._request("GET", "myself") or {}
            except JiraError as exc:
                if exc.transient:
                    raise
                return None
            found = data.get("accountId") if self.settings.cloud else data.get("key") or data.get("name")
            self._myself = str(found) if found else None
        return self._myself

    def account(self) -> dict[str, Any]:
        """Who the credentials are, as Jira answers ``myself`` (``accountId`` on Cloud, ``key`` on Data Center);
        :class:`JiraError` when it will not say (401 for refused credentials)."""
        found = self._request("GET", "myself")
        return found if isinstance(found, dict) else {}

    def project(self, key: str) -> dict[str, Any]:
        """Project ``key`` as Jira answers it (``key``, ``name``); :class:`JiraError` (404) when the credentials
        cannot see it."""
        found = self._request("GET", f"project/{key}")
        return found if isinstance(found, dict) else {}

    # ----------------------------------------------------------------------------------------------- read

    def _issue_from(self, ref: WorkItemRef, data: dict[str, Any]) -> JiraIssue:
        fields = data.get("fields") or {}
        status = (fields.get("status") or {}).get("statusCategory") or {}
        key = str(data.get("key") or "")
        description = fields.get("description")
        return JiraIssue(
            key=key,
            summary=str(fields.get("summary") or ""),
            labels=tuple(str(label) for label in fields.get("labels") or ()),
            status_category=str(status.get("key") or "new"),
            description_md=self._read_body(description) if description else "",
            moved_to=key if key and key != issue_key(ref) else "",
            url=browse_url(ref) or "",
            self_url=str(data.get("self") or ""),
        )

    def issue(self, ref: WorkItemRef) -> JiraIssue:
        ref = place(ref, self.settings)
        data = self._request("GET", f"issue/{issue_key(ref)}", params={"fields": "summary,labels,status,description"})
        return self._issue_from(ref, data or {})

    def search(self, project: str, labels: Sequence[str]) -> list[JiraIssue]:
        """J10: the armed, not-done tickets of one project (≤ :data:`MAX_ISSUES`), each re-checked."""
        if project not in self.settings.projects:
            raise JiraError(f"project {project} is not under integrations.jira.projects; nothing was sent")
        jql = search_jql(project, labels)
        wanted = {jira_label(label) for label in labels}
        found: list[dict[str, Any]] = []
        if self.settings.cloud:
            token: str | None = None
            while len(found) < MAX_ISSUES:
                params: dict[str, Any] = {"jql": jql, "fields": "summary,labels,status", "maxResults": PAGE}
                if token:
                    params["nextPageToken"] = token
                page = self._request("GET", "search/jql", params=params) or {}
                found += page.get("issues") or []
                token = page.get("nextPageToken")
                if page.get("isLast", True) or not token:
                    break
        else:
            start = 0
            while len(found) < MAX_ISSUES:
                params = {"jql": jql, "fields": "summary,labels,status", "maxResults": PAGE, "startAt": start}
                page = self._request("GET", "search", params=params) or {}
                issues = page.get("issues") or []
                found += issues
                start += len(issues)
                if not issues or start >= int(page.get("total") or 0):
                    break
        issues = []
        for data in found[:MAX_ISSUES]:
            ref = ref_for(self.settings.site, str(data.get("key") or ""))
            if ref is None or ref.owner != project:
                continue
            issue = self._issue_from(ref, data)
            if wanted <= set(issue.labels) and issue.status_category != "done":
                issues.append(issue)
        return issues

    def _read_body(self, body: Any, *, service: bool = False) -> str:
        return markup.to_markdown(body, service_account=service)

    def _comment(self, ref: WorkItemRef, data: dict[str, Any], me: str | None) -> JiraComment:
        author = data.get("author") or {}
        author_id = str(author.get("accountId") if self.settings.cloud else author.get("key") or author.get("name"))
        author_id = "" if author_id == "None" else author_id
        service = bool(me) and author_id == me
        comment_id = str(data.get("id") or "")
        return JiraComment(
            id=comment_id,
            author_id=author_id,
            body_md=self._read_body(data.get("body"), service=service),
            created=str(data.get("created") or ""),
            url=comment_url(ref, comment_id),
            is_self=service,
        )

    def comments(self, ref: WorkItemRef) -> list[JiraComment]:
        """J12: the whole thread, oldest first; a failing page raises (never a partial list)."""
        ref = place(ref, self.settings)
        me = self.myself()
        raw: list[dict[str, Any]] = []
        start = 0
        while True:
            page = (
                self._request(
                    "GET",
                    f"issue/{issue_key(ref)}/comment",
                    params={"startAt": start, "maxResults": PAGE, "orderBy": "created"},
                )
                or {}
            )
            items = page.get("comments") or []
            raw += items
            start += len(items)
            if not items or start >= int(page.get("total") or 0):
                break
        if len(raw) > MAX_COMMENTS:
            from the_loop import events

            events.emit("poll.item_error", level="warning", work_item=str(ref), error="more than 5000 comments")
            raw = raw[-MAX_COMMENTS:]
        return [self._comment(ref, item, me) for item in raw]

    def comment(self, ref: WorkItemRef, comment_id: str) -> JiraComment:
        """One comment by id (the doorbell reads by id, never by scanning a page)."""
        ref = place(ref, self.settings)
        if not DIGITS.match(comment_id):
            raise JiraError(f"{comment_id!r} is not a comment id; nothing was sent")
        data = self._request("GET", f"issue/{issue_key(ref)}/comment/{comment_id}") or {}
        return self._comment(ref, data, self.myself())

    # ---------------------------------------------------------------------------------------------- write

    def post_comment(self, ref: WorkItemRef, markdown: str) -> str:
        """J24: Markdown converted once here — ADF on Cloud, wiki markup on Data Center."""
        ref = place(ref, self.settings)
        adf = markup.to_adf(markdown)
        body: Any = adf if self.settings.cloud else markup.adf_to_wiki(adf)
        data = self._request("POST", f"issue/{issue_key(ref)}/comment", body={"body": body}) or {}
        return str(data.get("id") or "")

    def update_labels(self, ref: WorkItemRef, add: Sequence[str] = (), remove: Sequence[str] = ()) -> list[str]:
        """J27: one update of ``add`` ops (others untouched); a remove reads first and reports ``absent`` ones."""
        ref = place(ref, self.settings)
        issue = self.issue(ref)
        ops = [{"add": jira_label(label)} for label in add]
        absent = []
        for label in remove:
            safe = jira_label(label)
            if safe in issue.labels:
                ops.append({"remove": safe})
            else:
                absent.append(safe)
        if ops:
            url = issue.self_url if _same_origin(issue.self_url, self.settings.server()) else None
            self._request("PUT", f"issue/{issue_key(ref)}", body={"update": {"labels": ops}}, url=url)
        return absent

    def transitions(self, ref: WorkItemRef) -> list[JiraTransition]:
        ref = place(ref, self.settings)
        data = self._request("GET", f"issue/{issue_key(ref)}/transitions") or {}
        found = []
        for item in data.get("transitions") or ():
            to = item.get("to") or {}
            found.append(
                JiraTransition(
                    id=str(item.get("id") or ""),
                    name=str(item.get("name") or ""),
                    to_status=str(to.get("name") or ""),
                    to_category=str((to.get("statusCategory") or {}).get("key") or ""),
                )
            )
        return found

    def close(self, ref: WorkItemRef) -> str:
        """J29: the configured transition (by name, any case), else the single one into ``done``; the name used."""
        available = self.transitions(ref)
        wanted = self.settings.close_transition.strip().casefold()
        if wanted:
            chosen = [t for t in available if t.name.casefold() == wanted]
        else:
            chosen = [t for t in available if t.to_category == "done"]
        if len(chosen) != 1 or not DIGITS.match(chosen[0].id):
            names = ", ".join(f"{t.name!r} → {t.to_status or '?'}" for t in available) or "none"
            what = f"transition {self.settings.close_transition!r}" if wanted else "a single transition into Done"
            raise JiraError(f"cannot close {ref}: no {what} (available: {names}); nothing was transitioned")
        self._request("POST", f"issue/{issue_key(ref)}/transitions", body={"transition": {"id": chosen[0].id}})
        return chosen[0].name
