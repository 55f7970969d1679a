"""The undelivered queue: ``channels/undelivered.json``, the posts the channels still owe (D §2.4, issue-409).

When a publish asked at least one channel and none accepted, the event is queued here instead of being forgotten.
The daemons drain it once a minute: at most :data:`DRAIN_BUDGET` due entries, oldest first, each re-posted to the
channels it names (never to the ticket: the ticket already holds it). An entry's backoff is one minute doubling to
an hour, or longer when the platform asked for it (``Retry-After``). One work item's entries go head first: while
its oldest entry is not delivered, its later ones wait, so a conversation never reads out of order.

Every read-modify-write holds the flock on ``undelivered.json.lock``; no network call is made under it. A drain
*claims* its entries under the lock (attempts + 1, ``lastAttemptAt``), so two drainers never post one entry twice.
Deleting the file abandons the backlog.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.state import StateError, atomic_write_json, locked, read_json

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.state import StateLayout

CAP = 200
DRAIN_BUDGET = 20
DRAIN_INTERVAL = 60.0
BACKOFF_BASE = 60.0
BACKOFF_CAP = 3600.0


def outbox_path(config: LoadedConfig) -> Path:
    return config.state.undelivered_path


def _lock(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _entry_id(now: float) -> str:
    """Ids sort by queue time (then by chance within one microsecond)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{stamp}-{secrets.token_hex(4)}"


def _load(path: Path) -> dict[str, Any]:
    found = read_json(path) or {}
    pending = found.get("pending")
    return {"version": 1, "pending": pending if isinstance(pending, dict) else {}}


def _instant(value: Any) -> float | None:
    return events.parse_instant(value) if isinstance(value, str) else None


def queue(
    config: LoadedConfig,
    channels: list[str],
    event: Mapping[str, Any],
    error: str,
    *,
    retry_after: float | None = None,
    now: float | None = None,
) -> str:
    """Queue ``event`` for ``channels``; the entry id ("" when it could not be stored). Never raises."""
    now = time.time() if now is None else now
    path = outbox_path(config)
    entry_id = _entry_id(now)
    dropped: list[str] = []
    try:
        with locked(_lock(path)):
            data = _load(path)
            pending = data["pending"]
            entry: dict[str, Any] = {
                "at": events.timestamp(now),
                "attempts": 0,
                "lastAttemptAt": None,
                "lastError": error[:500],
                "channels": list(channels),
                "event": dict(event),
            }
            if retry_after:
                entry["notBefore"] = events.timestamp(now + retry_after)
            pending[entry_id] = entry
            while len(pending) > CAP:
                oldest = min(pending)
                dropped.append(oldest)
                del pending[oldest]
            atomic_write_json(path, data)
            size = len(pending)
    except (StateError, OSError) as exc:
        events.emit("channel.undelivered", level="error", channels=channels, error=f"cannot queue: {exc}")
        return ""
    for gone in dropped:
        events.emit("channel.undelivered_dropped", level="warning", entry=gone, cap=CAP)
    events.emit(
        "channel.undelivered",
        level="warning",
        channels=channels,
        work_item=event.get("workItem") or None,
        event_type=event.get("eventType"),
        error=error[:500],
        pending=size,
    )
    return entry_id


def pending_for(config: LoadedConfig, work_item: str, channel: str) -> bool:
    """Whether ``work_item`` already has an entry waiting for ``channel`` (a new post must queue behind it)."""
    data = _load(outbox_path(config))
    return any(
        isinstance(entry, dict)
        and (entry.get("event") or {}).get("workItem") == work_item
        and channel in (entry.get("channels") or [])
        for entry in data["pending"].values()
    )


def _due(entry: Mapping[str, Any], now: float) -> bool:
    not_before = _instant(entry.get("notBefore"))
    if not_before is not None and now < not_before:
        return False
    attempts = int(entry.get("attempts") or 0)
    last = _instant(entry.get("lastAttemptAt"))
    if attempts == 0 or last is None:
        return True
    return now - last >= min(BACKOFF_BASE * 2 ** (attempts - 1), BACKOFF_CAP)


@dataclass
class DrainReport:
    claimed: int = 0
    delivered: int = 0
    failed: int = 0
    left: int = 0


