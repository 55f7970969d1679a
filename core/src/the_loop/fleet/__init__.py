"""A fleet of machines on NATS JetStream (issue 22): one gateway runs every ingress and the router, and
workers run the sessions, each work item owned by exactly one worker through a lease.

The primitives, each usable alone and tested against a real ``nats-server`` (the gateway's and the workers' loops
that use them are :mod:`the_loop.routing.gateway` and :mod:`the_loop.routing.owner`):

- :mod:`.connection` — one NATS connection for synchronous code: nats-py's asyncio client on a loop thread of its own;
- :mod:`.leases` — ownership of a work item: a key-value lease, created only when absent, renewed by its holder,
  expiring after ``leaseSeconds`` unless renewed, and carrying an *epoch* (the revision it was created at) that every
  command names as its fencing token: a holder that lost its lease (partitioned, then back) cannot renew it, so it
  acts on nothing it lost;
- :mod:`.stream` — the durable event stream: what an ingress accepted, stored (and deduplicated by the provider's
  key) before the provider hears back, one subject per work item so its events keep their order;
- :mod:`.commands` — what the gateway asks of an item's owner: one subject and one durable consumer per item, so
  an owner's unsettled commands go to the next owner in order; the owner acts only with a renewed lease, and a
  fleet-wide ledger of delivered keys keeps any event from being pasted twice;
- :mod:`.intake` — the gateway's ingresses publishing to JetStream (their inbox the fallback), moved into its inbox;
- :mod:`.items` — which worker each item is assigned to, and the copy of its portable record for the next owner;
- :mod:`.ask` — one view of the fleet: request-reply to every worker, a silent one named;
- :mod:`.workers` — which workers are alive (a heartbeat each, expiring with the lease time) and where new work goes
  (the most free capacity, or the worker a start comment names).

Nothing here is imported unless a fleet is configured: the single machine stays the embedded default.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from the_loop.fleet.commands import CommandQueue, Delivered
    from the_loop.fleet.connection import Nats
    from the_loop.fleet.items import Assignments, PortableCopies
    from the_loop.fleet.leases import Leases
    from the_loop.fleet.stream import EventStream
    from the_loop.fleet.workers import Workers


@dataclass
class Fleet:
    """One process's connection to the fleet and every store on it, opened once (:func:`connect`)."""

    nats: Nats
    lease_seconds: float
    events: EventStream
    commands: CommandQueue
    assign: CommandQueue
    leases: Leases
    workers: Workers
    assignments: Assignments
    portable: PortableCopies
    delivered: Delivered
    extra: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        self.nats.close()


def connect(fleet_section: Any, *, timeout: float = 5.0) -> Fleet:
    """Connect with ``fleet`` config (``fleet.nats`` credentials from the environment) and open every store;
    raises :class:`~the_loop.fleet.connection.FleetError` when NATS cannot be reached."""
    from the_loop.fleet.commands import ASSIGN_PREFIX, ASSIGN_STREAM, CommandQueue, Delivered
    from the_loop.fleet.connection import FleetError, Nats, options_for
    from the_loop.fleet.items import Assignments, PortableCopies
    from the_loop.fleet.leases import Leases
    from the_loop.fleet.stream import EventStream
    from the_loop.fleet.workers import Workers

    nats = Nats.connect(fleet_section.nats.servers, timeout=timeout, **options_for(fleet_section.nats))
    nats.replicas = fleet_section.nats.replicas
    seconds = fleet_section.lease_seconds
    try:
        return Fleet(
            nats=nats,
            lease_seconds=seconds,
            events=EventStream(nats),
            commands=CommandQueue(nats),
            assign=CommandQueue(nats, stream=ASSIGN_STREAM, prefix=ASSIGN_PREFIX),
            leases=Leases(nats, seconds),
            workers=Workers(nats, seconds),
            assignments=Assignments(nats),
            portable=PortableCopies(nats),
            delivered=Delivered(nats),
        )
    except FleetError:
        nats.close()
        raise


_SHARED: dict[tuple[str, ...], Fleet] = {}
_SHARED_LOCK = threading.Lock()
_LAST_FAILURE: dict[tuple[str, ...], float] = {}
RETRY_CONNECT_SECONDS = 2.0


def shared(fleet_section: Any) -> Fleet:
    """The process's one fleet connection for these servers, connected on first use; after a failed connect,
    further calls fail at once for ``RETRY_CONNECT_SECONDS`` (an ingress falls back to its inbox meanwhile)."""
    from the_loop.fleet.connection import FleetError

    servers = tuple(fleet_section.nats.servers)
    with _SHARED_LOCK:
        found = _SHARED.get(servers)
        if found is not None:
            return found
        if time.monotonic() - _LAST_FAILURE.get(servers, -1e9) < RETRY_CONNECT_SECONDS:
            raise FleetError(f"NATS at {', '.join(servers)} was unreachable moments ago")
        try:
            # A short timeout: an ingress waits this long for JetStream before it falls back to its inbox.
            found = _SHARED[servers] = connect(fleet_section, timeout=2.0)
        except FleetError:
            _LAST_FAILURE[servers] = time.monotonic()
            raise
        return found
