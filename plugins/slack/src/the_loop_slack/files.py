"""Fetching a file attached to a Slack message (issue-416): the transport half of attachments; core decides when.

https only, to ``files.slack.com``, ``slack.com`` or ``*.slack.com`` — or to the host of ``apiBaseUrl`` (a
configured Slack, the fake one in tests: there http is allowed too, since that is what was configured). The bot
token goes only to those hosts; redirects are followed by hand, at most five, each hop's host checked again
before any request; 30 s timeout; the body is read to ``limit`` + 1 and refused beyond.
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

import httpx

from the_loop.interfaces import ChannelError

SLACK_HOSTS = ("files.slack.com", "slack.com")
MAX_REDIRECTS = 5
FETCH_TIMEOUT = 30.0


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
    """The bytes at ``url`` (at most ``limit``); :class:`ChannelError` for a refusal, naming no token."""
    with httpx.Client(transport=transport, timeout=FETCH_TIMEOUT, follow_redirects=False, trust_env=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            if not allowed(url, api_base_url):  # checked before every request, the first and each redirect
                raise ChannelError(f"attachment host not allowed: {urlsplit(url).hostname or '?'}")
            request = client.build_request("GET", url, headers={"Authorization": f"Bearer {token}"})
            response = client.send(request, stream=True)
            try:
                if response.is_redirect:
                    url = urljoin(url, response.headers.get("location", ""))
                    continue
                if response.status_code != 200:
                    raise ChannelError(f"attachment fetch answered HTTP {response.status_code}")
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise ChannelError("attachment larger than the cap")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > limit:  # read to cap + 1 at most, then refuse
                        raise ChannelError("attachment larger than the cap")
                return bytes(body)
            finally:
                response.close()
    raise ChannelError(f"attachment fetch: more than {MAX_REDIRECTS} redirects")
