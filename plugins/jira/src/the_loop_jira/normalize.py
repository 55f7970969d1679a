"""Jira objects → core's normalized events (J13, J17), the same from the poller and the webhook.

A comment is ``issue_comment``/``created`` with dedupe key ``jira-comment-<site>-<id>`` whichever ingress saw it, and
is marked ``shared_dedupe`` so a control command in it executes once on this machine. The excerpt the session sees is
an allow-listed, GitHub-neutral view (``x-the-loop-provider: jira``), never a raw Jira payload.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Literal

from the_loop.models import Actor, InboundEvent
from the_loop_jira.markup import AGENT_MARKER, RELAY_MARKER
from the_loop_jira.refs import issue_key

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef
    from the_loop_jira.client import JiraComment, JiraIssue

__all__ = ["Origin", "closure_event", "comment_event", "comment_key", "origin", "presence_event"]

Origin = Literal["self", "relay", "human"]
GITHUB_MARKER = "<!-- the-loop:agent-comment -->"
RELAY_ACTOR = Actor(provider="jira-relay", id="operator")


def comment_key(site: str, comment_id: str) -> str:
    return f"jira-comment-{site}-{comment_id}"


def origin(comment: JiraComment) -> Origin:
    """J13: self = the agent marker, or the service account without the relay marker; relay = the service account
    with it; anyone else is human (a typed relay marker grants nothing)."""
    if AGENT_MARKER in comment.body_md or GITHUB_MARKER in comment.body_md:
        return "self"
    if comment.is_self:
        return "relay" if RELAY_MARKER in comment.body_md else "self"
    return "human"


def _issue_excerpt(ref: WorkItemRef, issue: JiraIssue, labels: list[str]) -> dict[str, object]:
    return {
        "number": ref.number,
        "key": issue_key(ref),
        "title": issue.summary,
        "html_url": issue.url,
        "labels": [{"name": label} for label in labels],
    }


def comment_event(
    ref: WorkItemRef,
    issue: JiraIssue,
    comment: JiraComment,
    labels: list[str],
    transport: Literal["webhook", "poll"],
) -> InboundEvent:
    relay = origin(comment) == "relay"
    key = comment_key(ref.host, comment.id)
    excerpt: dict[str, object] = {
        "x-the-loop-provider": "jira",
        "action": "created",
        "issue": _issue_excerpt(ref, issue, labels),
        "comment": {
            "id": comment.id,
            "body": comment.body_md,
            "html_url": comment.url,
            "created_at": comment.created,
            "user": {"login": comment.author_id},
        },
    }
    if relay:
        excerpt["x-the-loop-relay"] = True
    actor = RELAY_ACTOR if relay else Actor(provider="jira", id=comment.author_id) if comment.author_id else None
    return InboundEvent(
        dedupe_key=key,
        delivery_id=key,
        provider="jira",
        transport=transport,
        event="issue_comment",
        action="created",
        kind="comment",
        actor=actor,
        body=comment.body_md,
        entity=str(ref),
        work_items=(str(ref),),
        labels=tuple(labels),
        url=comment.url,
        excerpt=excerpt,
        shared_dedupe=True,
        received_at="",
    )


def presence_event(ref: WorkItemRef, issue: JiraIssue, labels: list[str]) -> InboundEvent:
    """An armed ticket with a recorded start: ``issues``/``labeled`` (a fresh delivery each time)."""
    key = f"jira-presence-{ref}-{uuid.uuid4()}"
    return InboundEvent(
        dedupe_key=key,
        delivery_id=key,
        provider="jira",
        transport="webhook",
        event="issues",
        action="labeled",
        kind="labeled",
        entity=str(ref),
        work_items=(str(ref),),
        labels=tuple(labels),
        url=issue.url,
        excerpt={"x-the-loop-provider": "jira", "action": "labeled", "issue": _issue_excerpt(ref, issue, labels)},
    )


def closure_key(ref: WorkItemRef) -> str:
    """The dedupe key of a ticket's closure, whichever ingress saw it: a doorbell's close and the poller's are one."""
    return f"jira-close-{ref}-closed"


def closure_event(ref: WorkItemRef, issue: JiraIssue, transport: Literal["webhook", "poll"]) -> InboundEvent:
    """J16: the ticket reached Done — a closure with no sender, so cleanup is deferred (``no-actor``)."""
    key = closure_key(ref)
    return InboundEvent(
        dedupe_key=key,
        delivery_id=key,
        provider="jira",
        transport=transport,
        event="issues",
        action="closed",
        kind="closed",
        entity=str(ref),
        work_items=(str(ref),),
        closed="issue-closed",
        url=issue.url,
        excerpt={
            "x-the-loop-provider": "jira",
            "action": "closed",
            "issue": {**_issue_excerpt(ref, issue, list(issue.labels)), "state_reason": "completed"},
        },
    )
