"""Closure detection for the GitHub poll source (B §2.8): tracked items no longer in a whole listing are asked
whether they ended, and ledger-only records lazily; a closed or merged item becomes the webhook's close event through
the inbox, and one answered 404/410 twice in a row ends as ``deleted`` (§4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.refs import RefError, WorkItemRef, parse_ref
from the_loop.toolkit import LEDGER_CHECKS_PER_CYCLE, ledger_only_due
from the_loop_github.client import ApiError, RateLimited
from the_loop_github.cycle import Scope, now_stamp, webhook_repository, webhook_subject
from the_loop_github.normalize import CLOSE_STATES, Drop, close_key, normalize
from the_loop_github.refs import DEFAULT_HOST

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.toolkit import Inbox, PollClocks, SessionRegistry, WorkItemStore
    from the_loop_github.client import Client
    from the_loop_github.cycle import Cycle
    from the_loop_github.ledger import Ledgers

__all__ = ["ClosureDetector"]

SECTIONS_TRACKED = ("control", "graph", "collaborators", "collaborationChannels")  # a record with one is tracked


class ClosureDetector:
    """Asks GitHub about the items a cycle did not list, and closes those that ended through the one close path.
    ``forget`` drops what the poll source remembers of an item's reads once it is closed."""

    def __init__(
        self,
        config: LoadedConfig,
        *,
        client: Client,
        inbox: Inbox,
        store: WorkItemStore,
        registry: SessionRegistry,
        clocks: PollClocks,
        ledgers: Ledgers,
        interval: int,
        forget: Callable[[WorkItemRef], None],
    ) -> None:
        self.config = config
        self.client = client
        self.inbox = inbox
        self.store = store
        self.registry = registry
        self.clocks = clocks
        self.ledgers = ledgers
        self.interval = interval  # polling.intervalSeconds: how often a ledger-only record is due a question
        self.forget = forget

    def reconcile(self, complete: list[Scope], open_refs: set[str], cycle: Cycle) -> None:
        """Closure detection for the scopes listed completely this cycle (B §2.8): tracked items absent from
        the listing are asked every cycle; ledger-only records lazily, at most twenty per cycle. A pull request
        whose ledger sits in its owner's ``pullRequests`` is asked like a tracked item while a live session is bound
        to it, else lazily like a ledger-only record; closed, its entry is dropped (seed 004)."""
        if not complete:
            return
        live_records = {record.work_item: record for record in self.registry.records()}
        tracked: set[str] = set(live_records)
        bound = {
            name
            for record in live_records.values()
            for name, endpoint in record.sessions.items()
            if name != record.work_item and endpoint.live
        }
        listed = {ref.lower() for ref in open_refs}  # owner/repo compare case-insensitively, as GitHub's do
        ledger_only: list[str] = []
        owners: dict[str, str] = {}  # pull request → the record whose pullRequests keeps its ledger
        for record in self.ledgers.records():
            ref = record["ref"]
            if any(record.get(section) for section in SECTIONS_TRACKED):
                tracked.add(ref)
            elif record.get("poll") is not None and ref not in live_records and "ended" not in record:
                ledger_only.append(ref)
            for pull in record.get("pullRequests") or {}:
                if isinstance(pull, str) and pull != ref:
                    owners[pull] = ref
        owners = {pull: owner for pull, owner in owners.items() if pull not in tracked and pull not in ledger_only}
        for pull in owners:  # (one that is a work item in its own right is asked as one, above)
            if pull in bound:
                tracked.add(pull)
            else:
                ledger_only.append(pull)

        def candidate(text: str) -> WorkItemRef | None:
            try:
                ref = parse_ref(text)
            except RefError:
                return None
            if text.lower() in listed or not any(scope.owns(ref) for scope in complete) or self._closing(ref):
                return None
            return ref

        asked: list[WorkItemRef] = []
        for text in sorted(tracked):
            ref = candidate(text)
            if ref is None:
                continue
            record = live_records.get(text)
            live = record is not None and record.own is not None and record.own.live
            if not live and "ended" in (self.store.read(ref) or {}):
                continue  # ended, nothing left running: asking again changes nothing
            asked.append(ref)
        clocks = self.clocks.read()
        lazy: list[WorkItemRef] = []
        for text in ledger_only_due(ledger_only, clocks, self.interval):  # the cap bounds the inbox look-ups too
            if len(lazy) >= LEDGER_CHECKS_PER_CYCLE:
                break
            if (ref := candidate(text)) is not None:
                lazy.append(ref)
        checked: dict[str, dict[str, str] | None] = {}
        try:
            for ref in asked + lazy:
                try:
                    closed = self._closure(ref, cycle, owners.get(str(ref)))
                except RateLimited:
                    break  # nothing more to this host this cycle; the questions recur next cycle
                if closed:
                    checked[str(ref)] = None
                elif ref in lazy:
                    checked[str(ref)] = {"closureCheckedAt": now_stamp()}
        finally:
            self.clocks.update(checked)

    def _closing(self, ref: WorkItemRef) -> bool:
        """A close of ``ref`` is already in the inbox, waiting for the router (issue-405): asking adds nothing."""
        return any(self.inbox.delivery_status(close_key(ref, state)) == "inflight" for state in CLOSE_STATES)

    def _closure(self, ref: WorkItemRef, cycle: Cycle, owner: str | None = None) -> bool:
        """Ask GitHub whether ``ref`` ended; close it through the one close path when it did. When unsure, keep
        the session. A pull request keeping its ledger in ``owner``'s record ends as the webhook's close would end
        it (its endpoint only, through the inbox), and its ``pullRequests`` entry is dropped."""
        host = ref.host or DEFAULT_HOST
        try:
            data, _, _ = self.client.get(host, f"/repos/{ref.owner}/{ref.repo}/issues/{ref.number}")
        except RateLimited:
            raise
        except ApiError as exc:
            if exc.status in (404, 410):  # §4: a second answer in a row (this run or an earlier one) means deleted
                if self.clocks.read().get(str(ref), {}).get("missingAt"):
                    return self._deleted(ref, cycle, owner)
                self.clocks.update({str(ref): {"missingAt": events.timestamp()}})
            events.emit("poll.item_error", level="warning", work_item=str(ref), error=str(exc)[:300], will_retry=True)
            return False
        if self.clocks.read().get(str(ref), {}).get("missingAt"):
            self.clocks.update({str(ref): {"missingAt": ""}})  # it answers again: the count starts over
        if not isinstance(data, dict) or data.get("state") != "closed":
            return False
        pull = data.get("pull_request") if isinstance(data.get("pull_request"), dict) else None
        merged = bool(pull and pull.get("merged_at"))
        state = "merged" if merged else "closed"
        kind = "pull-request" if pull is not None else "issue"
        events.emit(
            "poll.closure_detected", work_item=str(ref), state=state, kind=kind, reason=data.get("state_reason")
        )
        self.forget(ref)
        cycle.closures += 1
        # The webhook's close event, under its key (decision 6): whichever ingress comes second is refused by the
        # inbox, and the router runs the one close path once (a pull request in its owner's record: that endpoint).
        subject = {**webhook_subject(data), "merged": merged}
        payload = {
            "action": "closed",
            "repository": webhook_repository(Scope(host, ref.owner, ref.repo), data),
            "sender": data.get("closed_by") or {},
            ("pull_request" if pull is not None else "issue"): subject,
        }
        event = normalize(
            "pull_request" if pull is not None else "issues", f"poll-close-{ref}-{state}", payload, transport="poll"
        )
        if isinstance(event, Drop):
            return False
        if owner is not None:
            event = event.model_copy(update={"work_items": (owner, str(ref))})
        self.inbox.put(event.dedupe_key, event.inbox_entry())
        return True

    def _deleted(self, ref: WorkItemRef, cycle: Cycle, owner: str | None) -> bool:
        """An item GitHub answered 404/410 for twice in a row (deleted, transferred, access lost) ends as
        ``deleted`` through the one close path. Nobody closed it, so nothing is cleaned up (§4)."""
        from the_loop.toolkit import closing

        self.clocks.update({str(ref): {"missingAt": ""}})
        self.forget(ref)
        events.emit("poll.closure_detected", work_item=str(ref), state="deleted", kind="", reason="not-found")
        cycle.closures += 1
        if owner is not None:
            closing.pull_request_ended(
                self.config, owner, ref, reason="deleted", delivery_id=f"poll-close-{ref}-deleted"
            )
            return True
        closing.work_item_ended(
            self.config,
            ref,
            reason="deleted",
            actor="",
            authorized=False,
            source="poll",
            delivery_id=f"poll-close-{ref}-deleted",
        )
        return True
