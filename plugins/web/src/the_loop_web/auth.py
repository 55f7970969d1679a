"""Who is asking, and may they: bearer tokens, login sessions (cookies), CSRF, Origin, failed-login limits.

Every request but ``GET /api/v1/health`` and the login page must carry a credential: ``Authorization: Bearer
<token>`` (a program) or the session cookie a login set (a browser). Fail closed: no credential, an unknown or
revoked one, or a token file that cannot be read → 401. A browser's state-changing request must also carry its
session's CSRF token in ``X-CSRF-Token`` and, when it sends an ``Origin``, one this service answers as; a
WebSocket with the cookie must send such an ``Origin``. A bearer request needs neither: no browser adds an
``Authorization`` header to a request another site makes.

Logins live in memory (a restart logs everyone out) and are bounded; each is re-checked against the token file on
every request, so a revoke ends its logins at once.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from the_loop_web.tokens import Principal, TokenStore, digest

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

COOKIE = "the_loop_session"
CSRF_HEADER = "x-csrf-token"
MAX_LOGINS = 1000  # live login sessions held; the oldest goes first
MAX_PEERS = 10_000  # peers whose failed logins are counted


@dataclass
class Login:
    principal: Principal
    csrf: str
    expires: float
    how: str  # token | link


@dataclass
class Caller:
    """An authenticated request: who, and whether it came with the cookie (a browser) or a bearer token."""

    principal: Principal
    login: Login | None = None

    @property
    def by_cookie(self) -> bool:
        return self.login is not None


@dataclass
class Limiter:
    """Failed logins per peer address over a sliding window; past the limit the peer waits the window out."""

    attempts: int
    window: float
    failures: OrderedDict[str, deque[float]] = field(default_factory=OrderedDict)

    def blocked(self, peer: str, now: float | None = None) -> float:
        """Seconds ``peer`` must still wait (0 when it may try)."""
        now = time.monotonic() if now is None else now
        found = self.failures.get(peer)
        if not found:
            return 0.0
        while found and found[0] <= now - self.window:
            found.popleft()
        if len(found) < self.attempts:
            return 0.0
        return max(0.0, found[0] + self.window - now)

    def failed(self, peer: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        found = self.failures.pop(peer, None) or deque(maxlen=self.attempts)
        found.append(now)
        self.failures[peer] = found
        while len(self.failures) > MAX_PEERS:
            self.failures.popitem(last=False)


class Gatekeeper:
    def __init__(self, store: TokenStore, *, session_seconds: float, attempts: int, window: float) -> None:
        self.store = store
        self.session_seconds = session_seconds
        self.limiter = Limiter(attempts, window)
        self._logins: OrderedDict[str, Login] = OrderedDict()

    # -------------------------------------------------------------------------------------- logins

    def login(self, principal: Principal, how: str) -> tuple[str, Login]:
        """A new login for ``principal``: the cookie value (returned, never kept) and its record."""
        cookie = secrets.token_urlsafe(32)
        login = Login(principal, secrets.token_urlsafe(32), time.time() + self.session_seconds, how)
        self._logins[digest(cookie)] = login
        while len(self._logins) > MAX_LOGINS:
            self._logins.popitem(last=False)
        return cookie, login

    def logout(self, cookie: str) -> Login | None:
        return self._logins.pop(digest(cookie), None)

    # -------------------------------------------------------------------------------------- requests

    def caller(self, connection: HTTPConnection) -> Caller | None:
        """The authenticated caller of a request or WebSocket, or None (fail closed)."""
        if not self.store.readable:
            return None
        header = connection.headers.get("authorization", "")
        if header:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer":
                return None
            principal = self.store.authenticate(value.strip())
            return Caller(principal) if principal is not None else None
        cookie = connection.cookies.get(COOKIE, "")
        if not cookie:
            return None
        key = digest(cookie)
        login = self._logins.get(key)
        if login is None:
            return None
        if login.expires <= time.time() or not self.store.holds(login.principal):
            self._logins.pop(key, None)  # expired, or its token was revoked
            return None
        return Caller(login.principal, login)


def same_origin(connection: HTTPConnection, extra: list[str]) -> bool:
    """Whether the request's ``Origin`` is this service as the browser reached it (the ``Host`` it asked) or one
    the operator allows (``web.allowedOrigins``, a reverse proxy's)."""
    origin = connection.headers.get("origin", "")
    if not origin or origin == "null":
        return False
    if origin.rstrip("/") in {allowed.rstrip("/") for allowed in extra}:
        return True
    return urlsplit(origin).netloc.lower() == connection.headers.get("host", "").lower()
