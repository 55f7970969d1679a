"""A fleet's worker: it owns the work items the gateway assigned to it, and routes their events into its sessions.

The ``fleet-worker`` service runs :class:`Owner` on a worker machine (``instance.role: worker`` or ``both``):

- every third of ``fleet.leaseSeconds`` it beats (capacity, live sessions, free memory, host, scope) and renews the
  lease of every item it owns; an item whose renewal fails was lost (this worker was cut off and the item moved):
  its lane stops and its local session is closed, so a worker back from a partition acts on nothing it lost;
- it reads its assignments (``loop.assign.<name>``): for each it takes the item's lease and starts the item's
  lane. A takeover (the item's worker went silent) first restores the item's portable record from the fleet's copy
  and, when the item is started, spawns a fresh session whose boot prompt says the item moved (a conversation
  cannot move between machines: seed 004);
- each item's lane reads the item's commands in order (its one durable consumer) and hands each event to the
  single machine's router (:class:`~the_loop.routing.router.Router`): authorization, control commands, delivery,
  spawning, all in the item's turn. A command is acknowledged only after it was acted on, each dedupe key once
  fleet-wide; one not acted on yet (a spawn waiting for a slot, a retry) is read again later, still first;
- it answers the gateway's questions about its sessions and events (:mod:`the_loop.routing.views`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from the_loop import control, events
from the_loop.models import InboundEvent, WorkEvent

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.fleet import Fleet
    from the_loop.fleet.commands import Command, Owned
    from the_loop.fleet.leases import Held
    from the_loop.interfaces import ServiceContext

SPAWN_GRACE_SECONDS = 120.0  # how long an owned item without a session yet counts as taking a slot
MAX_ATTEMPTS = 5  # as the inbox: a failing event is tried this often, backing off, then abandoned
TAKEOVER_TEXT = (
    "This work item moved to this machine ({worker}): the machine that had it before ({previous}) stopped "
    "answering, and its conversation stayed there. You are starting fresh. Read the work item, its comments and "
    "the branch to see where the work stands, then carry on; the next messages are the events it has not seen."
)


@dataclass
class Lane:
    """One owned work item: its lease, its commands, the thread that acts on them."""

    work_item: str
    key: str
    held: Held
    owned: Owned
    stopped: threading.Event = field(default_factory=threading.Event)
    portable: bytes = b""  # what was last copied to the fleet
    previous: str = ""  # the worker it was taken over from ("": assigned new, or this worker's own again)
    adopted: float = field(default_factory=time.monotonic)
    thread: threading.Thread | None = None


class Owner:
    def __init__(self, latest: Callable[[], LoadedConfig], fleet: Fleet) -> None:
        from the_loop.routing.service import LiveRouter

        self.latest = latest
        self.fleet = fleet
        self.name = latest().core.instance.name
        self.router = LiveRouter(latest)
        self.lanes: dict[str, Lane] = {}
        self._lanes_lock = threading.Lock()
        self._failures: dict[str, int] = {}

    # --------------------------------------------------------------------------------------------- the loop

    def run(self, should_stop: Callable[[], bool]) -> None:
        from the_loop.fleet.ask import serve
        from the_loop.routing.views import answer

        serve(self.fleet.nats, self.name, lambda request: answer(self.latest(), request))
        self.beat()
        self._resume()
        assignments = self.fleet.assign.owned(self.name, ack_wait=30)
        next_beat = 0.0
        try:
            while not should_stop():
                now = time.monotonic()
                if now >= next_beat:
                    next_beat = now + max(0.5, self.fleet.lease_seconds / 3)
                    self._renew_all()
                    self.beat()
                try:
                    notice = assignments.next(timeout=0.5)
                except Exception as exc:  # NATS away: the leases lapse and the gateway moves the items
                    events.emit("fleet.worker_unreachable", level="warning", error=f"{type(exc).__name__}: {exc}"[:300])
                    time.sleep(0.5)
                    continue
                if notice is None:
                    continue
                try:
                    self._assigned(notice)
                except Exception as exc:  # not acknowledged: the notice comes back after ack_wait, tried again
                    events.emit("fleet.adopt_failed", level="error", error=f"{type(exc).__name__}: {exc}"[:300])
                    continue
                assignments.ack(notice)
        finally:
            for lane in list(self.lanes.values()):
                lane.stopped.set()
            for lane in list(self.lanes.values()):
                if lane.thread is not None:
                    lane.thread.join(timeout=5)

    def beat(self) -> None:
        from the_loop.fleet.workers import Worker
        from the_loop.sessions.steering.admission import free_memory_mib
        from the_loop.sessions.tmux import runner_for

        config = self.latest()
        instance = config.core.instance
        live_items = {
            record.work_item for record in config.registry.records() if record.own is not None and record.own.live
        }
        # An item just assigned has no session yet: it counts already, or the gateway would give away its slot twice.
        now = time.monotonic()
        pending = {lane.work_item for lane in list(self.lanes.values()) if now - lane.adopted < SPAWN_GRACE_SECONDS}
        live = len(live_items | pending)
        try:
            self.fleet.workers.beat(
                Worker(
                    name=self.name,
                    capacity=instance.capacity.sessions,
                    live=live,
                    free_memory_mib=free_memory_mib(),
                    host=instance.host or _hostname(),
                    scope=instance.scope.mode,
                    tmux=tuple(runner_for(config).command_prefix),
                )
            )
        except Exception as exc:
            events.emit("fleet.beat_failed", level="warning", error=f"{type(exc).__name__}: {exc}"[:300])

    def _renew_all(self) -> None:
        for lane in list(self.lanes.values()):
            try:
                renewed = lane.held.renew()
            except Exception:  # NATS away: try again next beat (the lease lapses if it stays away)
                continue
            if renewed is None:
                self._lost(lane)

    # ------------------------------------------------------------------------------------------- ownership

    def _resume(self) -> None:
        """At start: the items still assigned to this worker are its own again (a restart within the lease
        keeps them); a live local session of an item assigned elsewhere is closed (it was lost meanwhile)."""
        mine = set()
        config = self.latest()
        for assignment in self.fleet.assignments.all():
            if assignment.worker == self.name:
                mine.add(assignment.work_item)
                if _in_play(config, assignment.work_item):  # an ended or stopped item needs no lane any more
                    self._adopt(assignment.work_item, "")
        for record in config.registry.records():
            if record.own is not None and record.own.live and record.work_item not in mine:
                self._close_lost(record.work_item, "assigned-elsewhere")

    def _assigned(self, notice: Command) -> None:
        try:
            value = json.loads(notice.data)
            work_item, previous = str(value["workItem"]), str(value.get("previous") or "")
        except (ValueError, KeyError, TypeError):
            events.emit("fleet.assignment_dropped", level="error", reason="malformed")
            return
        self._adopt(work_item, previous)

    def _adopt(self, work_item: str, previous: str) -> None:
        from the_loop.fleet.items import item_key
        from the_loop.fleet.leases import Held, Lease

        key = item_key(work_item)
        if key in self.lanes:
            return
        lease = self.fleet.leases.acquire(key, self.name)
        if lease is None:
            holder = self.fleet.leases.holder(key)
            if holder is None or holder.worker != self.name:
                events.emit(
                    "fleet.assignment_refused",
                    level="warning",
                    work_item=work_item,
                    holder=holder.worker if holder else None,
                )
                return
            lease = Lease(key, self.name, holder.epoch, holder.revision)  # its own, from before a restart
        # A command handed to a worker that died comes back after ack_wait: one lease time, as its items do.
        owned = self.fleet.commands.owned(key, ack_wait=self.fleet.lease_seconds)
        taken_from = previous if previous != self.name else ""
        lane = Lane(work_item, key, Held(self.fleet.leases, lease), owned, previous=taken_from)
        with self._lanes_lock:
            self.lanes[key] = lane
        events.emit("fleet.owned", work_item=work_item, worker=self.name, epoch=lease.epoch, previous=previous or None)
        lane.thread = threading.Thread(target=self._work, args=(lane,), name=f"the-loop-lane-{key}", daemon=True)
        lane.thread.start()

    def _take_over(self, lane: Lane, previous: str) -> None:
        """The item came from a worker that went silent: its portable record from the fleet's copy (when this
        machine has none), then, if it is started and not ended, a fresh session that says what happened."""
        from the_loop.refs import parse_ref

        config = self.latest()
        ref = parse_ref(lane.work_item)
        copy = self.fleet.portable.get(lane.work_item)
        if copy is not None and config.store.read(ref) is None:
            try:
                sections = json.loads(copy)
            except ValueError:
                sections = {}
            for name in config.store.sections:
                if isinstance(sections, dict) and name in sections:
                    config.store.update_section(ref, name, sections[name])
            lane.portable = copy
        record = config.store.read(ref) or {}
        started = control.recorded(config, ref) == "start" and not record.get("ended")
        events.emit(
            "fleet.took_over",
            level="warning",
            work_item=lane.work_item,
            worker=self.name,
            previous=previous,
            spawn=started,
        )
        if not started:
            return
        work = WorkEvent(
            delivery_id=f"fleet-takeover:{lane.key}:{lane.held.lease.epoch if lane.held.lease else 0}",
            work_item=lane.work_item,
            text=TAKEOVER_TEXT.format(worker=self.name, previous=previous),
            spawn=True,
            source="fleet",
        )
        outcome = self.router().dispatcher.dispatch(work)
        if not outcome.ok:
            events.emit(
                "fleet.takeover_spawn_failed",
                level="error",
                work_item=lane.work_item,
                reason=outcome.reason or outcome.status,
            )

    def _lost(self, lane: Lane) -> None:
        if lane.stopped.is_set():
            return
        lane.stopped.set()
        with self._lanes_lock:
            self.lanes.pop(lane.key, None)
        lane.owned.close()
        events.emit("fleet.lease_lost", level="warning", work_item=lane.work_item, worker=self.name)
        self._close_lost(lane.work_item, "lease-lost")

    def _close_lost(self, work_item: str, reason: str) -> None:
        """Another worker has the item now: this machine's session of it must not go on working beside that one."""
        from the_loop.sessions.closing import close_session

        try:
            result = close_session(self.latest(), work_item, kill_tmux=True)
            events.emit("fleet.session_released", work_item=work_item, reason=reason, closed=bool(result.was_live))
        except Exception as exc:
            events.emit("fleet.session_release_failed", level="error", work_item=work_item, error=str(exc)[:300])

    # ------------------------------------------------------------------------------------------ the lanes

    def _work(self, lane: Lane) -> None:
        from the_loop.fleet.commands import handle

        if lane.previous:  # in the lane, not the main loop: a spawn may take a while, the heartbeat must not wait
            try:
                self._take_over(lane, lane.previous)
            except Exception as exc:  # its commands still come: the next event spawns as on one machine
                events.emit(
                    "fleet.takeover_failed",
                    level="error",
                    work_item=lane.work_item,
                    error=f"{type(exc).__name__}: {exc}",
                )
        while not lane.stopped.is_set():
            try:
                command = lane.owned.next(timeout=1.0)
            except Exception:  # NATS away, or the lane closed
                lane.stopped.wait(0.5)
                continue
            if command is None or lane.stopped.is_set():
                continue
            try:
                done = handle(lane.held, self.fleet.delivered, lane.owned, command, lambda c: self._act(lane, c))
            except Exception as exc:
                events.emit(
                    "fleet.command_failed",
                    level="error",
                    work_item=lane.work_item,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
                continue
            if done == "lost":
                self._lost(lane)
            elif done == "done":
                self._copy_portable(lane)

    def _act(self, lane: Lane, command: Command) -> bool:
        """Route one event as the single machine does; False when it is to be read again later (not acted on)."""
        try:
            data = json.loads(command.data)
            event = InboundEvent.model_validate(data["event"])
        except (ValueError, KeyError, TypeError) as exc:
            events.emit(
                "fleet.command_dropped",
                level="error",
                work_item=lane.work_item,
                reason="malformed",
                error=str(exc)[:200],
            )
            return True
        try:
            outcome = self.router().handle(event)
        except Exception as exc:
            events.emit(
                "dispatch.error",
                level="error",
                work_item=lane.work_item,
                delivery_id=event.delivery_id,
                error=f"{type(exc).__name__}: {exc}"[:500],
            )
            outcome = None
        if outcome is not None and outcome.status == "queued":
            lane.owned.later(command, float(outcome.retry_in or 1.0))
            return False
        if outcome is None or (outcome.status == "failed" and outcome.will_retry):
            failures = self._failures[command.key] = self._failures.get(command.key, 0) + 1
            if failures < MAX_ATTEMPTS:
                lane.owned.later(command, min(2.0**failures, 60.0))
                return False
            events.emit(
                "dispatch.abandoned",
                level="error",
                work_item=lane.work_item,
                delivery_id=event.delivery_id,
                attempts=failures,
            )
        self._failures.pop(command.key, None)
        return True

    def _copy_portable(self, lane: Lane) -> None:
        """The item's portable record, copied to the fleet when it changed (what the next owner starts from)."""
        config = self.latest()
        try:
            record = config.store.read(lane.work_item)
        except Exception:
            return
        if record is None:
            return
        data = json.dumps(record, sort_keys=True).encode()
        if data != lane.portable:
            try:
                self.fleet.portable.put(lane.work_item, data)
                lane.portable = data
            except Exception as exc:
                events.emit("fleet.copy_failed", level="warning", work_item=lane.work_item, error=str(exc)[:300])


def _in_play(config: LoadedConfig, work_item: str) -> bool:
    """Whether this machine has a live session of the item, or it is started and not ended (its session to come)."""
    from the_loop.refs import RefError, parse_ref

    try:
        ref = parse_ref(work_item)
    except RefError:
        return False
    record = config.registry.load(work_item)
    if record is not None and record.own is not None and record.own.live:
        return True
    return control.recorded(config, ref) == "start" and not (config.store.read(ref) or {}).get("ended")


def _hostname() -> str:
    import socket

    return socket.gethostname()


def run_service(context: ServiceContext) -> None:
    """The ``fleet-worker`` service: connect (retrying while NATS is away) and own items until told to stop."""
    from the_loop import fleet as fleet_package
    from the_loop.fleet.connection import FleetError
    from the_loop.sessions.steering import watch
    from the_loop.sessions.tmux import runner_for

    latest = context.latest or (lambda: context.config)
    while not context.should_stop():
        try:
            connected = fleet_package.connect(latest().core.fleet)
            break
        except FleetError as exc:
            events.emit("fleet.worker_unreachable", level="warning", error=str(exc)[:300])
            time.sleep(1.0)
    else:
        return
    watch.start(latest, runner_for, context.should_stop, active=lambda: True)
    try:
        Owner(latest, connected).run(context.should_stop)
    finally:
        connected.close()
