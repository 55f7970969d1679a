"""Files linked in a GitHub comment (issue-416): which links are GitHub's own uploads, and where the token may go.

An upload is linked from the comment's Markdown as ``https://<host>/user-attachments/assets/<uuid>``,
``…/user-attachments/files/<id>/<name>``, ``https://<host>/<owner>/<repo>/assets/<id>/<uuid>`` or
``…/<owner>/<repo>/files/<id>/<name>`` (``<host>``: github.com, or ``integrations.github.host``), and in older
comments ``https://user-images.githubusercontent.com/<user>/<name>``. Any other link is the author's prose and is
never fetched.

The first request goes to GitHub itself (with the token: a private repository's uploads need it). GitHub answers
with a redirect to signed storage (``*.githubusercontent.com``, ``github-production-*.s3.amazonaws.com``); those
hops are allowed and get **no** token. An explicit ``integrations.github.api.baseUrl`` (Enterprise behind a proxy,
the fake GitHub in tests) is GitHub's origin too, with its own scheme.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

MAX_LINKS = 50  # links looked at per comment; the per-message fetch cap (10) applies after
_ID = r"[A-Za-z0-9_-]{1,64}"
_UPLOAD = re.compile(
    rf"^/(?:user-attachments|[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/(?P<kind>assets|files)/(?P<id>{_ID})(?:/(?P<rest>[^/?#]+))?$"
)
_LEGACY = re.compile(r"^/\d+/(?P<name>[A-Za-z0-9_.-]{1,200})$")
_LINK = re.compile(r"https?://[^\s<>()\[\]\"'`]+")
_STORAGE = re.compile(r"^github-production-[a-z0-9-]+\.s3\.amazonaws\.com$")
LEGACY_HOST = "user-images.githubusercontent.com"


def origins(host: str, api_base_url: str) -> list[tuple[str, str, int | None]]:
    """GitHub's own origins (scheme, host, port): the web host over https, and an explicit API base."""
    found = [("https", (host or "github.com").lower(), None)]
    if api_base_url:
        base = urlsplit(api_base_url)
        found.append((base.scheme, (base.hostname or "").lower(), base.port))
    return found


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def is_github(url: str, own: list[tuple[str, str, int | None]]) -> bool:
    parts = urlsplit(url)
    return not (parts.username or parts.password) and _origin(url) in own


def links(text: str, own: list[tuple[str, str, int | None]]) -> list[dict[str, str]]:
    """The uploads ``text`` links, each once (by id), in order: ``id``, ``name``, ``url``."""
    found: dict[str, dict[str, str]] = {}
    for match in _LINK.finditer(text[:100_000]):
        url = match[0].rstrip(".,;:!?")
        parts = urlsplit(url)
        upload = _UPLOAD.match(parts.path) if is_github(url, own) else None
        if upload is not None and upload["kind"] == "files" and upload["rest"]:  # /files/<id>/<name>
            found.setdefault(upload["id"], {"id": upload["id"], "name": unquote(upload["rest"]), "url": url})
        elif upload is not None:  # /assets/<uuid>, or /<owner>/<repo>/assets/<uploader>/<uuid>: the uuid names it
            asset = upload["rest"] if upload["rest"] and re.fullmatch(_ID, upload["rest"]) else upload["id"]
            found.setdefault(asset, {"id": asset, "name": "asset", "url": url})
        elif parts.scheme == "https" and (parts.hostname or "") == LEGACY_HOST and (old := _LEGACY.match(parts.path)):
            file_id = re.sub(r"[^A-Za-z0-9_-]", "_", old["name"].rsplit(".", 1)[0])[:64] or "file"
            found.setdefault(file_id, {"id": file_id, "name": old["name"], "url": url})
        if len(found) >= MAX_LINKS:
            break
    return list(found.values())


def allowed(url: str, hop: int, own: list[tuple[str, str, int | None]]) -> bool:
    """The first request goes to GitHub (or the legacy upload host); a redirect may also reach signed storage."""
    parts = urlsplit(url)
    if is_github(url, own):
        return True
    if parts.scheme != "https" or parts.username or parts.password:
        return False
    host = (parts.hostname or "").lower()
    if hop == 0:
        return host == LEGACY_HOST
    return host.endswith(".githubusercontent.com") or bool(_STORAGE.match(host))
