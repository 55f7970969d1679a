"""What both Jira ingresses do with a comment they read: settle it, refuse it, or put it in the inbox.

The poller and the doorbell share this, so one comment becomes the same normalized event (and the same dedupe key)
whichever saw it first; the inbox and the control claim make the second sighting harmless.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from the_loop import events
from the_loop.toolkit import Inbox, closing, control
from the_loop_jira.normalize import comment_event, origin
from the_loop_jira.ticketing import MIRROR_LABEL, arming_labels

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef
    from the_loop_jira.client import JiraComment, JiraIssue

__all__ = ["Result", "ingest_comment", "is_command", "note_reopened"]

Result = Literal["forwarded", "settled", "refused", "duplicate"]


def is_command(config: LoadedConfig, body: str) -> bool:
    return control.parse(body, config.core.routing.control.keywords).command is not None


def note_reopened(config: LoadedConfig, ref: WorkItemRef, record: dict[str, Any], source: str) -> bool:
    """Jira sends no ``reopened`` event: a ticket whose close ended it, seen armed and not done again, was reopened.
    Saying so clears ``ended`` and forgets its close keys, so closing it again is acted on, not a duplicate."""
    if (record.get("ended") or {}).get("reason") != "issue-closed":  # a merged PR ending it is no reopen
        return False
    return closing.work_item_reopened(config, ref, actor="", source=source)


def _settled(reason: str, fields: dict[str, str]) -> None:
    """A comment not forwarded, in each ingress's own words: the poller settles it, the doorbell drops it."""
    if fields["transport"] == "webhook":
        events.emit("routing.dropped", reason=reason, provider="jira", **fields)
    else:
        events.emit("poll.comment_settled", reason=reason, **fields)


def ingest_comment(
    config: LoadedConfig,
    inbox: Inbox,
    ref: WorkItemRef,
    issue: JiraIssue,
    comment: JiraComment,
    transport: Literal["webhook", "poll"],
) -> Result:
    """Self comments are settled (never forwarded); on a mirror ticket nothing arms (J28); the rest go to the
    inbox. Raises what the inbox raises (the caller must not advance its cursor then)."""
    fields = {"work_item": str(ref), "comment_id": comment.id, "transport": transport}
    if origin(comment) == "self":
        _settled("self-authored", fields)
        return "settled"
    if MIRROR_LABEL in issue.labels:
        if is_command(config, comment.body_md):
            events.emit("arm.refused", reason="mirror", **fields)
            return "refused"
        _settled("mirror", fields)
        return "settled"
    event = comment_event(ref, issue, comment, arming_labels(config, issue.labels), transport)
    stored = inbox.put(event.dedupe_key, event.inbox_entry())
    if not stored:  # the other ingress saw it first: one dedupe key per comment (decision 6)
        events.emit("routing.dropped", reason="duplicate-delivery", delivery_id=event.delivery_id, **fields)
        return "duplicate"
    events.emit("poll.comment_forwarded", delivery_id=event.delivery_id, **fields)
    return "forwarded"
