"""Delivering the comments the GitHub poll source found through the durable inbox: each one under the webhook's
dedupe key, its attempts counted in the ledger, retried while the inbox abandons it and given up on (one notice on
the item) after ``maxRetries`` rounds (B R26, issue-240); at a stop, the attempts still in flight are given back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from the_loop import __version__, events
from the_loop_github.cycle import webhook_repository, webhook_subject
from the_loop_github.normalize import Drop, normalize

if TYPE_CHECKING:
    from the_loop.models import InboundEvent
    from the_loop.refs import WorkItemRef
    from the_loop.toolkit import Inbox
    from the_loop_github.cycle import Comment, Cycle, Scope
    from the_loop_github.ledger import Ledger, Ledgers
    from the_loop_github.ticketing import GitHubTicketProvider

__all__ = ["CommentDelivery", "comment_event"]

DELIVERED = ("delivered", "spawned", "respawned")  # inbox outcomes that mean the session got the comment


class CommentDelivery:
    """One poll source's comment deliveries; ``sent`` remembers this process's, so a stop can give them back."""

    def __init__(self, inbox: Inbox, ledgers: Ledgers, provider: GitHubTicketProvider, max_retries: int) -> None:
        self.inbox = inbox
        self.ledgers = ledgers
        self.provider = provider  # posts the give-up notice
        self.max_retries = max_retries
        self.sent: dict[str, tuple[WorkItemRef, WorkItemRef, str]] = {}  # dedupe key → (owner, ref, comment id)

    def forward(
        self,
        scope: Scope,
        item: dict[str, Any],
        refs: list[WorkItemRef],
        comment: Comment,
        work: Ledger,
        cycle: Cycle,
    ) -> None:
        """Put ``comment``'s event in the inbox and count the attempt; one the inbox already settled is just seen."""
        event = comment_event(scope, item, comment)
        if event is None:
            work.see(comment.id)
            return
        accepted = self.inbox.put(event.dedupe_key, event.inbox_entry())
        if not accepted and self.inbox.delivery_status(event.dedupe_key) != "inflight":
            work.see(comment.id)  # the other ingress (or a run before a crash) already had it
            return
        attempt = work.attempts.get(comment.id, 0) + 1
        work.attempts[comment.id] = attempt
        self.sent[event.dedupe_key] = (work.owner, work.ref, comment.id)
        cycle.commentsForwarded += 1
        events.emit(
            "poll.comment_forwarded",
            work_item=str(refs[-1]),
            comment_id=comment.id,
            actor=comment.author,
            attempt=attempt,
        )

    def release_attempts(self) -> int:
        """At a stop (B R9, issue-159): an attempt this process counted for an event the inbox still holds
        undelivered is given back, so a shutdown never spends a comment's budget. The entry itself stays in the
        inbox and is routed after the restart, which counts it again as attempt 1 (nothing is sent twice: the
        inbox refuses a key it holds)."""
        released = 0
        for key, (owner, ref, comment_id) in self.sent.items():
            if self.inbox.delivery_status(key) != "inflight":
                continue
            ledger = self.ledgers.read(owner, ref)
            attempts = dict((ledger or {}).get("commentAttempts") or {})
            if ledger is None or not isinstance(attempts.get(comment_id), int):
                continue
            attempts[comment_id] -= 1
            if attempts[comment_id] <= 0:
                del attempts[comment_id]
            self.ledgers.write(owner, ref, {**ledger, "commentAttempts": attempts})
            released += 1
        self.sent.clear()
        events.emit("poll.attempts_released", released=released)
        return released

    def retry(
        self,
        scope: Scope,
        item: dict[str, Any],
        refs: list[WorkItemRef],
        comment: Comment,
        work: Ledger,
        cycle: Cycle,
    ) -> None:
        """A comment with an attempt on record: the inbox's answer decides (B R26)."""
        event = comment_event(scope, item, comment)
        rounds = work.attempts[comment.id]
        status = self.inbox.delivery_status(event.dedupe_key, rounds) if event else "done"
        if status == "inflight":
            return
        if status in ("done", "unknown"):
            outcome = self.inbox.settled_outcome(event.dedupe_key) if event else ""
            if outcome and outcome not in DELIVERED:  # refused on purpose (paused, awaiting start, …): seed 004
                events.emit("poll.comment_settled", work_item=str(refs[-1]), comment_id=comment.id, outcome=outcome)
            work.see(comment.id)
            return
        if rounds < self.max_retries:
            self.forward(scope, item, refs, comment, work, cycle)
            return
        self._give_up(refs[-1], comment, work, cycle)

    def _give_up(self, ref: WorkItemRef, comment: Comment, work: Ledger, cycle: Cycle) -> None:
        """Budget spent: the ledger first, then one notice on the polled item naming the comment — never quoting
        it (issue-240); a failed notice undoes nothing."""
        attempts = work.attempts.get(comment.id, 0)
        work.see(comment.id)
        gave_up = work.data.get("gaveUp") or {}
        ids = [cid for cid in gave_up.get("comments") or [] if cid != comment.id] + [comment.id]
        work.data["gaveUp"] = {"comments": ids, "version": __version__}
        cycle.failures += 1
        events.emit(
            "poll.comment_failed",
            level="error",
            work_item=str(ref),
            comment_id=comment.id,
            actor=comment.author,
            attempts=attempts,
            will_retry=False,
        )
        self.ledgers.write(work.owner, work.ref, work.dump())  # before the notice: a crash never posts twice
        url = str(comment.raw.get("html_url") or "")
        text = (
            f"the-loop could not deliver comment `{comment.id}`"
            + (f" ({url})" if url else "")
            + f" to the agent's session after {attempts} attempt(s) and has given up on it. "
            "Post it again to retry."
        )
        try:
            self.provider.post_comment(ref, self.provider.mark(text))
        except Exception as exc:
            events.emit(
                "poll.giveup_report_failed",
                level="warning",
                work_item=str(ref),
                comment_id=comment.id,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
            return
        events.emit("poll.giveup_reported", work_item=str(ref), comment_id=comment.id, attempts=attempts)


def comment_event(scope: Scope, item: dict[str, Any], comment: Comment) -> InboundEvent | None:
    """The event GitHub would have pushed for ``comment`` (same normalizer, same dedupe key)."""
    subject_key = "pull_request" if comment.event != "issue_comment" else "issue"
    payload: dict[str, Any] = {
        "action": "submitted" if comment.event == "pull_request_review" else "created",
        "repository": webhook_repository(scope, item),
        "sender": comment.raw.get("user") or {},
        subject_key: webhook_subject(item),
        ("review" if comment.event == "pull_request_review" else "comment"): comment.raw,
    }
    event = normalize(comment.event, f"poll-comment-{comment.id}", payload, transport="poll")
    return None if isinstance(event, Drop) else event
