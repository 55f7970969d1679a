"""Files attached to a channel reply or a ticket comment (issue-416): fetched only once the message is being
delivered into a live session — after every refusal — saved as opaque bytes under ``local/attachments/<slug>/``
and named to the pane.

Core decides when and where; the source's :meth:`AttachmentFetcher.fetch_attachment` (the Slack channel, the
GitHub ticket provider) knows the hosts and the token, and fetches through :func:`fetch_guarded`. Nothing here
opens a saved file or removes one: the directory is the session's to read.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from the_loop import events
from the_loop.interfaces import ChannelError

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

MAX_FILES = 10  # per message; the rest are named, not fetched
MAX_REDIRECTS = 5
FETCH_TIMEOUT = 30.0
MAX_BYTES = 25 * 1024 * 1024  # per file: declared size checked, body read to cap+1
NAME_LIMIT = 120
_FILE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._ +()=,@-]")


class AttachmentRefused(ChannelError):
    """A file that will not be fetched (host, scheme, size, redirects): the reason, never a token."""


@runtime_checkable
class AttachmentFetcher(Protocol):
    """A channel that can fetch a file it reported on a message."""

    def fetch_attachment(self, url: str, limit: int) -> bytes:
        """The file's bytes, at most ``limit``; raise :class:`AttachmentRefused` (or any error) to refuse."""
        ...


@dataclass
class Saved:
    """What became of one message's files: saved paths (with kinds), names not fetched, refusals."""

    saved: list[tuple[str, Path]] = field(default_factory=list)  # (mimetype, path)
    named: list[str] = field(default_factory=list)  # over the per-message cap: named only
    refused: list[str] = field(default_factory=list)  # names of files refused or failed
    names: list[str] = field(default_factory=list)  # every file's name, for the ticket mirror


def safe_name(name: str) -> str:
    """``name`` as one path component that cannot leave its directory: no separators, ``..``, NUL, control
    characters or leading dots; length capped. Never empty."""
    text = unicodedata.normalize("NFKC", name)
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] != "C")  # NUL and every control char
    text = _UNSAFE.sub("_", text.replace("/", "_").replace("\\", "_"))
    text = re.sub(r"\.{2,}", ".", text).strip(" .")
    text = text.lstrip(".-")
    if len(text) > NAME_LIMIT:  # keep the extension, which is what a reader recognises a kind by
        stem, dot, ext = text.rpartition(".")
        text = (stem[: NAME_LIMIT - len(ext) - 1] + "." + ext) if dot and len(ext) <= 16 else text[:NAME_LIMIT]
    return text or "file"


def directory(config: LoadedConfig, target: WorkItemRef) -> Path:
    """``<state.root>/local/attachments/<slug>/`` for the work item."""
    from the_loop.state.slugs import slug_of

    return config.state.root / "local" / "attachments" / slug_of(config.state, target)


def _save(path: Path, data: bytes) -> None:
    """Atomic (a reader never sees half a file), through the state's one byte writer."""
    from the_loop.state import atomic_write_bytes

    atomic_write_bytes(path, data)


def _existing(folder: Path, file_id: str) -> Path | None:
    """A file already saved under this id (by id: a renamed upload is still the same file)."""
    if not folder.is_dir():
        return None
    return next((p for p in sorted(folder.glob(f"{file_id}-*")) if p.is_file()), None)


def fetch_all(
    config: LoadedConfig,
    channel: object,
    target: WorkItemRef,
    files: tuple[Mapping[str, Any], ...],
    *,
    by_channel: bool = True,
) -> Saved:
    """Fetch and save a delivered message's files with ``channel`` (a channel; else, ``by_channel`` false, the
    ticket provider of a comment); emits ``channel.attachments`` or ``dispatch.attachments`` (counts only)."""
    result = Saved()
    if not files:
        return result
    folder = directory(config, target)
    for index, file in enumerate(files):
        name = str(file.get("name") or "file")
        result.names.append(name)
        if index >= MAX_FILES:
            result.named.append(name)
            continue
        path = _fetch_one(folder, channel, file)
        if path is None:
            result.refused.append(name)
        else:
            result.saved.append((str(file.get("mimetype") or "application/octet-stream"), path))
    counts = {
        "work_item": str(target),
        "count": len(files),
        "fetched": len(result.saved),
        "refused": len(result.refused),
        "named": len(result.named),
    }
    if by_channel:
        events.emit("channel.attachments", channel=getattr(channel, "name", ""), **counts)
    else:
        events.emit("dispatch.attachments", provider=target.provider, **counts)
    return result


