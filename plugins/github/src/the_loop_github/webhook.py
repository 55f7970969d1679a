"""The GitHub webhook route on core's HTTP server (``POST webhooks.ghWebhook.path``).

One request, in this order (A §2.1, decision 1): verify ``X-Hub-Signature-256`` over the raw body — HMAC-SHA256
with the secret read now from the env var ``webhooks.ghWebhook.secretEnv``, compared in constant time as bytes —
else 401; refuse a delivery without ``X-GitHub-Delivery`` (400); parse the body as UTF-8 JSON (else 400); normalize
it; write the event to the durable inbox (fsync'd) and only then answer ``202 {"status":"accepted"}``. Dropped
deliveries (forged provider, disabled event, ignored action, duplicate) are answered 202 too, so GitHub does not
retry them. Routing happens later, off the request path; nothing here touches tmux.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.interfaces import PEER_HEADER, WebhookIngress, WebhookResponse
from the_loop.toolkit import Inbox, StateError, signed_by
from the_loop_github.normalize import Drop, normalize

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = ["GitHubWebhook"]

SIGNATURE_HEADER = "x-hub-signature-256"
EVENT_HEADER = "x-github-event"
DELIVERY_HEADER = "x-github-delivery"
HEADER_CAP = 200  # how much of a header value reaches the event log
_UNPRINTABLE = re.compile(r"[^\x21-\x7e]")  # header values are logged before they are trusted: ASCII only
# A JSON escape of a lone surrogate decodes into a str that cannot be written back as UTF-8.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
CLOSING_EVENTS = ("issues", "pull_request")  # the events that carry closes (A §2.9)
DROP_LEVELS = {"forged-provider": "warning", "disabled-event": "debug", "ignored-action": "debug"}


def _parse(body: bytes) -> dict[str, Any] | None:
    """The payload object, or None when the body is not UTF-8 JSON holding an object. Empty means ``{}``."""
    if not body.strip():
        return {}
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    if _ESCAPED_SURROGATE.search(body):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return None
    return value


class GitHubWebhook(WebhookIngress):
    """Receives GitHub deliveries and writes each accepted one to the inbox before answering."""

    name = "github"
    methods = ("POST",)

    def __init__(self, config: LoadedConfig) -> None:
        hook = config.core.webhooks.gh_webhook
        self.path = hook.path.rstrip("/") or "/"
        self.secret_env = hook.secret_env
        self.allow_unsigned = hook.allow_unsigned
        self.events = tuple(hook.events)
        self.inbox = Inbox.for_config(config)  # one per route: concurrent puts share a group commit
        missing = [name for name in CLOSING_EVENTS if self.events and name not in self.events]
        if missing:  # issue-94: without closes, ended work items keep their sessions forever
            print(
                f"warning: webhooks.ghWebhook.events omits {' and '.join(missing)}: closing an issue or merging a "
                "pull request will not end its session",
                file=sys.stderr,
                flush=True,
            )

    def problems(self) -> list[str]:
        if self.allow_unsigned or os.environ.get(self.secret_env):
            return []
        return [
            f"{self.secret_env} is not set (webhooks.ghWebhook.secretEnv; unsigned deliveries are refused "
            "unless webhooks.ghWebhook.allowUnsigned: true)"
        ]

    def _verified(self, headers: Mapping[str, str], body: bytes) -> bool | None:
        """True when signed with the secret, False when unsigned and allowed, None when refused."""
        secret = os.environ.get(self.secret_env, "")
        if not secret:
            return False if self.allow_unsigned else None
        return True if signed_by(secret, body, headers.get(SIGNATURE_HEADER)) else None

    def handle(self, headers: Mapping[str, str], body: bytes) -> WebhookResponse:
        lowered = {str(key).lower(): value for key, value in headers.items()}
        gh_event = _UNPRINTABLE.sub("?", (lowered.get(EVENT_HEADER) or "").strip()[:HEADER_CAP]) or "unknown"
        raw_id = (lowered.get(DELIVERY_HEADER) or "").strip()
        delivery_id = raw_id if len(raw_id) <= HEADER_CAP and not _UNPRINTABLE.search(raw_id) else ""
        logged_id = _UNPRINTABLE.sub("?", raw_id[:HEADER_CAP]) or "-"

        verified = self._verified(lowered, body)
        if verified is None:
            events.emit(
                "webhook.rejected",
                level="warning",
                reason="invalid-signature",
                gh_event=gh_event,
                delivery_id=logged_id,
                peer=lowered.get(PEER_HEADER) or None,
            )
            return WebhookResponse(401, {"status": "invalid signature"})
        if not delivery_id:  # missing, or not a printable token (GitHub sends a GUID)
            reason = "invalid-delivery-id" if raw_id else "missing-delivery-id"
            events.emit("webhook.rejected", level="warning", reason=reason, gh_event=gh_event, delivery_id=logged_id)
            return WebhookResponse(400, {"status": reason.replace("-", " ")})
        payload = _parse(body)
        if payload is None:
            events.emit(
                "webhook.rejected", level="error", reason="invalid-payload", gh_event=gh_event, delivery_id=delivery_id
            )
            return WebhookResponse(400, {"status": "invalid payload"})

        action = payload.get("action")
        action = _UNPRINTABLE.sub("?", action[:HEADER_CAP]) if isinstance(action, str) else None  # for the log
        events.emit("webhook.received", gh_event=gh_event, action=action, delivery_id=delivery_id, verified=verified)
        try:
            event = normalize(gh_event, delivery_id, payload, events=self.events, received_at=events.timestamp())
        except Exception as exc:  # a payload shape normalize does not survive: refuse it, never a 500
            events.emit(
                "webhook.rejected",
                level="error",
                reason="invalid-payload",
                gh_event=gh_event,
                delivery_id=delivery_id,
                error=type(exc).__name__,
            )
            return WebhookResponse(400, {"status": "invalid payload"})
        if isinstance(event, Drop):
            events.emit(
                "routing.dropped",
                level=DROP_LEVELS.get(event.reason, "info"),
                reason=event.reason,
                gh_event=gh_event,
                action=action,
                delivery_id=delivery_id,
            )
            return WebhookResponse(202, {"status": "accepted"})

        try:
            stored = self.inbox.put(event.dedupe_key, event.inbox_entry())
        except StateError as exc:  # not stored: GitHub must see a failure, so the delivery can be redelivered
            events.emit(
                "webhook.rejected",
                level="error",
                reason="inbox-unavailable",
                gh_event=gh_event,
                delivery_id=delivery_id,
                error=str(exc),
            )
            return WebhookResponse(503, {"status": "unavailable"})
        if not stored:
            events.emit(
                "routing.dropped",
                reason="duplicate-delivery",
                gh_event=gh_event,
                action=action,
                delivery_id=delivery_id,
                dedupe_key=event.dedupe_key,
            )
        return WebhookResponse(202, {"status": "accepted"})
