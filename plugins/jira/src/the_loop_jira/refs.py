"""Jira refs ``jira:<site>/<KEY>-<n>`` (J1, J2) and placement (J3, J4).

The grammar is core's key form (:mod:`the_loop.refs`); this module adds what only Jira knows: the browse URL, the spec
id, the comment link, and placement — before any request a ref must be on the configured site and in a configured
project, so a credential never travels to another site.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from the_loop.refs import RefError, WorkItemRef, parse_ref

if TYPE_CHECKING:
    from the_loop_jira.config import JiraSettings

__all__ = [
    "KEY_PATTERN",
    "SCHEME",
    "PlacementError",
    "browse_url",
    "comment_url",
    "issue_key",
    "parse_jira_ref",
    "place",
    "ref_for",
    "spec_id",
    "valid_ref",
]

SCHEME = "jira"
KEY_PATTERN = re.compile(r"^[A-Z][A-Z0-9_]{1,9}$")
ISSUE_KEY = re.compile(r"^([A-Z][A-Z0-9_]{1,9})-([1-9][0-9]{0,9})$")
DIGITS = re.compile(r"^[0-9]{1,32}$")
EXPECTED = "expected jira:<site>/<KEY>-<n>, e.g. jira:acme.atlassian.net/PROJ-12"


class PlacementError(RefError):
    """A ref this configuration must not send a request for; nothing was sent."""


def valid_ref(ref: WorkItemRef) -> bool:
    if ref.provider != SCHEME or not ref.key_form or not KEY_PATTERN.match(ref.owner):
        return False
    try:
        return parse_ref(str(ref)) == ref
    except RefError:
        return False


def parse_jira_ref(text: str) -> WorkItemRef:
    """Parse strictly (J1); the error states the expected shape."""
    try:
        ref = parse_ref(text)
    except RefError:
        raise RefError(f"not a Jira ref: {text.strip()!r} ({EXPECTED})") from None
    if not valid_ref(ref):
        raise RefError(f"not a Jira ref: {text.strip()!r} ({EXPECTED})")
    return ref


def ref_for(site: str, key: str) -> WorkItemRef | None:
    """The ref of issue ``key`` (``PROJ-12``) on ``site``, or None when either fails the grammar."""
    if not isinstance(key, str) or not ISSUE_KEY.match(key):
        return None
    try:
        return parse_jira_ref(f"{SCHEME}:{site}/{key}")
    except RefError:
        return None


def issue_key(ref: WorkItemRef) -> str:
    return f"{ref.owner}-{ref.number}"


def browse_url(ref: WorkItemRef) -> str | None:
    """J2: ``https://<site>/browse/<KEY>-<n>``, only for a valid ref (links always use the site)."""
    return f"https://{ref.host}/browse/{issue_key(ref)}" if valid_ref(ref) else None


def comment_url(ref: WorkItemRef, comment_id: str) -> str:
    url = browse_url(ref)
    return f"{url}?focusedCommentId={comment_id}" if url else ""


def spec_id(ref: WorkItemRef) -> str:
    """``jira-<key lower>-<n>``: never collides with GitHub's ``issue-<n>``."""
    return f"jira-{ref.owner.lower()}-{ref.number}"


def place(ref: WorkItemRef, settings: JiraSettings) -> WorkItemRef:
    """J3/J4: ``ref`` itself when a request may be sent for it, else :class:`PlacementError` (nothing sent)."""
    if not valid_ref(ref):
        raise PlacementError(f"not a Jira ref: {ref} ({EXPECTED}); nothing was sent")
    site = settings.site.strip().lower()
    if not site:
        raise PlacementError(f"{ref}: integrations.jira.site is not configured; nothing was sent")
    if ref.host != site:
        raise PlacementError(f"{ref} is not on the configured site {site}; nothing was sent")
    if ref.owner not in settings.projects:
        raise PlacementError(f"{ref}: project {ref.owner} is not under integrations.jira.projects; nothing was sent")
    return ref


def repository_for(ref: WorkItemRef, settings: JiraSettings) -> str:
    """J4: the GitHub repository the project's code lives in; "" for a mirror-only project."""
    project = settings.projects.get(ref.owner)
    return project.repository if project is not None else ""
