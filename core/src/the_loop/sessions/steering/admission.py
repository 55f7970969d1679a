"""Admission: a box starts no more sessions than ``routing.capacity`` allows, and the rest wait in line.

A first spawn that would exceed ``maxLiveSessions`` (active sessions on this machine; a paused, stopped or ended one
frees its slot) or leave less than ``minFreeMemoryMiB`` of memory available is *queued*, never refused: the
dispatcher answers ``queued`` and the inbox tries the same event again later without counting a failure, while the
item's later events wait behind it in order. The line is ``local/admission.json``: respawns of existing sessions
first (they need memory only, never a new slot), then first spawns in the order they came. Only the head of the
line is admitted when a slot frees, so the order holds however the retries interleave. The ticket is told once.

An entry nobody asked about for :data:`STALE_AFTER` seconds (its event settled some other way: the item was
stopped, reset, cleaned up) is dropped, so a forgotten entry never blocks the line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.sessions.steering import tell
from the_loop.state import Corrupt, atomic_write_json, load_json, locked, quarantine

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

FILE = "admission.json"
STALE_AFTER = 120.0
MEMINFO = "/proc/meminfo"


@dataclass(frozen=True)
class Waiting:
    """A spawn that must wait: its place in line (1 is next), why, and when to ask again."""

    position: int
    reason: str  # max-live-sessions | memory-floor
    retry_in: float


def free_memory_mib() -> int | None:
    """Memory available for new processes (``MemAvailable``), in MiB; None where the kernel does not say."""
    try:
        with open(MEMINFO, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def live_sessions(config: LoadedConfig) -> int:
    """Active sessions on this machine: every endpoint of every record that is ``active`` (a paused one is not)."""
    return sum(
        1
        for record in config.registry.records()
        for endpoint in record.sessions.values()
        if endpoint.status == "active"
    )


def limited(config: LoadedConfig) -> bool:
    capacity = config.core.routing.capacity
    return capacity.max_live_sessions is not None or capacity.min_free_memory_mib is not None


def _blocked_by(config: LoadedConfig, *, respawn: bool) -> tuple[str, dict[str, Any]]:
    """What stops a spawn now ("" when nothing), with the figures for the event."""
    capacity = config.core.routing.capacity
    if not respawn and capacity.max_live_sessions is not None:
        live = live_sessions(config)
        if live >= capacity.max_live_sessions:
            return "max-live-sessions", {"live": live, "limit": capacity.max_live_sessions}
    if capacity.min_free_memory_mib is not None:
        free = free_memory_mib()
        if free is not None and free < capacity.min_free_memory_mib:
            return "memory-floor", {"free_mib": free, "floor_mib": capacity.min_free_memory_mib}
    return "", {}


def _path(config: LoadedConfig) -> Any:
    return config.state.local_dir / FILE


def _read(config: LoadedConfig) -> list[dict[str, Any]]:
    path = _path(config)
    data = load_json(path)
    if data is Corrupt:  # reported and moved aside, never overwritten: the line starts again from the retries
        quarantine(path)
        return []
    queue = data.get("queue") if isinstance(data, dict) else None
    now = time.time()
    return [
        entry
        for entry in queue or []
        if isinstance(entry, dict)
        and isinstance(entry.get("workItem"), str)
        and now - float(entry.get("seenAt") or 0) < STALE_AFTER
    ]


def _ordered(queue: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(queue, key=lambda entry: (not entry.get("respawn"), float(entry.get("queuedAt") or 0)))


def admit(config: LoadedConfig, ref: WorkItemRef, *, respawn: bool = False) -> Waiting | None:
    """None when ``ref`` may spawn now (taken out of the line if it was in it); else its place in line. Called
    under the item's dispatch lock; the line has a lock of its own."""
    if not limited(config):
        return None
    work_item = str(ref)
    now = time.time()
    with locked(config.state.lock_for("admission")):
        queue = _read(config)
        mine = next((entry for entry in queue if entry["workItem"] == work_item), None)
        reason, figures = _blocked_by(config, respawn=respawn)
        ahead = [e for e in _ordered(queue) if e is not mine and _before(e, mine, respawn, now)]
        if not reason and not ahead:
            if mine is not None:
                queue.remove(mine)
                _write(config, queue)
                events.emit(
                    "admission.admitted",
                    work_item=work_item,
                    respawn=respawn or None,
                    waited_seconds=round(now - float(mine.get("queuedAt") or now), 1),
                )
            return None
        first = mine is None
        if mine is None:
            mine = {"workItem": work_item, "queuedAt": now, "respawn": respawn, "reason": reason or "in-line"}
            queue.append(mine)
        mine["seenAt"] = now
        _write(config, queue)
        position = _ordered(queue).index(mine) + 1
    why = reason or "in-line"
    if first:
        events.emit(
            "admission.queued", work_item=work_item, position=position, reason=why, respawn=respawn or None, **figures
        )
        _tell(config, ref, position, why, figures)
    return Waiting(position, why, config.core.routing.capacity.recheck_seconds)


def _before(entry: dict[str, Any], mine: dict[str, Any] | None, respawn: bool, now: float) -> bool:
    """Whether ``entry`` is ahead of the asking spawn in line."""
    key = (not entry.get("respawn"), float(entry.get("queuedAt") or 0))
    if mine is None:
        return key < (not respawn, now)
    return key < (not mine.get("respawn"), float(mine.get("queuedAt") or 0))


def forget(config: LoadedConfig, ref: WorkItemRef) -> None:
    """Take ``ref`` out of the line (it was stopped or cleaned up before its turn)."""
    if not limited(config) or not _path(config).exists():
        return
    with locked(config.state.lock_for("admission")):
        queue = _read(config)
        kept = [entry for entry in queue if entry["workItem"] != str(ref)]
        if len(kept) != len(queue):
            _write(config, kept)
            events.emit("admission.withdrawn", work_item=str(ref))


def queued(config: LoadedConfig) -> dict[str, int]:
    """Work item → its place in line (1 is next), for ``sessions list`` and ``check``."""
    if not _path(config).exists():
        return {}
    return {entry["workItem"]: index for index, entry in enumerate(_ordered(_read(config)), start=1)}


def _write(config: LoadedConfig, queue: list[dict[str, Any]]) -> None:
    atomic_write_json(_path(config), {"version": 1, "queue": _ordered(queue)})


def _tell(config: LoadedConfig, ref: WorkItemRef, position: int, reason: str, figures: dict[str, Any]) -> None:
    """Once per wait: say on the ticket why the work has not started and when it will."""
    if reason == "max-live-sessions":
        why = (
            f"this machine already runs {figures['live']} live sessions, its limit (`routing.capacity.maxLiveSessions`)"
        )
    elif reason == "memory-floor":
        why = (
            f"this machine has {figures['free_mib']} MiB of memory free, under its floor of {figures['floor_mib']} MiB "
            "(`routing.capacity.minFreeMemoryMiB`)"
        )
    else:
        why = "other work items are waiting ahead of it"
    text = (
        f"the-loop queued this work item (position {position}): {why}. Its session starts when a slot frees (a "
        "session ends, is stopped or is paused); comments meanwhile wait and are delivered in order."
    )
    tell(config, ref, "admission.queued", text)
