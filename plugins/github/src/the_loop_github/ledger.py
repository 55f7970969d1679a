"""The poll ledger: what the GitHub poll source remembers of each item's thread across processes — which comments
were seen (``seenComments``), which are being delivered and how often (``commentAttempts``), which it gave up on
and the spawn budget. An item keeps it in its portable record's ``poll`` section; a pull request delivering a
tracked item keeps it in that owner's ``pullRequests`` entry (B R40, seed 004).
"""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any

from the_loop.refs import RefError, parse_ref

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef
    from the_loop.toolkit import SessionRegistry, WorkItemStore
    from the_loop_github.cycle import Comment

__all__ = ["SEEN_CAP", "Ledger", "Ledgers", "evicted_before", "snapshot"]

SEEN_CAP = 2000


class Ledger:
    """One poll ledger being worked on: ``seenComments`` (newest last), ``commentAttempts``, the rest as found."""

    def __init__(
        self, data: dict[str, Any], seen: list[str], attempts: dict[str, int], owner: WorkItemRef, ref: WorkItemRef
    ) -> None:
        self.data, self.seen, self.attempts, self.owner, self.ref = data, seen, attempts, owner, ref

    @property
    def is_owner(self) -> bool:
        """The item keeps its own ``poll`` section (else it is a pull request in its owner's ``pullRequests``)."""
        return self.owner == self.ref

    @classmethod
    def load(cls, ledger: dict[str, Any] | None, owner: WorkItemRef, ref: WorkItemRef) -> Ledger:
        data = dict(ledger or {})
        seen = [str(cid) for cid in data.get("seenComments") or [] if isinstance(cid, str)]
        raw = data.get("commentAttempts") or {}
        attempts = {str(k): int(v) for k, v in raw.items() if isinstance(v, int)} if isinstance(raw, dict) else {}
        if owner == ref:
            data.setdefault("spawn", {})
        for legacy in ("lastPolledAt", "closureCheckedAt"):  # clocks live in local/poll-clocks.json (issue-382)
            data.pop(legacy, None)
        return cls(data, seen, attempts, owner, ref)

    def see(self, comment_id: str) -> None:
        self.attempts.pop(comment_id, None)
        if comment_id not in self.seen:
            self.seen.append(comment_id)

    def prune(self, live: set[str]) -> None:
        """Only after a complete read: forget what no longer exists upstream."""
        self.seen = [cid for cid in self.seen if cid in live]
        self.attempts = {cid: n for cid, n in self.attempts.items() if cid in live}
        gave_up = self.data.get("gaveUp") or {}
        if gave_up.get("comments"):
            kept = [cid for cid in gave_up["comments"] if cid in live]
            self.data["gaveUp"] = {**gave_up, "comments": kept} if kept else {}

    def dump(self) -> dict[str, Any]:
        return {
            **self.data,
            "seenComments": self.seen[-SEEN_CAP:],
            "commentAttempts": dict(self.attempts),
        }


def snapshot(ledger: dict[str, Any] | None) -> dict[str, Any] | None:
    """A deep copy of a ledger as read, to tell at the end of the item whether anything changed it."""
    return copy.deepcopy(ledger)


def evicted_before(seen: list[str], comments: list[Comment]) -> str:
    """When ``seenComments`` is full, the creation time of the oldest comment it still holds: a comment older than
    that was seen and evicted by the cap, never new ("" when the ledger is not full, or nothing of it was read)."""
    if len(seen) < SEEN_CAP:
        return ""
    kept = set(seen[-SEEN_CAP:])
    return min((c.created_at for c in comments if c.id in kept and c.created_at), default="")


class Ledgers:
    """The ledgers in the portable records, and which record keeps each one."""

    def __init__(self, store: WorkItemStore, registry: SessionRegistry) -> None:
        self.store = store
        self.registry = registry
        self.records_cache: list[dict[str, Any]] | None = None  # every portable record, read once per cycle

    def new_cycle(self) -> None:
        """Records change between cycles: the next :meth:`records` reads them again."""
        self.records_cache = None

    def owner_of(self, pull: WorkItemRef, linked: list[WorkItemRef]) -> WorkItemRef:
        """Whose record keeps a pull request's ledger (B R40, seed 004): this machine's session binding, then an
        existing ``pullRequests`` entry in portable/, then a linked issue (closing keywords, never the branch alone)
        this machine already tracks, then the pull request itself — so one work item keeps one record (issue-368)."""
        key = str(pull)
        for record in self.registry.records():
            if key in record.sessions and record.work_item != key:
                with contextlib.suppress(RefError):
                    return parse_ref(record.work_item)
        for record in self.records():
            if key in (record.get("pullRequests") or {}) and record.get("ref") != key:
                with contextlib.suppress(RefError):
                    return parse_ref(record["ref"])
        for ref in linked:
            if self.registry.load(str(ref)) is not None:
                return ref
        return pull

    def records(self) -> list[dict[str, Any]]:
        """Every portable record, read once per cycle (closure and pull-request owners both scan them)."""
        if self.records_cache is None:
            self.records_cache = self.store.list()
        return self.records_cache

    def read(self, owner: WorkItemRef, ref: WorkItemRef) -> dict[str, Any] | None:
        """The ledger of ``ref`` as kept in ``owner``'s record; ``None`` before first sight."""
        record = self.store.read(owner) or {}
        ledger = record.get("poll") if owner == ref else (record.get("pullRequests") or {}).get(str(ref))
        return dict(ledger) if isinstance(ledger, dict) else None

    def write(self, owner: WorkItemRef, ref: WorkItemRef, ledger: dict[str, Any]) -> None:
        """Store ``ledger`` where :meth:`read` finds it (a pull request's: only its own ``pullRequests`` entry)."""
        if owner == ref:
            self.store.update_section(ref, "poll", ledger)
            return

        def change(current: Any) -> dict[str, Any]:
            pulls = dict(current) if isinstance(current, dict) else {}
            pulls[str(ref)] = ledger
            return pulls

        self.store.update_section(owner, "pullRequests", change)
