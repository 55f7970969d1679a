"""The gateway's router in a fleet: which worker each event goes to.

The gateway runs every ingress; what they accept reaches its local inbox (:mod:`the_loop.fleet.intake`), and
:class:`GatewayRouter` handles each entry in arrival order, per work item, as the single machine's router does. It
decides only what needs no session: the repository bound, a work item to act on, and for an item no worker owns
yet, whether this event may start it (an authorized person's start command, or an armed item when no start command
is required) and which worker takes it — the one ``instance:<name>`` names, else the live ``open`` worker with the
most free capacity. Everything else (authorization against collaborators, control commands, delivery, spawning)
is the owner's router, in the item's turn on the worker that holds its lease (:mod:`the_loop.routing.owner`).

An event for an owned item is queued on that item's command subject. When its worker's heartbeat and lease are gone,
the item is reassigned first (a failover: the new owner starts a fresh session that says so and reads every
command the old owner had not settled). While NATS is unreachable, or no worker has room, the entry waits in the
inbox without counting an attempt (``queued``), so a work item's events keep their order.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from the_loop import control, events
from the_loop.models import InboundEvent
from the_loop.sessions.outcomes import Outcome

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.fleet import Fleet
    from the_loop.fleet.items import Assignment
    from the_loop.inbox import InboxEntry
    from the_loop.refs import WorkItemRef

ADDRESS = re.compile(r"(?<![\w-])instance:([A-Za-z0-9_-]{1,64})\b")
RETRY_SECONDS = 1.0


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says NATS could not be reached or answer in time (not a fault of the event)."""
    from the_loop.fleet.connection import FleetError

    return isinstance(exc, FleetError | TimeoutError | ConnectionError) or type(exc).__module__.startswith("nats.")


def addresses(body: str | None) -> list[str]:
    """The instances a start comment names (``instance:<name>``), each once, in order."""
    return list(dict.fromkeys(ADDRESS.findall(body or "")))