Post = Callable[[str, Mapping[str, Any]], None]  # (channel name, event) -> None; raises ChannelError on failure


def drain(config: LoadedConfig, post: Post, *, now: float | None = None, budget: int = DRAIN_BUDGET) -> DrainReport:
    """One drain: claim up to ``budget`` due entries, post each outside the lock, then record what happened."""
    now = time.time() if now is None else now
    path = outbox_path(config)
    report = DrainReport()
    claimed: dict[str, dict[str, Any]] = {}
    before: dict[str, tuple[Any, Any]] = {}  # what a claim changed, restored for an entry never tried
    with locked(_lock(path)):
        data = _load(path)
        held: set[str] = set()  # work items whose older entry is not due: their later ones wait (head first)
        unreadable = []
        for entry_id in sorted(data["pending"]):
            entry = data["pending"][entry_id]
            if not isinstance(entry, dict) or not isinstance(entry.get("event"), dict):
                unreadable.append(entry_id)  # nothing could ever post it: removed, never blocking the queue
                continue
            item = str(entry["event"].get("workItem") or "")
            if len(claimed) >= budget or item in held or not _due(entry, now):
                held.add(item)
                continue
            before[entry_id] = (entry.get("attempts"), entry.get("lastAttemptAt"))
            entry["attempts"] = int(entry.get("attempts") or 0) + 1
            entry["lastAttemptAt"] = events.timestamp(now)
            claimed[entry_id] = entry
        for entry_id in unreadable:
            del data["pending"][entry_id]
        if claimed or unreadable:
            atomic_write_json(path, data)
    for entry_id in unreadable:
        events.emit("channel.undelivered_dropped", level="warning", entry=entry_id, reason="unreadable")
    report.claimed = len(claimed)
    results: dict[str, tuple[bool, str, float | None] | None] = {}
    failed_items: set[str] = set()
    for entry_id, entry in claimed.items():  # oldest first
        item = str(entry["event"].get("workItem") or "")
        if item in failed_items:
            results[entry_id] = None  # its head failed this drain: never posted ahead of it
            continue
        error, retry_after = "", None
        delivered = False
        for channel in entry.get("channels") or []:
            try:
                post(str(channel), entry["event"])
                delivered = True
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                retry_after = getattr(exc, "retry_after", None) or retry_after
        if not delivered:
            failed_items.add(item)
        results[entry_id] = (delivered, error, retry_after)
    with locked(_lock(path)):
        data = _load(path)
        for entry_id, result in results.items():
            entry = data["pending"].get(entry_id)
            if entry is None:
                continue  # the file was deleted meanwhile: the backlog was abandoned
            if result is None:
                entry["attempts"], entry["lastAttemptAt"] = before[entry_id]
                continue
            delivered, error, retry_after = result
            if delivered:
                del data["pending"][entry_id]
                report.delivered += 1
                queued = _instant(entry.get("at")) or now
                events.emit(
                    "channel.delivered_late",
                    entry=entry_id,
                    work_item=entry["event"].get("workItem") or None,
                    event_type=entry["event"].get("eventType"),
                    attempts=entry.get("attempts"),
                    waited_seconds=round(now - queued, 3),
                )
            else:
                report.failed += 1
                entry["lastError"] = error[:500]
                if retry_after:  # the platform's wait wins over a shorter backoff
                    entry["notBefore"] = events.timestamp(now + retry_after)
        if results and path.exists():
            atomic_write_json(path, data)
        report.left = len(data["pending"])
    return report


def backlog(state: StateLayout, now: float | None = None) -> dict[str, Any] | None:
    """``{count, oldestAgeSeconds, lastError}`` while the queue under ``state`` holds anything; read-only (for
    ``status``)."""
    now = time.time() if now is None else now
    pending = [e for e in _load(state.undelivered_path)["pending"].values() if isinstance(e, dict)]
    if not pending:
        return None
    oldest = min((_instant(e.get("at")) or now for e in pending), default=now)
    errors = [(e.get("lastAttemptAt") or e.get("at") or "", e.get("lastError") or "") for e in pending]
    last_error = max(errors)[1] if errors else ""
    return {"count": len(pending), "oldestAgeSeconds": round(max(0.0, now - oldest), 1), "lastError": last_error}
