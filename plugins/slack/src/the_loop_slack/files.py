"""Fetching a file attached to a Slack message (issue-416): the transport half of attachments; core decides when.

https only, to ``files.slack.com``, ``slack.com`` or ``*.slack.com`` — or to the host of ``apiBaseUrl`` (a
configured Slack, the fake one in tests: there http is allowed too, since that is what was configured). The bot
token goes only to those hosts; redirects are followed by hand, at most five, each hop's host checked again
before any request; 30 s timeout; the body is read to ``limit`` + 1 and refused beyond.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import httpx

SLACK_HOSTS = ("files.slack.com", "slack.com")


def allowed(url: str, api_base_url: str) -> bool:
    """Whether ``url`` may be fetched with the bot token: a Slack host over https, or the configured base's host
    with its own scheme."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.username or parts.password:
        return False
    if parts.scheme == "https" and (host in SLACK_HOSTS or host.endswith(".slack.com")):
        return True
    base = urlsplit(api_base_url)
    base_host = (base.hostname or "").lower()
    return bool(base_host) and host == base_host and parts.port == base.port and parts.scheme == base.scheme


def fetch(url: str, token: str, limit: int, api_base_url: str, transport: httpx.BaseTransport | None = None) -> bytes:
    """The bytes at ``url`` (at most ``limit``), the bot token on every hop (each one a Slack host: checked before
    it is asked); :class:`~the_loop.interfaces.ChannelError` for a refusal, naming no token."""
    from the_loop.toolkit import fetch_guarded

    return fetch_guarded(
        url,
        limit,
        allowed=lambda each, _hop: allowed(each, api_base_url),
        headers=lambda _each: {"Authorization": f"Bearer {token}"},
        transport=transport,
    )
