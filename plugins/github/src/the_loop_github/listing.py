"""The GitHub poll source's listing of one repository: its open items carrying every arming label (``/issues``, or
``/pulls`` judged here when issues are not monitored or disabled), capped, filtered once per change of what they
lack, and a repository that fails for good quarantined for :data:`REPROBE_EVERY_CYCLES` cycles (B R12, R13, R42).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop_github.client import PAGE, ApiError, RateLimited
from the_loop_github.refs import SCHEME

if TYPE_CHECKING:
    from the_loop_github.client import Client
    from the_loop_github.cycle import Cycle, Scope

__all__ = ["LIST_LIMIT", "PULLS_LIMIT", "REPROBE_EVERY_CYCLES", "ScopeListing", "ScopeSkipped"]

LIST_LIMIT = 200  # per repository listing (B R12)
PULLS_LIMIT = 1000  # the /pulls fallback lists every open pull request (no label filter there), labelled or not
REPROBE_EVERY_CYCLES = 60


class ScopeSkipped(Exception):
    """A quarantined repository is not asked this cycle (``scopesSkipped``)."""


class ScopeListing:
    """Lists the configured repositories for one poll source; remembers, per process, which are quarantined, which
    were warned about a cap, and what each filtered-out item lacked when last reported."""

    def __init__(self, client: Client, labels: list[str], monitor_issues: bool, monitor_pulls: bool) -> None:
        self.client = client
        self.labels = labels
        self.monitor_issues = monitor_issues
        self.monitor_pulls = monitor_pulls
        self.capped: set[str] = set()  # scopes warned about LIST_LIMIT (once per process)
        self.filtered: dict[str, tuple[str, ...]] = {}  # ref → the required labels it missed, as last reported
        self.quarantine: dict[str, tuple[int, bool]] = {}  # scope → (cycle it failed for good, issues only)

    def open_items(self, scope: Scope, cycle: Cycle, cycle_number: int) -> tuple[list[dict[str, Any]], bool]:
        """The open items carrying every arming label, newest updated first (at most :data:`LIST_LIMIT`), and
        whether the listing was whole (only a whole one may close anything).

        A permanent failure (401, 403 without a rate limit, 404, 410) quarantines the repository for
        :data:`REPROBE_EVERY_CYCLES` cycles instead of being asked every cycle; Issues disabled (410) quarantines
        only the issue listing, and the pull requests are still listed (B R42)."""
        if not self.labels:
            return [], True
        params = {"state": "open", "sort": "updated", "direction": "desc", "per_page": PAGE}
        held = self.quarantine.get(scope.name)
        if held is not None and cycle_number - held[0] < REPROBE_EVERY_CYCLES:
            cycle.scopesSkipped.append(scope.name)
            if held[1] and self.monitor_pulls:
                return self._list_pulls(scope, params)[0], False
            raise ScopeSkipped(scope.name)
        if not self.monitor_issues:
            return self._list_pulls(scope, params)
        try:
            rows, _ = self.client.get_all(
                scope.host, f"{scope.api}/issues", {**params, "labels": ",".join(self.labels)}, LIST_LIMIT
            )
        except RateLimited:
            raise
        except ApiError as exc:
            if not exc.permanent:
                raise
            issues_only = exc.status == 410 or "issues are disabled" in str(exc).lower()
            self.quarantine[scope.name] = (cycle_number, issues_only)
            if held is None:  # a re-probe that still fails renews the quarantine silently
                events.emit(
                    "poll.scope_degraded",
                    level="warning",
                    provider=SCHEME,
                    scope=scope.name,
                    error=str(exc)[:300],
                    retry_after_cycles=REPROBE_EVERY_CYCLES,
                )
            if not (issues_only and self.monitor_pulls):
                raise
            cycle.scopesFailed.append({"scope": scope.name, "error": str(exc)[:300], "permanent": True})
            return self._list_pulls(scope, params)[0], False
        if held is not None:
            del self.quarantine[scope.name]
            events.emit("poll.scope_recovered", provider=SCHEME, scope=scope.name)
        if len(rows) >= LIST_LIMIT:  # B §4: the rest is never listed
            self._warn_capped(scope, LIST_LIMIT, "open labelled items")
        kept = [row for row in rows if isinstance(row, dict) and self._wanted(scope, row)]
        return (kept if self.monitor_pulls else [row for row in kept if "pull_request" not in row]), True

    def _warn_capped(self, scope: Scope, limit: int, what: str) -> None:
        if scope.name not in self.capped:  # once per process, not every cycle
            self.capped.add(scope.name)
            print(
                f"warning: {scope.name} has at least {limit} {what}; only the {limit} most recently updated are "
                "polled (older ones: no comments read, tracked ones asked for closure)",
                file=sys.stderr,
                flush=True,
            )

    def _list_pulls(self, scope: Scope, params: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
        """The labelled open pull requests, judged here (``/pulls`` has no label filter), and whether the listing
        was whole: a capped one never closes anything, since what it left out may well be open."""
        rows, _ = self.client.get_all(scope.host, f"{scope.api}/pulls", params, PULLS_LIMIT)
        kept = []
        for row in rows:
            if isinstance(row, dict) and self._wanted(scope, row):
                kept.append({**row, "pull_request": {"html_url": row.get("html_url"), "merged_at": None}})
        if len(rows) >= PULLS_LIMIT:
            self._warn_capped(scope, PULLS_LIMIT, "open pull requests")
        return kept, len(rows) < PULLS_LIMIT

    def _wanted(self, scope: Scope, row: Mapping[str, Any]) -> bool:
        """Every required label, judged on the labels returned (B R13); a dropped item is reported once per change
        of the labels it lacks (``poll.item_filtered``), never every cycle."""
        if not isinstance(row.get("number"), int):
            return False
        names = {label.get("name") for label in row.get("labels") or [] if isinstance(label, dict)}
        missing = tuple(label for label in self.labels if label not in names)
        ref = f"{SCHEME}:{scope.name}#{row['number']}"
        if not missing:
            self.filtered.pop(ref, None)
            return True
        if self.filtered.get(ref) != missing:
            self.filtered[ref] = missing
            events.emit(
                "poll.item_filtered",
                work_item=ref,
                item_number=row["number"],
                required_labels=list(self.labels),
                missing_labels=list(missing),
                reason="missing-required-labels",
            )
        return False
