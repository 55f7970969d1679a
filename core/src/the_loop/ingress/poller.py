"""The poll loop: every ``polling.intervalSeconds``, one cycle over each configured poll source.

Core knows no provider. A cycle calls ``poll_once`` on each installed :class:`~the_loop.interfaces.PollSource`
that ``polling.sources`` names, adds up the counters they return, and records the result in the heartbeat
``poll-status.json`` (atomically, after every cycle, kept when the poller exits; no pid — liveness comes from the
lock). A source that raises is one error and one ``degraded`` scope, never the end of the poller; every failed
scope, raised or reported, gets a ``poll.scope_error`` event here, so sources need not write their own.

Also here, for every source: :class:`PollClocks` (``local/poll-clocks.json``: when this machine last listed each
ref, and last asked whether an unlisted one had ended) and :func:`ledger_only_due` (the lazy closure schedule of
ledger-only records: sixty cycles' worth of ``intervalSeconds``, at most twenty per source per cycle). What became of
an event a source put in the inbox — the only evidence of delivery a ledger may act on — is the inbox's own answer,
``Inbox.delivery_status``.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.interfaces import PollSource, ServiceContext
from the_loop.state import StateError, StateLayout, atomic_write_json, locked, read_json

if TYPE_CHECKING:
    pass

COUNTERS = ("itemsSeen", "spawns", "commentsForwarded", "closures", "failures", "errors", "scopesPolled")
SLEEP_STEP = 0.1  # SIGTERM is honoured within this (plus the running source's own step)
ERROR_CHARS = 300
LEDGER_RECHECK_EVERY_CYCLES = 60  # a ledger-only record is asked whether it ended once per this many cycles
LEDGER_CHECKS_PER_CYCLE = 20  # … and at most this many such questions per source per cycle
# lastPolledAt / closureCheckedAt (seed 004), and missingAt: when this machine's closure question was first answered
# 404/410 in a row (a second such answer ends the item as deleted; "" once it answers again).
CLOCK_KEYS = ("lastPolledAt", "closureCheckedAt", "missingAt")
ROUTER_THREAD = "the-loop-router"  # the inbox worker an ingress daemon runs beside its service (routing.service)
ROUTER_STOP_SECONDS = 30.0


def empty_cycle() -> dict[str, Any]:
    return {
        **dict.fromkeys(COUNTERS, 0),
        "interrupted": False,
        "scopesFailed": [],
        "scopesSkipped": [],
    }


def _failed_scope(scope: str, error: str, permanent: bool = False) -> dict[str, Any]:
    return {"scope": scope, "error": error[:ERROR_CHARS], "permanent": permanent}


def merge(cycle: dict[str, Any], result: Mapping[str, Any], source: str) -> None:
    """Add one source's counters into the cycle; anything malformed in them is ignored, never fatal."""
    for key in COUNTERS:
        value = result.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            cycle[key] += value
    cycle["interrupted"] = cycle["interrupted"] or bool(result.get("interrupted"))
    for entry in result.get("scopesFailed") or ():
        if isinstance(entry, Mapping):
            scope = str(entry.get("scope") or source)
            cycle["scopesFailed"].append(
                _failed_scope(scope, str(entry.get("error", "")), bool(entry.get("permanent")))
            )
    cycle["scopesSkipped"].extend(str(scope) for scope in result.get("scopesSkipped") or ())


def run_cycle(ctx: ServiceContext, sources: list[PollSource]) -> dict[str, Any]:
    """One cycle over every source; a stop request between sources marks the cycle ``interrupted``."""
    cycle = empty_cycle()
    for source in sources:
        if ctx.should_stop():
            cycle["interrupted"] = True
            break
        try:
            result = source.poll_once(ctx)
        except Exception as exc:
            cycle["errors"] += 1
            cycle["scopesFailed"].append(_failed_scope(source.name, f"{type(exc).__name__}: {exc}"))
            continue
        if isinstance(result, Mapping):
            merge(cycle, result, source.name)
    for failed in cycle["scopesFailed"]:
        events.emit("poll.scope_error", level="warning", **failed)
    return cycle


