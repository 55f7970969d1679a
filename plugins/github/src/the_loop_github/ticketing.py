"""GitHub as a ticket tracker for ``github:`` refs, through PyGithub's REST client.

The API base is ``integrations.github.api.baseUrl`` when set, else ``https://<host>/api/v3`` for a ref on an
Enterprise host, else github.com's API. The token is read at every call from the first non-empty env var named in
``integrations.github.api.tokenEnv`` (default ``GH_TOKEN``, then ``GITHUB_TOKEN``), else ``gh auth token``
(:mod:`the_loop_github.token`): rotating it needs no restart,
and it never appears in an event, an error message or argv. Errors are re-raised as :class:`GitHubError` with a
message built here (method, path, status, GitHub's one-line message), never PyGithub's own text.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from the_loop import events
from the_loop.config import ConfigError
from the_loop.interfaces import ChannelError, TicketProvider
from the_loop.refs import RefError, WorkItemRef
from the_loop_github.refs import DEFAULT_HOST, SCHEME, item_url, ref_from_repository, valid_ref

if TYPE_CHECKING:
    from github import Github

    from the_loop_github.config import GitHubSettings

__all__ = ["MARKER", "SIGNATURE", "GitHubError", "GitHubTicketProvider", "TokenMissing"]

MARKER = "<!-- the-loop:agent-comment -->"
SIGNATURE = "🤖 _the-loop, autonomous comment_"
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
ACK_PATHS = {"issue-comment": "issues/comments", "review-comment": "pulls/comments", "issue": "issues"}
TIMEOUT_SECONDS = 10
_warned_no_token = threading.Event()


class GitHubError(RuntimeError):
    """A GitHub API call failed; ``status`` is the HTTP status (0 when the server was not reached)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class TokenMissing(ConfigError):
    """No token in any of the configured env vars (a config problem: the CLI prints it and exits 2)."""


def _message(exc: Any) -> str:
    data = getattr(exc, "data", None)
    text = data.get("message") if isinstance(data, Mapping) else None
    return " ".join(str(text).split())[:200] if text else "no message"


