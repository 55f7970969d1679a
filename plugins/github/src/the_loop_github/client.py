"""The GitHub REST client the poll source reads through: conditional GETs (ETag / ``If-None-Match``), ``Link``
pagination, and one back-off clock per host for rate limits (B §5). Failures are :class:`ApiError`; a limit that
stops a host is :class:`RateLimited`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from the_loop import events
from the_loop_github.refs import DEFAULT_HOST

if TYPE_CHECKING:
    from github import Github

    from the_loop_github.ticketing import GitHubTicketProvider

__all__ = ["COMMENT_PAGES", "PAGE", "ApiError", "Client", "RateLimited"]

PAGE = 100
COMMENT_PAGES = 30  # a thread longer than 3,000 comments per surface fails the item rather than half-reading it
MIN_BACKOFF = 60.0
ETAG_CACHE = 4096
TIMEOUT_SECONDS = 60


class ApiError(Exception):
    """A GitHub read failed. ``permanent``: no retry will change it (401, 404, 403 without a rate limit, 410)."""

    def __init__(self, message: str, status: int = 0, permanent: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.permanent = permanent


class RateLimited(ApiError):
    """GitHub asked us to back off; nothing goes to that host before ``until`` (epoch seconds)."""

    def __init__(self, message: str, until: float) -> None:
        super().__init__(message, 403)
        self.until = until


class Client:
    """Conditional GETs through PyGithub's requester, with one ETag cache and one back-off clock per host."""

    def __init__(self, provider: GitHubTicketProvider, clock: Callable[[], float] = time.time) -> None:
        self.provider = provider
        self.clock = clock  # wall time; a test injects one to cross a two-minute rate-limit reset at once
        self.cache: OrderedDict[str, tuple[str, Any, str]] = OrderedDict()  # url → (etag, data, next link)
        self.blocked_until: dict[str, float] = {}
        self.clients: dict[str, Github] = {}
        self.requests = 0  # wire requests this process (the benchmark reads them)

    def reset(self) -> None:
        """Drop the per-cycle PyGithub clients, so a rotated token is read at the next call."""
        for client in self.clients.values():
            client.close()
        self.clients.clear()

    def _client(self, host: str) -> Github:
        if host not in self.clients:
            from github import Auth, Github

            self.clients[host] = Github(
                auth=Auth.Token(self.provider.token("" if host == DEFAULT_HOST else host)),
                base_url=self.provider.api_base("" if host == DEFAULT_HOST else host),
                timeout=TIMEOUT_SECONDS,
                retry=None,  # limits are honoured here, by backing off; PyGithub must never sleep on them
                seconds_between_requests=None,
                seconds_between_writes=None,
                user_agent="the-loop",
            )
        return self.clients[host]

    def get(self, host: str, url: str, params: Mapping[str, Any] | None = None) -> tuple[Any, str, bool]:
        """``(data, next page URL or "", changed)``; an unchanged answer (304) comes from the cache."""
        from requests import RequestException

        until = self.blocked_until.get(host, 0.0)
        if self.clock() < until:
            raise RateLimited(f"rate-limited until {time.strftime('%H:%M:%SZ', time.gmtime(until))}", until)
        key = url + "?" + "&".join(f"{k}={v}" for k, v in sorted((params or {}).items()))
        cached = self.cache.get(key)
        headers = {"If-None-Match": cached[0]} if cached else {}
        try:
            self.requests += 1
            status, raw_headers, body = self._client(host).requester.requestJson(
                "GET", url, parameters=dict(params or {}) or None, headers=headers
            )
        except RequestException as exc:
            raise ApiError(f"GitHub API GET {_path(url)}: unreachable ({type(exc).__name__})") from None
        answer = {str(k).lower(): str(v) for k, v in raw_headers.items()}
        if status == 304 and cached:
            self.cache.move_to_end(key)
            return cached[1], cached[2], False
        data = _json(body)
        if status >= 400:
            raise self._error(host, url, status, answer, data)
        following = _next_link(answer.get("link", ""))
        etag = answer.get("etag", "")
        if etag:
            self.cache[key] = (etag, data, following)
            self.cache.move_to_end(key)
            while len(self.cache) > ETAG_CACHE:
                self.cache.popitem(last=False)
        return data, following, True

    def get_all(self, host: str, url: str, params: Mapping[str, Any], limit: int) -> tuple[list[Any], bool]:
        """Every page (``Link: rel="next"``) up to ``limit`` rows; ``changed`` when any page was not a 304."""
        rows: list[Any] = []
        changed = False
        next_url, next_params = url, dict(params)
        pages = 0
        while next_url and len(rows) < limit:
            data, following, fresh = self.get(host, next_url, next_params)
            changed = changed or fresh
            if not isinstance(data, list):
                raise ApiError(f"GitHub API GET {_path(url)}: not a list")
            rows.extend(data)
            pages += 1
            if pages >= COMMENT_PAGES and following:
                raise ApiError(f"GitHub API GET {_path(url)}: more than {pages} pages")
            next_url, next_params = following, {}
        return rows[:limit], changed

    def _error(self, host: str, url: str, status: int, headers: Mapping[str, str], data: Any) -> ApiError:
        message = " ".join(str(data.get("message", "") if isinstance(data, dict) else "").split())[:200]
        text = f"GitHub API GET {_path(url)}: {status} {message or 'no message'}"
        limited = status in (403, 429) and (
            headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers or "rate limit" in message.lower()
        )
        if limited:
            now = self.clock()
            until = now + MIN_BACKOFF
            reset = _number(headers.get("x-ratelimit-reset"))
            retry_after = _number(headers.get("retry-after"))
            if headers.get("x-ratelimit-remaining") == "0" and reset is not None:
                until = max(until, reset)
            if retry_after is not None:
                until = max(until, now + retry_after)
            self.blocked_until[host] = until
            return RateLimited(f"rate-limited ({text}); backing off until {events.timestamp(until)}", until)
        return ApiError(text, status, permanent=status in (401, 403, 404, 410))


def _json(body: str) -> Any:
    import json

    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _next_link(link: str) -> str:
    for part in link.split(","):
        if 'rel="next"' in part and "<" in part and ">" in part:
            return part[part.index("<") + 1 : part.index(">")]
    return ""


def _path(url: str) -> str:
    return urlsplit(url).path or url