def cycle_fields(cycle: dict[str, Any]) -> dict[str, Any]:
    """``poll.cycle``'s fields (B R47): the counters, and which scopes were degraded; zero and empty ones omitted."""
    degraded = [entry["scope"] for entry in cycle["scopesFailed"]] + list(cycle["scopesSkipped"])
    fields = {
        "items_seen": cycle["itemsSeen"],
        "spawns": cycle["spawns"],
        "comments_forwarded": cycle["commentsForwarded"],
        "closures": cycle["closures"],
        "failures": cycle["failures"],
        "errors": cycle["errors"],
        "scopes_polled": cycle["scopesPolled"],
        "scopes_failed": len(cycle["scopesFailed"]),
        "scopes_degraded": list(dict.fromkeys(degraded)),
        "interrupted": cycle["interrupted"],
    }
    return {key: value for key, value in fields.items() if value}


class Heartbeat:
    """``poll-status.json``: rewritten atomically; a failed write warns once and never stops the poller."""

    def __init__(self, path: Path, interval: int) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "startedAt": events.timestamp(),
            "lastCycleAt": "",  # no cycle yet (seed 004): "" and {}, never a guess
            "intervalSeconds": interval,
            "lastCycle": {},
        }
        self.warned = False

    def record(self, cycle: dict[str, Any] | None = None) -> None:
        if cycle is not None:
            self.data["lastCycleAt"] = events.timestamp()
            self.data["lastCycle"] = cycle
        try:
            atomic_write_json(self.path, self.data)
        except (StateError, OSError) as exc:  # a full disk or a bad path must not end the poller
            if not self.warned:
                self.warned = True
                print(f"warning: heartbeat not recorded (the poller carries on): {exc}", file=sys.stderr, flush=True)


def configured_sources(ctx: ServiceContext) -> list[PollSource]:
    """The installed poll sources ``polling.sources`` names, once each, in the order they are named."""
    installed: dict[str, PollSource] = {}
    for item in ctx.config.host.ingresses(ctx.config):
        if isinstance(item, PollSource):
            installed.setdefault(item.name, item)
    names = dict.fromkeys(source.provider for source in ctx.config.core.polling.sources)
    return [installed[name] for name in names if name in installed]


def sleep_until(deadline: float, ctx: ServiceContext) -> None:
    while not ctx.should_stop():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(SLEEP_STEP, remaining))


def run_service(ctx: ServiceContext) -> None:
    """The ``poller`` service's target: cycles until told to stop (one cycle with ``ctx.once``)."""
    interval = ctx.config.core.polling.interval_seconds
    sources = configured_sources(ctx)
    heartbeat = Heartbeat(ctx.config.state.poll_status_path, interval)
    heartbeat.record()
    events.emit("poller.started", interval_seconds=interval, sources=[source.name for source in sources], once=ctx.once)
    cycles = 0
    while not ctx.should_stop():
        began = time.monotonic()
        ctx, sources, interval = _follow_config(ctx, sources, interval)
        heartbeat.data["intervalSeconds"] = interval
        cycle = run_cycle(ctx, sources)
        cycles += 1
        heartbeat.record(cycle)
        events.emit("poll.cycle", **cycle_fields(cycle), duration_ms=int((time.monotonic() - began) * 1000))
        if ctx.once:
            break
        sleep_until(began + interval, ctx)
    if not ctx.once:
        release_attempts(sources)
    events.emit("poller.stopped", cycles=cycles)


def _follow_config(
    ctx: ServiceContext, sources: list[PollSource], interval: int
) -> tuple[ServiceContext, list[PollSource], int]:
    """The context, sources and interval for the next cycle: rebuilt when the config file was edited (issue-222).
    A rebuilt source starts with empty conditional-request caches, so its first cycle pays a full read."""
    config = ctx.current_config()
    if config is ctx.config:
        return ctx, sources, interval
    give_back_attempts(sources)  # the old sources' in-flight counts; their entries stay in the inbox
    ctx = dataclasses.replace(ctx, config=config)
    return ctx, configured_sources(ctx), config.core.polling.interval_seconds


