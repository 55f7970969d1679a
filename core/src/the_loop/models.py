"""Shared models: what every ingress turns its input into, and what the dispatcher consumes.

Core never reads a provider payload. A webhook route, a poll source or a channel listener normalizes what it
receives into an :class:`InboundEvent`; the router resolves it to a work item and the dispatcher delivers a
:class:`WorkEvent`. The ref grammar, slug and tmux name live in :mod:`the_loop.refs` (kept free of pydantic for the
CLI's fast paths) and are re-exported here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from the_loop.refs import RefError, WorkItemRef, parse_ref, slug_for, tmux_name

__all__ = [
    "Actor",
    "EventKind",
    "InboundEvent",
    "RefError",
    "WorkEvent",
    "WorkItemRef",
    "parse_ref",
    "slug_for",
    "tmux_name",
]

EventKind = Literal[
    "comment",
    "review",
    "review-comment",
    "opened",
    "labeled",
    "reopened",
    "closed",
    "ci",
    "reply",
    "text",
    "other",
    "interrupt",  # a WorkEvent only: the harness's own interrupt, then its text (sessions.steering.interrupt)
]


class Actor(BaseModel):
    """Who did it, in the provider's own identity space (a GitHub login, a Jira account id, a Slack member id)."""

    model_config = ConfigDict(frozen=True)

    provider: str
    id: str
    name: str = ""


class InboundEvent(BaseModel):
    """One provider object, normalized by its ingress; the router reads nothing else.

    ``dedupe_key`` is the same whichever ingress saw the object (decision 6: ``github:comment:<node_id>``, …; the
    provider's delivery id for events with no object of their own). ``entity`` is the ref of the issue or pull request
    the event is on; ``work_items`` the candidate refs it may belong to, best first (the entity itself last — linkage
    adds the issues a pull request delivers). ``excerpt`` is the provider's allow-listed view for the prompt (never the
    raw payload); ``ack`` is opaque to core and handed back to the provider for reactions.
    """

    model_config = ConfigDict(frozen=True)

    dedupe_key: str = Field(min_length=1)
    delivery_id: str = Field(min_length=1)
    provider: str
    transport: Literal["webhook", "poll", "socket", "cli"]
    event: str
    action: str = ""
    kind: EventKind
    repository: str = ""
    actor: Actor | None = None
    body: str | None = None
    entity: str | None = None
    work_items: tuple[str, ...] = ()
    pull_request: str | None = None
    # The pull request's head branch when the payload names it and it lives in the pull request's own repository
    # (not a fork's): a pull request's own session checks it out (issue-260). "" when unknown.
    head_branch: str = ""
    labels: tuple[str, ...] = ()
    label_added: str | None = None
    closed: Literal["issue-closed", "pr-merged", "pr-closed"] | None = None
    # Refs among ``work_items`` resting only on a naming convention (a branch ``issue-999``): the router checks
    # each exists before routing by it (A X5).
    unconfirmed: tuple[str, ...] = ()
    # A CI result: ``failure`` when a completed check failed and is worth acting on; anything else (``success``,
    # ``cancelled``, ``summary`` for a suite or workflow run) is settled as not actionable (A M8).
    conclusion: str = ""
    url: str = ""
    excerpt: dict[str, Any] = Field(default_factory=dict)
    # Files on a channel reply, metadata only (id, name, size, url, mimetype): fetched at delivery (issue-416).
    attachments: tuple[dict[str, Any], ...] = ()
    ack: dict[str, str] = Field(default_factory=dict)
    shared_dedupe: bool = False  # seen by two ingresses: a control command is claimed once (control_claims)
    received_at: str = ""

    def inbox_entry(self) -> dict[str, Any]:
        """What an ingress puts in the inbox (under ``dedupe_key``): the event, plus the fields the inbox worker
        orders and logs by."""
        return {
            "type": "inbound",
            "delivery_id": self.delivery_id,
            "work_items": list(self.work_items),
            "event": self.model_dump(mode="json"),
        }


class WorkEvent(BaseModel):
    """What the dispatcher takes from a work item's queue: deliver ``text`` into its session (spawning or
    respawning as needed), or, for ``spawn``, start it with ``text`` as the boot prompt."""

    model_config = ConfigDict(frozen=True)

    delivery_id: str = Field(min_length=1)
    work_item: str
    endpoint: str = ""  # the ref of the session it is for: the work item's own (""), or a pull request's
    text: str
    spawn: bool = False
    branch: str = ""  # a pull request endpoint's head branch, checked out when its session is first made
    source: str = "cli"
    actor: str = ""
    kind: EventKind = "text"
