"""What one GitHub poll cycle works on and counts: the configured repositories (:class:`Scope`), the comments read
off an item (:class:`Comment`, parsed from REST rows), what this process last read of an item (:class:`Cursor`),
the cycle's tallies (:class:`Cycle`), and the webhook-shaped objects a listed item is turned into.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from the_loop_github.refs import DEFAULT_HOST, SCHEME, host_of

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

__all__ = [
    "Comment",
    "Cursor",
    "Cycle",
    "Scope",
    "configured_scopes",
    "now_stamp",
    "parse_comment",
    "parse_review",
    "webhook_repository",
    "webhook_subject",
]


def now_stamp() -> str:
    """The poll clocks' timestamp (``local/poll-clocks.json``): UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ------------------------------------------------------------------------------------------------ scopes


@dataclass
class Scope:
    """One ``repositories`` entry: the repository a listing is asked of."""

    host: str
    owner: str
    repo: str

    @property
    def name(self) -> str:
        base = f"{self.owner}/{self.repo}".lower()
        return base if self.host == DEFAULT_HOST else f"{self.host}/{base}"

    @property
    def api(self) -> str:
        return f"/repos/{self.owner}/{self.repo}"

    def repository(self) -> dict[str, Any]:
        """The webhook's ``repository`` object, as far as refs and the normalizer read it."""
        return {"full_name": f"{self.owner}/{self.repo}", "html_url": f"https://{self.host}/{self.owner}/{self.repo}"}

    def owns(self, ref: WorkItemRef) -> bool:
        return ref.provider == SCHEME and not ref.key_form and _scope_name(ref) == self.name


def _scope_name(ref: WorkItemRef) -> str:
    base = f"{ref.owner}/{ref.repo}".lower()
    return base if not ref.host or ref.host == DEFAULT_HOST else f"{ref.host.lower()}/{base}"


def configured_scopes(config: LoadedConfig) -> list[Scope]:
    """Top-level ``repositories``, de-duplicated; a bare entry is on github.com (or ``integrations.github.host``)."""
    default = DEFAULT_HOST
    raw = config.raw_at("integrations.github") if hasattr(config, "raw_at") else None
    if isinstance(raw, Mapping) and isinstance(raw.get("host"), str) and raw["host"]:
        default = raw["host"].lower()
    found: dict[str, Scope] = {}
    for entry in config.core.repositories:
        parts = entry.split("/")
        host, owner, repo = (parts[0].lower(), parts[1], parts[2]) if len(parts) == 3 else (default, *parts)
        scope = Scope(host, owner, repo)
        found.setdefault(scope.name, scope)
    return list(found.values())


# ------------------------------------------------------------------------------------------------ items


@dataclass
class Comment:
    """One comment of an item's thread, on any surface (issue comment, review, inline review comment)."""

    id: str  # the node id: what seenComments holds and what the dedupe key is built from
    event: str  # issue_comment | pull_request_review | pull_request_review_comment
    raw: dict[str, Any]
    author: str
    body: str
    created_at: str
    updated_at: str


def parse_comment(event: str, row: Any) -> Comment | None:
    """A REST comment row as a :class:`Comment`; ``None`` for a row without a node id (it cannot be deduplicated)."""
    if not isinstance(row, dict) or not isinstance(row.get("node_id"), str):
        return None
    return Comment(
        id=row["node_id"],
        event=event,
        raw=row,
        author=str((row.get("user") or {}).get("login") or ""),
        body=str(row.get("body") or ""),
        created_at=str(row.get("created_at") or ""),
        updated_at=str(row.get("updated_at") or row.get("created_at") or ""),
    )


def parse_review(row: Any) -> Comment | None:
    """A submitted review with something to say; PENDING or empty ones are not comments (B R14)."""
    if not isinstance(row, dict) or row.get("state") == "PENDING" or not str(row.get("body") or "").strip():
        return None
    found = parse_comment("pull_request_review", row)
    if found is not None:
        found.created_at = found.updated_at = str(row.get("submitted_at") or "")
    return found


# ------------------------------------------------------------------------------------------------ cycle


@dataclass
class Cursor:
    """What this process last read of one item: its ``updated_at``, the newest comment time (``since``)."""

    updated_at: str
    since: str
    complete_cycle: int


@dataclass
class Cycle:
    """What one cycle did: ``poll_once``'s answer, which the poller reports as ``poll.cycle`` (hence camelCase)."""

    itemsSeen: int = 0
    spawns: int = 0
    commentsForwarded: int = 0
    closures: int = 0
    failures: int = 0
    errors: int = 0
    scopesPolled: int = 0
    interrupted: bool = False
    scopesFailed: list[dict[str, Any]] = field(default_factory=list)
    scopesSkipped: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def webhook_subject(item: Mapping[str, Any]) -> dict[str, Any]:
    """The issue / pull request object of a webhook payload, from a listed item."""
    keys = ("number", "title", "state", "state_reason", "html_url", "labels", "body", "user", "head", "draft", "merged")
    subject = {key: item[key] for key in keys if key in item}
    if "pull_request" in item:
        subject["pull_request"] = item["pull_request"]
    return subject


def webhook_repository(scope: Scope, item: Mapping[str, Any]) -> dict[str, Any]:
    """The webhook's ``repository`` object in GitHub's own spelling, read from the item's ``html_url``: refs, record
    files and close keys then match the webhook's whatever case ``repositories:`` is written in (decision 6). The
    configured spelling only when the URL names another place (a transfer) or none."""
    url = item.get("html_url")
    host = host_of(url)
    parts = urlsplit(str(url)).path.strip("/").split("/") if host else []
    if (
        host == scope.host
        and len(parts) >= 2
        and f"{parts[0]}/{parts[1]}".lower() == f"{scope.owner}/{scope.repo}".lower()
    ):
        return {"full_name": f"{parts[0]}/{parts[1]}", "html_url": f"https://{host}/{parts[0]}/{parts[1]}"}
    return scope.repository()
