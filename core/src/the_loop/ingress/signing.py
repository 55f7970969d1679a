"""HMAC-SHA256 body signatures (``sha256=<hex>``), as GitHub and Jira webhooks send them.

One place for the comparison rule: bytes on both sides, in constant time, so a header holding non-ASCII bytes is a
mismatch rather than a ``TypeError`` (issue-496).
"""

from __future__ import annotations

import hashlib
import hmac


def signature(secret: str, body: bytes) -> str:
    """The ``sha256=<hex>`` value a sender with ``secret`` puts on ``body`` (tests and benchmarks sign with it)."""
    return "sha256=" + hmac.new(secret.encode("utf-8", "surrogateescape"), body, hashlib.sha256).hexdigest()


def signed_by(secret: str, body: bytes, provided: str | None) -> bool:
    """True when ``provided`` (a header value, possibly absent or hostile) is ``body``'s signature under ``secret``."""
    if not provided:
        return False
    return hmac.compare_digest(signature(secret, body).encode("ascii"), provided.encode("utf-8", "replace"))