def release_attempts(sources: list[PollSource]) -> None:
    """At a stop (B R9): once this process's router has finished the dispatch in hand, each source gives back the
    attempts it counted for events that were never delivered (``release_attempts``, where a source keeps a budget)."""
    for thread in threading.enumerate():
        if thread.name == ROUTER_THREAD and thread is not threading.current_thread():
            thread.join(timeout=ROUTER_STOP_SECONDS)
    give_back_attempts(sources)


def give_back_attempts(sources: list[PollSource]) -> None:
    for source in sources:
        release = getattr(source, "release_attempts", None)
        if callable(release):
            try:
                release()
            except Exception as exc:  # a budget left spent is a smaller harm than a poller that cannot stop
                print(f"warning: {source.name}: attempts not released: {exc}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- shared pieces


class PollClocks:
    """``local/poll-clocks.json``: ``{"clocks": {<ref>: {"lastPolledAt", "closureCheckedAt", "missingAt"}}}``.

    Best-effort (seed 004, issue-382): an unreadable file reads as empty (everything due), a failed write is
    reported once and never stops a cycle. Writes are read-modify-write under ``local/locks/poll-clocks.lock``,
    the lock the reset path takes to drop an entry.
    """

    def __init__(self, layout: StateLayout) -> None:
        self.layout = layout
        self.path = layout.local_dir / "poll-clocks.json"
        self.warned = False

    def read(self) -> dict[str, dict[str, str]]:
        data = read_json(self.path) or {}
        clocks = data.get("clocks") if isinstance(data, dict) else None
        if not isinstance(clocks, dict):
            return {}
        return {
            str(ref): {k: v for k, v in entry.items() if k in CLOCK_KEYS and isinstance(v, str)}
            for ref, entry in clocks.items()
            if isinstance(entry, dict)
        }

    def update(self, changes: Mapping[str, Mapping[str, str] | None]) -> None:
        """Merge ``{ref: {key: stamp}}`` into the file; a value of None drops the ref."""
        if not changes:
            return
        try:
            with locked(self.layout.lock_for("poll-clocks")):
                clocks = self.read()
                for ref, entry in changes.items():
                    if entry is None:
                        clocks.pop(ref, None)
                    else:
                        clocks[ref] = {**clocks.get(ref, {}), **{k: v for k, v in entry.items() if k in CLOCK_KEYS}}
                atomic_write_json(self.path, {"clocks": dict(sorted(clocks.items()))})
        except (StateError, OSError) as exc:
            if not self.warned:
                self.warned = True
                print(f"warning: poll clocks not recorded (the poller carries on): {exc}", file=sys.stderr, flush=True)


def ledger_only_due(
    refs: Iterable[str], clocks: Mapping[str, Mapping[str, str]], interval: int, now: float | None = None
) -> list[str]:
    """The ledger-only refs due for a closure question, longest-absent first (then by ref): due once the later of
    ``lastPolledAt`` and ``closureCheckedAt`` is sixty cycles' worth of ``interval`` old; unknown or unparseable
    stamps are due now. The caller takes at most :data:`LEDGER_CHECKS_PER_CYCLE` of them."""
    now = time.time() if now is None else now
    window = LEDGER_RECHECK_EVERY_CYCLES * max(interval, 1)
    due: list[tuple[float, str]] = []
    for ref in refs:
        entry = clocks.get(ref, {})
        stamps = [events.parse_instant(entry[key]) for key in CLOCK_KEYS if entry.get(key)]
        last = max((stamp for stamp in stamps if stamp is not None), default=None)
        if last is None or last <= now - window:
            due.append((last if last is not None else 0.0, ref))
    return [ref for _, ref in sorted(due)]
