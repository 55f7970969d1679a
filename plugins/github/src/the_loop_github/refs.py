"""GitHub refs: ``github:[<host>/]<owner>/<repo>#<n>``, built from a payload and turned into URLs.

The grammar is core's (:mod:`the_loop.refs`): a ref is built as text and parsed back, so a host, owner or repo that
does not fit (``user@host``, a space, a bare host without a port) yields no ref instead of a second grammar here.
github.com stays implicit (``github:octo/repo#15``); any other host is written in front
(``github:ghe.example/octo/repo#15``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from the_loop.refs import DEFAULT_HOSTS, RefError, WorkItemRef, parse_ref

__all__ = [
    "DEFAULT_HOST",
    "SCHEME",
    "host_of",
    "item_url",
    "payload_host",
    "ref_for",
    "ref_from_repository",
    "repository_key",
    "valid_ref",
]

SCHEME = "github"
DEFAULT_HOST = DEFAULT_HOSTS[SCHEME]


def host_of(url: Any) -> str | None:
    """The host (with ``:port``) of an ``http(s)`` URL, lower-cased; None for anything else."""
    if not isinstance(url, str) or not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("https", "http") or not parts.netloc:
        return None
    return parts.netloc.lower()


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def payload_host(payload: Mapping[str, Any], entity: Mapping[str, Any] | None = None) -> str:
    """X1: the host of ``repository.html_url``, else of the entity's ``html_url``, else github.com."""
    return (
        host_of(_dict(payload.get("repository")).get("html_url"))
        or host_of(_dict(entity).get("html_url"))
        or DEFAULT_HOST
    )


def _owner_repo(repository: Mapping[str, Any]) -> tuple[str, str] | None:
    full_name = repository.get("full_name")
    if isinstance(full_name, str):  # when present it is the answer, malformed or not
        parts = full_name.split("/")
        return (parts[0], parts[1]) if len(parts) == 2 else None
    owner = _dict(repository.get("owner")).get("login")
    name = repository.get("name")
    if isinstance(owner, str) and isinstance(name, str):
        return owner, name
    return None


def valid_ref(ref: WorkItemRef) -> bool:
    """Whether ``ref`` is a GitHub ref core's grammar accepts, as written (it round-trips). Segments of only dots
    are refused too: ``..`` fits the segment grammar but would climb out of a URL path."""
    if ref.provider != SCHEME or ref.key_form or ref.number < 1:
        return False
    if any(part.strip(".") == "" for part in (ref.owner, ref.repo)):
        return False
    try:
        return parse_ref(str(ref)) == ref
    except RefError:
        return False


def ref_for(payload: Mapping[str, Any], number: Any, entity: Mapping[str, Any] | None = None) -> WorkItemRef | None:
    """The ref of issue/PR ``number`` in the payload's repository, or None when any part fails the grammar."""
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        return None
    coordinates = _owner_repo(_dict(payload.get("repository")))
    if coordinates is None:
        return None
    owner, repo = coordinates
    host = payload_host(payload, entity)
    prefix = "" if host == DEFAULT_HOST else f"{host}/"
    try:
        ref = parse_ref(f"{SCHEME}:{prefix}{owner}/{repo}#{number}")
    except RefError:
        return None
    return ref if valid_ref(ref) else None


def repository_key(payload: Mapping[str, Any]) -> str:
    """``[host/]owner/repo`` of the payload's repository (host only off github.com), or "" when it fails the
    grammar. The case is GitHub's; compare lower-cased."""
    ref = ref_for(payload, 1)
    return ref.repository if ref is not None else ""


def ref_from_repository(repository: str, number: int) -> WorkItemRef | None:
    """The ref of ``number`` in a ``[host/]owner/repo`` key (an ack's ``repository``), or None."""
    try:
        ref = parse_ref(f"{SCHEME}:{repository}#{number}")
    except RefError:
        return None
    return ref if valid_ref(ref) else None


def item_url(ref: WorkItemRef) -> str | None:
    """``https://<host>/<owner>/<repo>/issues/<n>`` (GitHub redirects it for a PR), only for a valid ref."""
    if not valid_ref(ref):
        return None
    return f"https://{ref.host or DEFAULT_HOST}/{ref.owner}/{ref.repo}/issues/{ref.number}"
