"""The Jira doorbell: ``POST /jira-webhook`` on core's HTTP server (J21-J23).

The route answers only while the env var ``integrations.jira.webhook.secretEnv`` names is set (else 404). A body must
carry ``X-Hub-Signature: sha256=<hex HMAC-SHA256(secret, body)>`` (compared in constant time, as bytes) before it is
parsed. A verified body is only a doorbell: its ``webhookEvent``, ``issue.key`` and ``comment.id`` are read, and
everything else — the issue, its labels and status, the comment's text and author — is re-read from Jira with the
daemon's own credential, so a signed forgery injects neither text nor identity.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.interfaces import PEER_HEADER, WebhookIngress, WebhookResponse
from the_loop.toolkit import Inbox, StateError, control, signed_by
from the_loop_jira.client import CredentialsMissing, JiraError
from the_loop_jira.ingest import ingest_comment, note_reopened
from the_loop_jira.normalize import closure_event, presence_event
from the_loop_jira.refs import DIGITS, ISSUE_KEY, ref_for
from the_loop_jira.ticketing import arming_labels, client_for, settings_of

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = ["PATH", "JiraWebhook"]

PATH = "/jira-webhook"
SIGNATURE_HEADER = "x-hub-signature"
GUID_HEADER = "x-atlassian-webhook-identifier"
ACTED_ON = ("comment_created", "jira:issue_updated")
_PRINTABLE = re.compile(r"^[\x21-\x7e]{1,200}$")


def _doorbell(body: bytes) -> tuple[str, str, str] | None:
    """(webhookEvent, issue key, comment id) — the only fields a body is trusted for; None when not JSON."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    event = data.get("webhookEvent")
    issue = data.get("issue")
    comment = data.get("comment")
    key = issue.get("key") if isinstance(issue, dict) else None
    comment_id = comment.get("id") if isinstance(comment, dict) else None
    if isinstance(comment_id, int) and not isinstance(comment_id, bool):
        comment_id = str(comment_id)
    return (
        event[:64] if isinstance(event, str) and len(event) <= 64 else "",
        key if isinstance(key, str) and len(key) <= 32 else "",
        comment_id if isinstance(comment_id, str) and len(comment_id) <= 32 else "",
    )


class JiraWebhook(WebhookIngress):
    name = "jira"
    path = PATH
    methods = ("POST",)

    def __init__(self, config: LoadedConfig) -> None:
        self.config = config
        self.secret_env = settings_of(config).webhook.secret_env
        self.inbox = Inbox.for_config(config)

    def handle(self, headers: Mapping[str, str], body: bytes) -> WebhookResponse:
        secret = os.environ.get(self.secret_env, "") if self.secret_env else ""
        if not secret:
            return WebhookResponse(404, {"status": "not found"})
        lowered = {str(k).lower(): v for k, v in headers.items()}
        guid = str(lowered.get(GUID_HEADER) or "")
        guid = guid if _PRINTABLE.match(guid) else "-"
        if not signed_by(secret, body, lowered.get(SIGNATURE_HEADER)):
            events.emit(  # J21: who knocked is logged (their address), never what they sent
                "webhook.rejected",
                level="warning",
                reason="invalid-signature",
                provider="jira",
                delivery_id=guid,
                peer=lowered.get(PEER_HEADER) or None,
            )
            return WebhookResponse(401, {"status": "invalid signature"})
        bell = _doorbell(body)
        if bell is None:
            events.emit("webhook.rejected", level="error", reason="invalid-payload", provider="jira", delivery_id=guid)
            return WebhookResponse(400, {"status": "invalid payload"})
        try:
            self._ring(*bell, guid=guid)
        except StateError as exc:  # not stored: Jira must see a failure so it retries
            events.emit("webhook.rejected", level="error", reason="inbox-unavailable", provider="jira", error=str(exc))
            return WebhookResponse(503, {"status": "unavailable"})
        except JiraError as exc:
            events.emit("jira.doorbell_failed", level="warning", delivery_id=guid, error=str(exc))
            if exc.transient:  # 429, 5xx, unreachable: Jira redelivers on a failure, so the comment is not lost
                return WebhookResponse(503, {"status": "unavailable"})
        except CredentialsMissing as exc:
            events.emit("jira.doorbell_failed", level="warning", delivery_id=guid, error=str(exc))
        except Exception as exc:  # the receiver never crashes on a doorbell
            events.emit("jira.doorbell_failed", level="error", delivery_id=guid, error=type(exc).__name__)
        return WebhookResponse(202, {"status": "accepted"})

    def _dropped(self, reason: str, guid: str, **more: Any) -> None:
        events.emit("routing.dropped", reason=reason, provider="jira", delivery_id=guid, **more)

    def _ring(self, webhook_event: str, key: str, comment_id: str, *, guid: str) -> None:
        events.emit("webhook.received", provider="jira", gh_event=webhook_event or None, delivery_id=guid)
        if webhook_event not in ACTED_ON:
            self._dropped("ignored-event", guid, gh_event=webhook_event or None)
            return
        settings = settings_of(self.config)
        sources = {p for s in self.config.core.polling.sources if s.provider == "jira" for p in s.projects}
        sources |= {k for k, project in settings.projects.items() if project.repository}
        ref = ref_for(settings.site, key) if ISSUE_KEY.match(key or "") else None
        if ref is None or ref.owner not in settings.projects or not settings.projects[ref.owner].repository:
            self._dropped("unknown-jira-project", guid)
            return
        client = client_for(self.config)
        issue = client.issue(ref)
        if issue.moved_to:
            moved = ref_for(settings.site, issue.moved_to)
            reason = "jira-ticket-moved" if moved is not None and moved.owner in sources else "jira-ticket-project"
            self._dropped(reason, guid, work_items=[str(ref)])
            return
        labels = arming_labels(self.config, issue.labels)
        armed = control.arming_refusal(self.config, ref, labels) is None
        if webhook_event == "jira:issue_updated":
            if issue.status_category == "done":
                event = closure_event(ref, issue, "webhook")
            elif armed:
                note_reopened(self.config, ref, self.config.store.read(ref) or {}, "webhook")
                if control.recorded(self.config, ref) != "start":
                    return
                event = presence_event(ref, issue, labels)
            else:
                return
            self.inbox.put(event.dedupe_key, event.inbox_entry())
            return
        if not armed or issue.status_category == "done":
            self._dropped("spawn-policy", guid, work_items=[str(ref)])
            return
        if not DIGITS.match(comment_id or ""):
            self._dropped("invalid-payload", guid, work_items=[str(ref)])
            return
        comment = client.comment(ref, comment_id)
        ingest_comment(self.config, self.inbox, ref, issue, comment, "webhook")