class GitHubTicketProvider(TicketProvider):
    scheme = SCHEME
    transport: Any = None  # an httpx transport for attachment fetches (tests); None: the network

    # ------------------------------------------------------------------------------------------ settings

    def settings(self) -> GitHubSettings:
        from the_loop_github.config import GitHubSettings

        try:
            return self.config.section("integrations.github")
        except KeyError:  # a host built without the plugin's sections (tests): read the raw key
            raw = self.config.raw_at("integrations.github")
            return GitHubSettings.model_validate(raw if isinstance(raw, Mapping) else {})

    def api_base(self, host: str) -> str:
        """The REST base for a ref on ``host`` ("" = github.com): an explicit ``api.baseUrl`` wins."""
        settings = self.settings()
        if settings.api.base_url:
            return settings.api.base_url.rstrip("/")
        if host and host != DEFAULT_HOST:
            return f"https://{host}/api/v3"
        return settings.api_base_url()

    def token(self, host: str = "") -> str:
        """The token for ``host`` ("" = the configured one): :func:`the_loop_github.token.find`."""
        from the_loop_github.token import find

        settings = self.settings()
        names = settings.api.token_env
        token, _source = find(names, host or settings.host)
        if token:
            return token
        raise TokenMissing(
            f"no GitHub token: set {' or '.join(names) or 'a variable named in integrations.github.api.tokenEnv'} "
            "(integrations.github.api.tokenEnv), or log in with gh auth login"
        )

    @contextmanager
    def _client(self, host: str) -> Iterator[Github]:
        from github import Auth, Github

        client = Github(
            auth=Auth.Token(self.token(host)),
            base_url=self.api_base(host),
            timeout=TIMEOUT_SECONDS,
            retry=None,  # the dispatcher owns retries; a best-effort call must not stall it
            lazy=True,  # objects are URLs until read: a comment is one POST, not GET + POST
            seconds_between_requests=None,
            seconds_between_writes=None,
            user_agent="the-loop",
        )
        try:
            yield client
        finally:
            client.close()

    @contextmanager
    def _calling(self, verb: str, path: str) -> Iterator[None]:
        """Turn PyGithub's and requests' failures into one :class:`GitHubError` naming the call."""
        from github import GithubException
        from requests import RequestException

        try:
            yield
        except GithubException as exc:
            raise GitHubError(f"GitHub API {verb} {path}: {exc.status} {_message(exc)}", exc.status) from None
        except RequestException as exc:
            raise GitHubError(f"GitHub API {verb} {path}: unreachable ({type(exc).__name__})") from None

    def _checked(self, ref: WorkItemRef) -> WorkItemRef:
        self.validate(ref)
        return ref

    # --------------------------------------------------------------------------------------------- refs

    def validate(self, ref: WorkItemRef) -> None:
        if not valid_ref(ref):
            raise RefError(f"not a GitHub ref: {ref} (expected github:[<host>/]<owner>/<repo>#<n>)")

    def url(self, ref: WorkItemRef) -> str | None:
        return item_url(ref)

    # ------------------------------------------------------------------------------------------ calls

    def post_comment(self, ref: WorkItemRef, body: str) -> str:
        ref = self._checked(ref)
        path = f"/repos/{ref.owner}/{ref.repo}/issues/{ref.number}/comments"
        with self._client(ref.host) as gh, self._calling("POST", path):
            comment = gh.get_repo(f"{ref.owner}/{ref.repo}").get_issue(ref.number).create_comment(body)
            return str(comment.id)

    def create_issue(self, repository: str, title: str, body: str, labels: Sequence[str]) -> WorkItemRef:
        ref = ref_from_repository(repository, 1)
        if ref is None:
            raise GitHubError(f"{repository!r} is not [host/]owner/repo")
        path = f"/repos/{ref.owner}/{ref.repo}/issues"
        with self._client(ref.host) as gh, self._calling("POST", path):
            issue = gh.get_repo(f"{ref.owner}/{ref.repo}").create_issue(title=title, body=body, labels=list(labels))
            number = int(issue.number)
        return ref_from_repository(repository, number) or ref  # the same key parsed a moment ago

    def labels(self, ref: WorkItemRef) -> list[str]:
        ref = self._checked(ref)
        path = f"/repos/{ref.owner}/{ref.repo}/issues/{ref.number}/labels"
        with self._client(ref.host) as gh, self._calling("GET", path):
            issue = gh.get_repo(f"{ref.owner}/{ref.repo}").get_issue(ref.number)
            return [label.name for label in issue.get_labels()]

    def item_state(self, ref: WorkItemRef) -> Literal["open", "closed", "merged", "missing", "unknown"]:
        """``missing`` only on a definitive 404; no token, a timeout, 403 or 5xx are ``unknown``."""
        ref = self._checked(ref)
        path = f"/repos/{ref.owner}/{ref.repo}/issues/{ref.number}"
        try:
            with self._client(ref.host) as gh, self._calling("GET", path):
                repo = gh.get_repo(f"{ref.owner}/{ref.repo}")
                issue = repo.get_issue(ref.number)
                state = issue.state
                if state != "closed" or issue.pull_request is None:
                    return "open" if state == "open" else "closed" if state == "closed" else "unknown"
                if issue.pull_request.merged_at is not None:
                    return "merged"
                return "merged" if repo.get_pull(ref.number).merged else "closed"
        except GitHubError as exc:
            return "missing" if exc.status == 404 else "unknown"
        except TokenMissing:
            return "unknown"

    def delivered_items(self, ref: WorkItemRef) -> list[WorkItemRef] | None:
        """X3(a): the pull request's ``closingIssuesReferences`` through GraphQL; None when it cannot be asked or
        answered (no token, not a pull request, timeout, any error): the event's own linkage is used instead."""
        from the_loop_github.linkage import CLOSING_REFERENCES_QUERY, closing_references

        if not valid_ref(ref):
            return None
        variables = {"owner": ref.owner, "name": ref.repo, "number": ref.number}
        try:
            with self._client(ref.host) as gh, self._calling("POST", "/graphql"):
                _headers, data = gh.requester.graphql_query(CLOSING_REFERENCES_QUERY, variables)
        except (GitHubError, TokenMissing):
            return None
        return closing_references(data, ref)

    def close_keys(self, ref: WorkItemRef) -> list[str]:
        from the_loop_github.normalize import CLOSE_STATES, close_key

        return [close_key(ref, state) for state in CLOSE_STATES]

    def attachments(self, text: str) -> Sequence[Mapping[str, Any]]:
        """The GitHub uploads a comment links (:mod:`the_loop_github.assets`)."""
        from the_loop_github.assets import links, origins

        settings = self.settings()
        return links(text, origins(settings.host, settings.api.base_url))

    def fetch_attachment(self, url: str, limit: int) -> bytes:
        """An upload's bytes: the token only on GitHub's own hops, never on the signed storage it redirects to."""
        from the_loop.toolkit import fetch_guarded
        from the_loop_github.assets import allowed, is_github, origins

        settings = self.settings()
        own = origins(settings.host, settings.api.base_url)
        if not allowed(url, 0, own):  # refused before the token is even read
            raise ChannelError("attachment host not allowed")
        token = self.token(settings.host)
        return fetch_guarded(
            url,
            limit,
            allowed=lambda each, hop: allowed(each, hop, own),
            headers=lambda each: {"Authorization": f"Bearer {token}"} if is_github(each, own) else {},
            transport=self.transport,
        )

    def react(self, ack: Mapping[str, str], reaction: str) -> None:
        """Best-effort: put ``reaction`` on the comment or issue ``ack`` names; ``reaction.added`` or
        ``reaction.failed`` is logged and nothing is raised. A missing token is reported once per process."""
        if not reaction:
            return  # a palette entry set to "" skips that state
        kind, repository, object_id = ack.get("kind", ""), ack.get("repository", ""), ack.get("id", "")
        fields = {"kind": kind or None, "repository": repository or None, "id": object_id or None, "reaction": reaction}
        target = ref_from_repository(repository, 1) if repository else None
        if kind not in ACK_PATHS or target is None or not (object_id.isascii() and object_id.isdigit()):
            events.emit("reaction.failed", level="warning", reason="invalid-target", **fields)
            return
        if reaction not in REACTIONS:
            events.emit("reaction.failed", level="warning", reason="unknown-reaction", **fields)
            return
        path = f"/repos/{target.owner}/{target.repo}/{ACK_PATHS[kind]}/{int(object_id)}/reactions"
        try:
            with self._client(target.host) as gh, self._calling("POST", path):
                gh.requester.requestJsonAndCheck("POST", path, input={"content": reaction})
        except TokenMissing as exc:
            if not _warned_no_token.is_set():
                _warned_no_token.set()
                events.emit("reaction.failed", level="warning", reason="no-token", error=str(exc), **fields)
            return
        except GitHubError as exc:
            events.emit("reaction.failed", level="warning", reason="api-error", error=str(exc), **fields)
            return
        events.emit("reaction.added", **fields)

    # ------------------------------------------------------------------------------------------- marker

    def is_self_authored(self, text: str) -> bool:
        return MARKER in text

    def mark(self, text: str) -> str:
        """``text``, a blank line, the visible signature and the hidden marker; unchanged when already marked."""
        if MARKER in text:
            return text
        body = text.rstrip()
        return f"{body}\n\n{SIGNATURE}\n{MARKER}" if body else f"{SIGNATURE}\n{MARKER}"