def _fetch_one(folder: Path, channel: object, file: Mapping[str, Any]) -> Path | None:
    file_id = str(file.get("id") or "")
    url = str(file.get("url") or "")
    if not _FILE_ID.match(file_id) or not url or not isinstance(channel, AttachmentFetcher):
        return None
    found = _existing(folder, file_id)
    if found is not None:
        return found
    declared = file.get("size")
    if isinstance(declared, int) and declared > MAX_BYTES:
        return None
    try:
        data = channel.fetch_attachment(url, MAX_BYTES)
    except Exception:  # refused or failed: the reason never carries the token; the file stays named only
        return None
    if len(data) > MAX_BYTES:
        return None
    path = folder / f"{file_id}-{safe_name(str(file.get('name') or 'file'))}"
    if path.parent != folder:  # belt and braces: safe_name already keeps it one component
        return None
    try:
        _save(path, data)
    except Exception:  # a full disk or a read-only root (StateError): the file stays named only
        return None
    return path


def pane_frame(saved: Saved) -> str:
    """The block appended to the reply in the pane: kinds and paths, labelled untrusted."""
    if not (saved.saved or saved.named or saved.refused):
        return ""
    lines = ["", "Attached files (untrusted, saved by the-loop, not opened):"]
    lines += [f"- {kind} {path}" for kind, path in saved.saved]
    lines += [f"- not fetched (more than {MAX_FILES} files): {safe_name(name)}" for name in saved.named]
    lines += [f"- not fetched (refused): {safe_name(name)}" for name in saved.refused]
    return "\n".join(lines)


def mirror_names(files: tuple[Mapping[str, Any], ...]) -> str:
    """The names (with permalinks when known) the ticket mirror gets."""
    if not files:
        return ""
    lines = ["", "Attached files:"]
    for file in files:
        name = safe_name(str(file.get("name") or "file"))
        link = str(file.get("permalink") or "")
        lines.append(f"- {name} ({link})" if link.startswith("https://") else f"- {name}")
    return "\n".join(lines)


def fetch_guarded(
    url: str,
    limit: int,
    *,
    allowed: Callable[[str, int], bool],
    headers: Callable[[str], Mapping[str, str]],
    transport: Any = None,
) -> bytes:
    """The bytes at ``url``, at most ``limit``, for a source's :meth:`~AttachmentFetcher.fetch_attachment`.
    ``allowed(url, hop)`` is asked before every request (hop 0, then each redirect, followed by hand, at most
    :data:`MAX_REDIRECTS`); ``headers(url)`` gives that hop's credentials, so a token goes only where the source
    says. 30 s timeout; the body is read to ``limit`` + 1 and refused beyond. Raises :class:`AttachmentRefused`
    (its reason names no token)."""
    from urllib.parse import urljoin, urlsplit

    import httpx

    with httpx.Client(transport=transport, timeout=FETCH_TIMEOUT, follow_redirects=False, trust_env=False) as client:
        for hop in range(MAX_REDIRECTS + 1):
            if not allowed(url, hop):
                raise AttachmentRefused(f"attachment host not allowed: {urlsplit(url).hostname or '?'}")
            response = client.send(client.build_request("GET", url, headers=dict(headers(url))), stream=True)
            try:
                if response.is_redirect:
                    url = urljoin(url, response.headers.get("location", ""))
                    continue
                if response.status_code != 200:
                    raise AttachmentRefused(f"attachment fetch answered HTTP {response.status_code}")
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise AttachmentRefused("attachment larger than the cap")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > limit:  # read to cap + 1 at most, then refuse
                        raise AttachmentRefused("attachment larger than the cap")
                return bytes(body)
            finally:
                response.close()
    raise AttachmentRefused(f"attachment fetch: more than {MAX_REDIRECTS} redirects")