class GatewayRouter:
    """Routes inbox entries to their items' owners. ``fleet`` is a callable so a lost connection is opened again."""

    def __init__(self, latest: Callable[[], LoadedConfig], fleet: Callable[[], Fleet]) -> None:
        self.latest = latest
        self.fleet = fleet
        self._lock = threading.Lock()  # one assignment at a time: two lanes never give one worker's last slot twice
        self._recent: list[tuple[str, float]] = []  # (worker, when): assignments its heartbeat may not count yet
        # No failover before this (monotonic): at start, and after NATS was away, workers get one lease time to
        # beat and renew again before their silence counts.
        self.calm_until = time.monotonic() + latest().core.fleet.lease_seconds

    def __call__(self, entry: InboxEntry) -> Outcome:
        if entry.data.get("type") != "inbound":
            events.emit("routing.dropped", level="error", reason="unknown-entry", delivery_id=entry.delivery_id)
            return Outcome("dropped", reason="unknown-entry")
        try:
            return self.route(InboundEvent.model_validate(entry.data["event"]), entry.data)
        except Exception as exc:
            if not unreachable(exc):
                raise
            self.calm_until = time.monotonic() + self.latest().core.fleet.lease_seconds  # see calm_until
            events.emit("fleet.unreachable", level="warning", delivery_id=entry.delivery_id, error=str(exc)[:300])
            return Outcome("queued", reason="fleet-unreachable", retry_in=RETRY_SECONDS)

    def route(self, event: InboundEvent, data: dict[str, Any]) -> Outcome:
        from the_loop.routing.router import Router

        config = self.latest()
        router = Router(config)
        refs = router._refs(event)
        if refs is None:
            return router._dropped(event, "undeclared-repository", repository=event.repository)
        if not refs:
            return router._dropped(event, "no-work-item", level="debug")
        fleet = self.fleet()
        owned = [(ref, found) for ref in refs if (found := fleet.assignments.get(str(ref))) is not None]
        if owned:
            target, assignment = owned[0]
            return self._forward(fleet, event, data, target, self._live_owner(fleet, config, assignment))
        target = refs[0]
        refusal = self._start_refusal(config, router, event, target)
        if refusal:
            return (
                router._settle(event, target, refusal)
                if refusal != "unauthorized-actor"
                else router._dropped(event, refusal, refs=refs, level="warning")
            )
        named = addresses(event.body)
        if len(named) > 1:
            return router._settle(event, target, "conflicting-addresses", instances=named)
        with self._lock:
            assignment = self._assign(fleet, config, str(target), named[0] if named else "")
        if assignment is None:
            events.emit(
                "fleet.no_worker", level="warning", work_item=str(target), addressed=named[0] if named else None
            )
            return Outcome("queued", reason="no-worker", retry_in=RETRY_SECONDS * 5)
        return self._forward(fleet, event, data, target, assignment)

    # ----------------------------------------------------------------------------------------------- owners

    def _start_refusal(self, config: LoadedConfig, router: Any, event: InboundEvent, target: WorkItemRef) -> str:
        """Why this event may not start ``target`` (no worker owns it yet); "" when it may."""
        from the_loop.routing.router import CONTENT_KINDS

        if event.kind in ("ci", "closed"):
            return "untracked"
        actor = event.actor
        relay = actor is not None and actor.provider.endswith("-relay") and actor.id == "operator"
        if actor is None or not (relay or control.is_principal(router._principals, actor.provider, actor.id)):
            return "unauthorized-actor"  # a collaborator's grant is on an owned item only, and no one else's starts
        routing = config.core.routing
        parsed = control.parse(event.body, routing.control.keywords)
        if parsed.command is not None and event.kind in CONTENT_KINDS and routing.control.enabled:
            return "" if parsed.command == "start" else "no-session"
        if control.arming_refusal(config, target, event.labels) is not None:
            return "spawn-policy"
        if routing.control.enabled and routing.control.require_start_command:
            return "awaiting-start"
        return ""

    def _assign(
        self, fleet: Fleet, config: LoadedConfig, work_item: str, addressed: str, previous: str = ""
    ) -> Assignment | None:
        """Give ``work_item`` to a live worker (``addressed``, else the most free), tell it, and return the
        assignment; None when no worker can take it now."""
        from the_loop.fleet.items import Assignment, item_key
        from the_loop.fleet.workers import choose

        now = time.time()
        self._recent = [(name, at) for name, at in self._recent if at > now - 2 * fleet.lease_seconds]
        live = [
            replace(w, live=w.live + sum(1 for name, at in self._recent if name == w.name and at >= w.at))
            for w in fleet.workers.live()
            if w.name != previous
        ]
        chosen = choose(live, addressed)
        if chosen is None:
            return None
        self._recent.append((chosen.name, now))
        assignment = Assignment(work_item, chosen.name, previous, now)
        fleet.assignments.put(assignment)
        notice = {"workItem": work_item, "previous": previous}
        fleet.assign.send(chosen.name, 0, f"assign:{item_key(work_item)}:{time.time_ns()}", json.dumps(notice).encode())
        events.emit(
            "fleet.assigned",
            work_item=work_item,
            worker=chosen.name,
            previous=previous or None,
            addressed=addressed or None,
        )
        return assignment

    def _live_owner(self, fleet: Fleet, config: LoadedConfig, assignment: Assignment) -> Assignment:
        """The item's owner, reassigned first when its worker is gone (no heartbeat, no lease)."""
        if time.monotonic() < self.calm_until:
            return assignment
        moved = failover(fleet, config, assignment, self._assign)
        return moved or assignment

    def _forward(
        self, fleet: Fleet, event: InboundEvent, data: dict[str, Any], target: Any, assignment: Assignment
    ) -> Outcome:
        from the_loop.fleet.items import item_key

        key = item_key(str(target))
        holder = fleet.leases.holder(key)
        epoch = holder.epoch if holder is not None and holder.worker == assignment.worker else 0
        fleet.commands.send(key, epoch, event.dedupe_key, json.dumps(data).encode())
        events.emit(
            "fleet.forwarded",
            level="debug",
            work_item=str(target),
            worker=assignment.worker,
            delivery_id=event.delivery_id,
        )
        return Outcome("delivered", reason="forwarded")


def failover(
    fleet: Fleet, config: LoadedConfig, assignment: Assignment, assign: Callable[..., Assignment | None]
) -> Assignment | None:
    """Reassign ``assignment`` when its worker is gone — its heartbeat expired and nobody holds the lease — to
    another live worker; the new assignment, or None when it stays (its worker lives, or no other has room)."""
    from the_loop.fleet.items import item_key

    if fleet.workers.get(assignment.worker) is not None:
        return None
    holder = fleet.leases.holder(item_key(assignment.work_item))
    if holder is not None:
        return None
    moved = assign(fleet, config, assignment.work_item, "", previous=assignment.worker)
    if moved is not None:
        events.emit(
            "fleet.failover",
            level="warning",
            work_item=assignment.work_item,
            worker=moved.worker,
            previous=assignment.worker,
        )
    return moved


def sweep(router: GatewayRouter, should_stop: Callable[[], bool], active: Callable[[], bool]) -> None:
    """Every third of the lease time, move the items of workers that went silent (none waits for its next event)."""
    away = False
    while not should_stop():
        config = router.latest()
        lease = config.core.fleet.lease_seconds
        time.sleep(max(0.5, lease / 3))
        if not active():
            continue
        try:
            fleet = router.fleet()
            assignments = fleet.assignments.all()
        except Exception as exc:  # NATS away: nobody could renew or beat meanwhile, so nothing is judged now
            events.emit("fleet.sweep_failed", level="warning", error=f"{type(exc).__name__}: {exc}"[:300])
            away = True
            continue
        if away:
            away, router.calm_until = False, time.monotonic() + lease
        if time.monotonic() < router.calm_until:
            continue
        for assignment in assignments:
            try:
                with router._lock:
                    failover(fleet, config, assignment, router._assign)
            except Exception as exc:
                events.emit("fleet.sweep_failed", level="warning", error=f"{type(exc).__name__}: {exc}"[:300])
