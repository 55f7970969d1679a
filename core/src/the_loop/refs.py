"""Core's generic work-item ref grammar, the slug rule and the tmux name.

A ref names one work item: ``<provider>:[<host>/]<owner>/<repo>#<n>`` (GitHub-like trackers; host, owner and repo
are lower-cased, as forges compare them) or ``<provider>:<site>/<KEY>-<n>`` (Jira-like trackers). A ticketing
provider adds its own validation, URLs and existence checks on top; nothing here knows any provider by name. The
slug rule is not injective; which slug a work item owns is :mod:`the_loop.state.slugs`' business.

Kept free of pydantic so the CLI's fast paths (``status``, ``events``) can use it without paying for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["RefError", "WorkItemRef", "canonical_ref", "parse_ref", "slug_for", "tmux_name"]

_PROVIDER = r"(?P<provider>[a-z][a-z0-9]*)"
_HOST = r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::\d+)?|[A-Za-z0-9-]+:\d+"
_SEGMENT = r"[A-Za-z0-9._-]+"
_NUMBER = r"[1-9][0-9]{0,9}"

_ISSUE_FORM = re.compile(
    rf"^{_PROVIDER}:(?:(?P<host>{_HOST})/)?(?P<owner>{_SEGMENT})/(?P<repo>{_SEGMENT})#(?P<number>{_NUMBER})$"
)
_KEY_FORM = re.compile(rf"^{_PROVIDER}:(?P<host>{_HOST})/(?P<owner>[A-Z][A-Z0-9_]{{1,9}})-(?P<number>{_NUMBER})$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_TMUX_UNSAFE = re.compile(r"[.:]")

# Hosts a GitHub-like ref leaves implicit: "github:octo/repo#1" is on github.com.
DEFAULT_HOSTS = {"github": "github.com"}


class RefError(ValueError):
    """A string that is not a work-item ref; the message states the expected shape."""


@dataclass(frozen=True, order=True)
class WorkItemRef:
    """One work item. ``repo`` is empty for key-form refs (``jira:acme.atlassian.net/PROJ-12``)."""

    provider: str
    host: str
    owner: str
    repo: str
    number: int

    @property
    def key_form(self) -> bool:
        return self.repo == ""

    def __str__(self) -> str:
        if self.key_form:
            return f"{self.provider}:{self.host}/{self.owner}-{self.number}"
        host = "" if self.host in ("", DEFAULT_HOSTS.get(self.provider)) else f"{self.host}/"
        return f"{self.provider}:{host}{self.owner}/{self.repo}#{self.number}"

    @property
    def slug(self) -> str:
        return slug_for(self)

    @property
    def tmux_name(self) -> str:
        return tmux_name(self.slug)

    @property
    def repository(self) -> str:
        """``[host/]owner/repo`` (host only when not the provider's default), or the key's site/KEY."""
        if self.key_form:
            return f"{self.host}/{self.owner}"
        host = "" if self.host in ("", DEFAULT_HOSTS.get(self.provider)) else f"{self.host}/"
        return f"{host}{self.owner}/{self.repo}"


def parse_ref(text: str) -> WorkItemRef:
    """Parse a ref strictly; raise :class:`RefError` naming the expected shapes."""
    text = text.strip()
    match = _ISSUE_FORM.match(text)
    if match:
        host = match["host"] or ""
        if host.lower() == DEFAULT_HOSTS.get(match["provider"]):
            host = ""
        # Forges treat owner and repository names case-insensitively (GitHub's Octo/Repo is octo/repo): one work
        # item has one spelling, whichever a webhook, the poller or a person typed.
        owner, repo = match["owner"].lower(), match["repo"].lower()
        return WorkItemRef(match["provider"], host.lower(), owner, repo, int(match["number"]))
    match = _KEY_FORM.match(text)
    if match:
        return WorkItemRef(match["provider"], match["host"].lower(), match["owner"], "", int(match["number"]))
    raise RefError(
        f"not a work-item ref: {text!r} (expected <provider>:[<host>/]<owner>/<repo>#<n>, "
        "e.g. github:octo/repo#15, or <provider>:<site>/<KEY>-<n>, e.g. jira:acme.atlassian.net/PROJ-12)"
    )


def canonical_ref(text: object) -> str | None:
    """``text`` as a ref is spelled now (a recorded ``github:Octo/Repo#1`` is ``github:octo/repo#1``), or None when
    it is no ref."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return str(parse_ref(text))
    except RefError:
        return None


def slug_for(ref: WorkItemRef) -> str:
    """``<provider>-[<host>-]<owner>-<repo>-<n>`` with unsafe runs as ``-``; dots are kept (it is a file name)."""
    parts = [ref.provider]
    if ref.host:
        parts.append(ref.host)
    parts.append(ref.owner)
    if ref.repo:
        parts.append(ref.repo)
    parts.append(str(ref.number))
    return "-".join(_UNSAFE.sub("-", part) for part in parts)


def tmux_name(slug: str) -> str:
    """The tmux session for a slug: ``loop-<slug>`` spelled as tmux spells it (``.`` and ``:`` become ``_``)."""
    return normalize_tmux_target(f"loop-{slug}")


def normalize_tmux_target(target: str) -> str:
    """Rewrite a tmux session name the way tmux itself does, also for names read back from old records."""
    return _TMUX_UNSAFE.sub("_", target)
