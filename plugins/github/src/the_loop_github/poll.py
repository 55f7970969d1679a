"""The GitHub poll source: every cycle, what is new on the labelled open items of each ``repositories`` entry becomes
the same normalized event the webhook receiver would produce, written to the durable inbox (B §2.2 to §2.10).

Cost (B §5, decision 7): one conditional listing per repository (``GET /issues?labels=…``, ETag / ``If-None-Match``,
so an unchanged one is a 304 GitHub does not count); comments are read only for items whose ``updated_at`` moved
(or that still have an attempt or a spawn in flight), with ``since=`` between complete reads, which happen on first
sight in a process and every :data:`COMPLETE_READ_EVERY` cycles — the only reads allowed to prune the ledger. A rate
limit (``X-RateLimit-Remaining: 0``, ``Retry-After``, a secondary-limit message) stops every call to that host until
it lifts (at least a minute); 401 and 404 are permanent scope failures; 410 / "issues are disabled" quarantines the
issue listing for :data:`~the_loop_github.listing.REPROBE_EVERY_CYCLES` cycles while pull requests are still listed.

The ledger is the portable record's ``poll`` section (a pull request delivering a tracked item: the owner's
``pullRequests`` entry), its clocks ``local/poll-clocks.json``. Every event goes through the inbox under the
webhook's dedupe key (decision 6), so an object both ingresses see is delivered once; an event counts as handled
only when the inbox settled it, and as failed only when the inbox abandoned it (``maxRetries`` such rounds).

This module is the loop over repositories and items; its collaborators are the REST client (``client``), the
listing (``listing``), the ledger (``ledger``), comment delivery (``delivery``) and closure detection (``closure``),
over the scope and cycle bookkeeping of ``cycle``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from the_loop import __version__, events
from the_loop.interfaces import PollSource, ServiceContext
from the_loop.refs import WorkItemRef
from the_loop.toolkit import Inbox, PollClocks, control
from the_loop_github.client import COMMENT_PAGES, PAGE, ApiError, Client, RateLimited
from the_loop_github.closure import ClosureDetector
from the_loop_github.cycle import (
    Comment,
    Cursor,
    Cycle,
    Scope,
    configured_scopes,
    now_stamp,
    parse_comment,
    parse_review,
    webhook_repository,
    webhook_subject,
)
from the_loop_github.delivery import CommentDelivery
from the_loop_github.ledger import Ledger, Ledgers, evicted_before, snapshot
from the_loop_github.linkage import linked_refs
from the_loop_github.listing import ScopeListing, ScopeSkipped
from the_loop_github.normalize import Drop, normalize
from the_loop_github.refs import SCHEME, ref_for
from the_loop_github.ticketing import MARKER, GitHubTicketProvider, TokenMissing

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = ["ApiError", "GitHubPollSource", "RateLimited"]

COMPLETE_READ_EVERY = 60  # K: a complete (pruning) comment read per item at least this often


# ------------------------------------------------------------------------------------------------ source


class GitHubPollSource(PollSource):
    """One ``polling.sources[]`` entry with ``provider: github`` (the first one; its labels and monitor flags)."""

    name = SCHEME

    def __init__(self, config: LoadedConfig) -> None:
        self.config = config
        self.provider = GitHubTicketProvider(config)
        self.client = Client(self.provider)
        self.inbox = Inbox.for_config(config)
        self.store = config.store
        self.registry = config.registry
        self.ledgers = Ledgers(self.store, self.registry)
        self.clocks = PollClocks(config.state)
        self.cycle_number = 0
        self.cursors: dict[str, Cursor] = {}
        self.pending: dict[str, dict[str, Comment]] = {}  # per item: comments with an attempt, as last read
        self.rearmed: set[str] = set()
        polling = config.core.polling
        source = next((s for s in polling.sources if s.provider == SCHEME), None)
        labels = list(source.labels) if source and source.labels else list(config.core.routing.auto_execute_labels)
        self.labels = labels
        self.listing = ScopeListing(
            self.client,
            labels,
            monitor_issues=source.monitor.issues if source else True,
            monitor_pulls=source.monitor.pull_requests if source else True,
        )
        self.max_retries = max(1, polling.max_retries)
        self.delivery = CommentDelivery(self.inbox, self.ledgers, self.provider, self.max_retries)
        self.scopes = configured_scopes(config)
        self.closures = ClosureDetector(
            config,
            client=self.client,
            inbox=self.inbox,
            store=self.store,
            registry=self.registry,
            clocks=self.clocks,
            ledgers=self.ledgers,
            interval=polling.interval_seconds,
            forget=self._forget,
        )

    def _forget(self, ref: WorkItemRef) -> None:
        """A closed item's read state: gone, so a reopened one is read whole again."""
        self.cursors.pop(str(ref), None)
        self.pending.pop(str(ref), None)

    def release_attempts(self) -> int:
        """At a stop (B R9): attempts counted for events still undelivered are given back; how many were."""
        return self.delivery.release_attempts()

    def check_dependencies(self) -> list[str]:
        """What stops this source before the poller locks (B R4): each problem with its remedy."""
        problems = []
        try:
            self.provider.token()
        except TokenMissing as exc:
            problems.append(str(exc))
        if not self.scopes:
            problems.append("repositories is empty: list the [HOST/]OWNER/REPO entries to poll")
        return problems

    # ------------------------------------------------------------------------------------------ cycle

    def poll_once(self, context: ServiceContext) -> Mapping[str, Any]:
        cycle = Cycle()
        self.cycle_number += 1
        self.ledgers.new_cycle()
        if not self.scopes:
            events.emit("poll.provider_error", level="error", provider=SCHEME, error="no repositories", will_retry=True)
            cycle.scopesFailed.append({"scope": SCHEME, "error": "no repositories configured", "permanent": True})
            return cycle.as_dict()
        try:
            self.provider.token()
        except TokenMissing as exc:
            cycle.scopesFailed.append({"scope": SCHEME, "error": str(exc), "permanent": True})
            return cycle.as_dict()
        open_refs: set[str] = set()
        complete: list[Scope] = []
        try:
            for scope in self.scopes:
                if context.should_stop():
                    cycle.interrupted = True
                    break
                if self._poll_scope(scope, context, cycle, open_refs):
                    complete.append(scope)
            if not cycle.interrupted and not context.should_stop():
                self.closures.reconcile(complete, open_refs, cycle)
        finally:
            self.client.reset()
        return cycle.as_dict()

    def _poll_scope(self, scope: Scope, context: ServiceContext, cycle: Cycle, open_refs: set[str]) -> bool:
        """List and process one repository; True when its listing was complete and every item was reached."""
        try:
            items, whole = self.listing.open_items(scope, cycle, self.cycle_number)
        except ScopeSkipped:
            return False
        except ApiError as exc:
            cycle.scopesFailed.append({"scope": scope.name, "error": str(exc), "permanent": exc.permanent})
            return False
        cycle.scopesPolled += 1
        cycle.itemsSeen += len(items)
        listed = []
        for item in items:  # every listed ref joins the open set before any is processed (B R15)
            refs = self._refs(scope, item)
            if refs:
                listed.append((item, refs))
                open_refs.update(str(ref) for ref in refs)
        clocks: dict[str, dict[str, str]] = {}
        missing = self.clocks.read()
        try:
            for item, refs in listed:
                if context.should_stop():
                    cycle.interrupted = True
                    return False
                try:
                    self._item(scope, item, refs, cycle)
                except RateLimited as exc:
                    cycle.scopesFailed.append({"scope": scope.name, "error": str(exc), "permanent": False})
                    return False
                except Exception as exc:  # one item's failure is that item's, never the cycle's
                    cycle.errors += 1
                    events.emit(
                        "poll.item_error",
                        level="warning",
                        work_item=str(refs[-1]),
                        error=f"{type(exc).__name__}: {exc}"[:300],
                        will_retry=True,
                    )
                clocks[str(refs[-1])] = {"lastPolledAt": now_stamp()}
                if missing.get(str(refs[-1]), {}).get("missingAt"):  # listed again: one later 404 is a blip again
                    clocks[str(refs[-1])]["missingAt"] = ""
        finally:
            self.clocks.update(clocks)
        return whole

    def _refs(self, scope: Scope, item: Mapping[str, Any]) -> list[WorkItemRef]:
        """The item's refs, linked issues first and the item itself last (X3)."""
        payload = {"repository": webhook_repository(scope, item)}
        ref = ref_for(payload, item.get("number"), item)
        if ref is None:
            return []
        if "pull_request" in item:
            linked, unconfirmed = linked_refs(payload, item, ref)  # a branch-only guess is left to the router (X5)
            return [*(r for r in linked if r not in unconfirmed), ref]
        return [ref]

    # ------------------------------------------------------------------------------------------- item

    def _item(self, scope: Scope, item: dict[str, Any], refs: list[WorkItemRef], cycle: Cycle) -> None:
        ref = refs[-1]
        key = str(ref)
        is_pull = "pull_request" in item
        record = self.store.read(ref) or {}
        if "ended" in record:
            from the_loop.toolkit import closing

            # the listing may predate a close the webhook just ended it by: GitHub's answer now decides
            data, _, _ = self.client.get(scope.host, f"{scope.api}/issues/{item['number']}")
            if not isinstance(data, dict) or data.get("state") != "open":
                return
            closing.work_item_reopened(self.config, ref, actor="", source="poll")  # first sight again below
        owner = self.ledgers.owner_of(ref, refs[:-1]) if is_pull else ref
        ledger = self.ledgers.read(owner, ref)
        attempts = dict((ledger or {}).get("commentAttempts") or {})
        spawn = dict((ledger or {}).get("spawn") or {})
        cursor = self.cursors.get(key)
        updated = str(item.get("updated_at") or "")
        moved = cursor is None or cursor.updated_at != updated
        if ledger is not None and not moved and not attempts and not spawn.get("deliveryId"):
            return  # nothing changed upstream and nothing of ours is in flight: no read at all
        # Comments with an attempt in flight are judged from what this process last read of them: the inbox, not
        # GitHub, knows what became of them, so an unchanged item costs no request (after a restart: one read).
        held = self.pending.get(key, {})
        remembered = all(cid in held for cid in attempts)
        due = cursor is None or self.cycle_number - cursor.complete_cycle >= COMPLETE_READ_EVERY
        complete = ledger is None or due or not remembered
        if moved or complete:
            since = "" if complete or cursor is None else cursor.since
            comments = self._comments(scope, item, is_pull, since)
            newest = max((c.updated_at for c in comments), default=cursor.since if cursor else "")
            self.cursors[key] = Cursor(
                updated, newest, self.cycle_number if complete else (cursor.complete_cycle if cursor else 0)
            )
            read = {c.id for c in comments}
            comments += [held[cid] for cid in attempts if cid not in read and cid in held]
        else:
            comments = [held[cid] for cid in attempts]
        comments.sort(key=lambda c: (c.created_at, c.id))
        before = snapshot(ledger)
        work = Ledger.load(ledger, owner, ref)
        if ledger is None:
            self._first_sight(scope, item, refs, comments, work, cycle)
        else:
            self._known(scope, item, refs, comments, work, cycle)
        if complete:
            work.prune({c.id for c in comments})
        if work.is_owner:
            work.data["title"] = str(item.get("title") or "")[:200]
        after = work.dump()
        if after != before:
            self.ledgers.write(owner, ref, after)
        self.pending[key] = {c.id: c for c in comments if c.id in work.attempts}

    def _comments(self, scope: Scope, item: Mapping[str, Any], is_pull: bool, since: str) -> list[Comment]:
        """Every surface, merged by creation time; any surface failing fails the item (a partial list would
        prune the ledger and forward everything again)."""
        number = item["number"]
        params: dict[str, Any] = {"per_page": PAGE}
        if since:
            params["since"] = since
        limit = PAGE * COMMENT_PAGES
        found: list[Comment] = []
        rows, _ = self.client.get_all(scope.host, f"{scope.api}/issues/{number}/comments", params, limit)
        found += [c for row in rows if (c := parse_comment("issue_comment", row))]
        if is_pull:
            reviews, _ = self.client.get_all(
                scope.host, f"{scope.api}/pulls/{number}/reviews", {"per_page": PAGE}, limit
            )
            found += [c for row in reviews if (c := parse_review(row))]
            inline, _ = self.client.get_all(scope.host, f"{scope.api}/pulls/{number}/comments", params, limit)
            found += [c for row in inline if (c := parse_comment("pull_request_review_comment", row))]
        return sorted(found, key=lambda c: (c.created_at, c.id))

    def _first_sight(
        self,
        scope: Scope,
        item: dict[str, Any],
        refs: list[WorkItemRef],
        comments: list[Comment],
        work: Ledger,
        cycle: Cycle,
    ) -> None:
        """Baseline the thread (a spawned session reads it whole), except control comments posted before first
        sight by an authorized user (issue-119): those are forwarded now, in thread order."""
        ref = refs[-1]
        routing = self.config.core.routing
        pending = []
        if routing.control.enabled and not control.recorded(self.config, ref):
            pending = [c for c in comments if self._pending_control(c, refs)]
        for comment in comments:
            if comment not in pending:
                work.see(comment.id)
        for comment in pending:
            self.delivery.forward(scope, item, refs, comment, work, cycle)
        if not pending and work.is_owner:  # a pull request delivering another item is never spawned from here
            self._presence(scope, item, refs, work, cycle, armed=True)

    def _known(
        self,
        scope: Scope,
        item: dict[str, Any],
        refs: list[WorkItemRef],
        comments: list[Comment],
        work: Ledger,
        cycle: Cycle,
    ) -> None:
        ref = refs[-1]
        gave_up = work.data.get("gaveUp") or {}
        if str(ref) not in self.rearmed:
            self.rearmed.add(str(ref))
            ids = list(gave_up.get("comments") or [])
            if ids and gave_up.get("version") != __version__:  # a new version may fix what failed (issue-146)
                work.seen = [cid for cid in work.seen if cid not in ids]
                work.data["gaveUp"] = {}
                events.emit("poll.rearmed", work_item=str(ref), comments=len(ids), version=__version__)
        floor = evicted_before(work.seen, comments)
        for comment in comments:
            if comment.id in work.seen:
                continue
            if comment.created_at < floor and comment.id not in work.attempts:
                continue  # older than everything the capped ledger keeps: seen once, evicted (issue-246)
            if comment.id in work.attempts:
                self.delivery.retry(scope, item, refs, comment, work, cycle)
                continue
            if MARKER in comment.body:  # the-loop's own words, before anyone's identity is read (issue-64)
                work.see(comment.id)
                continue
            if not self._authorized(comment.author, refs):
                work.see(comment.id)
                continue
            if work.is_owner:
                work.data["spawn"] = {}  # a genuinely new comment re-arms the spawn budget (R22)
            self.delivery.forward(scope, item, refs, comment, work, cycle)
        if work.is_owner:
            self._presence(scope, item, refs, work, cycle, armed=False)

    # ------------------------------------------------------------------------------------------- spawn

    def _presence(
        self, scope: Scope, item: dict[str, Any], refs: list[WorkItemRef], work: Ledger, cycle: Cycle, armed: bool
    ) -> None:
        """The spawn ledger (B R22 to R24): a ``labeled`` event the router turns into a spawn when its policy allows."""
        ref = refs[-1]
        spawn = work.data.get("spawn") or {}
        if self._live(refs):
            work.data["spawn"] = {}  # a live session resets the ledger
            return
        attempts = int(spawn.get("attempts") or 0)
        if spawn.get("gaveUp") or not (armed or attempts > 0):
            return
        author = str((item.get("user") or {}).get("login") or "")
        started = control.recorded(self.config, ref) == "start"
        if not (self._authorized(author, refs, collaborators=False) or started):
            events.emit("poll.unauthorized", level="warning", work_item=str(ref), actor=author or None)
            return
        routing = self.config.core.routing
        if routing.control.enabled and routing.control.require_start_command and not started:
            return  # awaiting a start command: nothing to spend (issue-106)
        delivery = str(spawn.get("deliveryId") or "")
        if delivery:
            status = self.inbox.delivery_status(delivery)
            if status == "inflight":
                return
            if status in ("done", "unknown"):
                work.data["spawn"] = {}
                return
            if attempts >= self.max_retries:
                work.data["spawn"] = {"attempts": attempts, "gaveUp": True, "deliveryId": ""}
                cycle.failures += 1
                events.emit("poll.spawn_failed", level="error", work_item=str(ref), attempts=attempts, will_retry=False)
                return
        delivery = f"poll-presence-{ref}-{uuid.uuid4()}"
        payload = {
            "action": "labeled",
            "repository": webhook_repository(scope, item),
            "sender": item.get("user") or {},
            "label": {"name": self.labels[0] if self.labels else ""},
            ("pull_request" if "pull_request" in item else "issue"): webhook_subject(item),
        }
        event = normalize("pull_request" if "pull_request" in item else "issues", delivery, payload, transport="poll")
        if isinstance(event, Drop):
            return
        event = event.model_copy(update={"work_items": tuple(str(r) for r in refs)})
        self.inbox.put(event.dedupe_key, event.inbox_entry())
        work.data["spawn"] = {"attempts": attempts + 1, "gaveUp": False, "deliveryId": event.dedupe_key}
        cycle.spawns += 1

    # ------------------------------------------------------------------------------------------ judgement

    def _pending_control(self, comment: Comment, refs: list[WorkItemRef]) -> bool:
        if MARKER in comment.body or not self._authorized(comment.author, refs, collaborators=False):
            return False
        parsed = control.parse(comment.body, self.config.core.routing.control.keywords)
        return bool(parsed.command) and not parsed.ambiguous

    def _authorized(self, login: str, refs: list[WorkItemRef], collaborators: bool = True) -> bool:
        """A named ``routing.authorizedUsers`` login, or (for comments) a collaborator granted on the item; an empty
        or deleted author is nobody (B R20)."""
        found = control.standing(self.config, refs, SCHEME, login)
        return found == "allowed" or (collaborators and found == "collaborator")

    def _live(self, refs: list[WorkItemRef]) -> bool:
        """A live session owns one of the refs: its own, or a binding of the pull request on another record."""
        names = {str(ref) for ref in refs}
        for name in names:
            record = self.registry.load(name)
            if record is not None and record.own is not None and record.own.live:
                return True
        for record in self.registry.records():
            own = record.own
            if own is not None and own.live and names.intersection(record.sessions):
                return True
        return False
