"""A reply mirrored onto the ticket and delivered into the session; text scrubbed and defanged on the way."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from the_loop import control, events
from the_loop.channels.conversations import REPLY_KIND, label

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


_HTML_COMMENT = re.compile(r"<!--.*?(-->|$)", re.DOTALL)
_BROADCAST = re.compile(r"<!(channel|here|everyone)(\|[^>]*)?>")
_TOKEN = re.compile(r"\b(xox[abpr]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{16,})")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")


_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|PRIVATE|CREDENTIAL", re.IGNORECASE)
_USER_PATH = re.compile(r"(/(?:home|Users)/)[^/\s]+")


def scrub(text: str) -> str:
    """Text safe to quote on a ticket: pasted markers and envelopes stripped, broadcasts neutralised, the values of
    secret-named environment variables, token-shaped strings and e-mail addresses replaced, the home directory,
    other users' home paths and this host's name hidden."""
    import os
    import socket

    text = _HTML_COMMENT.sub("", text)
    text = _BROADCAST.sub(lambda m: f"@{m.group(1)}", text)
    for variable, value in os.environ.items():
        if _SECRET_NAME.search(variable) and len(value) >= 8:
            text = text.replace(value, "[redacted]")
    text = _TOKEN.sub("[redacted]", text)
    text = _EMAIL.sub("[email]", text)
    home = os.path.expanduser("~")
    if len(home) > 1:
        text = text.replace(home, "~")
    text = _USER_PATH.sub(r"\1[user]", text)
    host = socket.gethostname()
    if len(host) >= 4:
        text = re.sub(rf"\b{re.escape(host)}\b", "[host]", text)
    return text


def defang(text: str, configured: Mapping[str, str]) -> str:
    """Control keywords in quoted text shown as code, so a quote never reads as a command."""
    for keyword in control.keywords(configured).values():
        pattern = re.escape(keyword).replace(r"\ ", r"[ \t]+")
        text = re.sub(rf"(?<!`)\b({pattern})\b(?!`)", r"`\1`", text, flags=re.IGNORECASE)
    return text


ENVELOPE = "<!-- the-loop:event "


def envelope(kind: str, source: str, actor: str) -> str:
    data = {"actor": {"ids": {source: actor}}, "source": source, "ts": events.timestamp(), "type": kind}
    return ENVELOPE + json.dumps(data, sort_keys=True).replace(">", "\\u003e") + " -->"


def mirror_text(config: LoadedConfig, name: str, message_text: str, author: str) -> str:
    """The ticket record of a reply: who wrote it (label and ``<channel>:<member id>``), the words quoted after
    scrubbing, keywords defanged, then the envelope (the caller adds the self-authored marker)."""
    text = defang(scrub(message_text), config.core.routing.control.keywords)
    quoted = "\n".join(f"> {line}" for line in text.splitlines() or [""])
    who = f"{label(config, name, author)} ({name}:{author})"
    return f"Reply from {who} in the work item's {name} thread:\n\n{quoted}\n\n" + envelope(REPLY_KIND, name, author)
