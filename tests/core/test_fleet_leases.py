"""Work-item leases on a real nats-server with JetStream (:mod:`the_loop.fleet.leases`): one owner at a time, kept
by renewal, lost by expiry, and fenced so a worker that lost an item acts on nothing of it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from the_loop.fleet.connection import FleetError, Nats
from the_loop.fleet.leases import Lease, Leases

KEY = "fake-octo-repo-15"


@pytest.fixture
def nats(nats_client: Nats) -> Nats:
    return nats_client


def test_of_two_workers_racing_for_an_item_exactly_one_gets_it(nats: Nats) -> None:
    leases = Leases(nats, seconds=5)
    won: list[Lease | None] = []
    start = threading.Barrier(8)

    def race(worker: str) -> None:
        start.wait()
        won.append(leases.acquire(KEY, worker))

    threads = [threading.Thread(target=race, args=(f"worker-{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    held = [lease for lease in won if lease is not None]
    assert len(held) == 1
    assert leases.holder(KEY) == held[0]


def test_a_renewed_lease_keeps_its_epoch_and_outlives_its_ttl(nats: Nats) -> None:
    leases = Leases(nats, seconds=1.5)
    lease = leases.acquire(KEY, "a")
    assert lease is not None
    for _ in range(4):  # 2 s of renewals every 0.5 s: longer than the lease lives unrenewed
        time.sleep(0.5)
        renewed = leases.renew(lease)
        assert renewed is not None and renewed.epoch == lease.epoch
        lease = renewed
    assert leases.acquire(KEY, "b") is None
    assert leases.holder(KEY).worker == "a"  # type: ignore[union-attr]


def test_an_unrenewed_lease_expires_and_its_old_holder_is_fenced_out(nats: Nats) -> None:
    leases = Leases(nats, seconds=1)
    old = leases.acquire(KEY, "a")
    assert old is not None
    deadline = time.monotonic() + 15  # partitioned: "a" renews nothing while the lease runs out
    taken = None
    while taken is None and time.monotonic() < deadline:
        time.sleep(0.2)
        taken = leases.acquire(KEY, "b")

    assert taken is not None and taken.epoch != old.epoch
    assert leases.renew(old) is None  # "a" is back: its renewal fails, so it acts on nothing
    assert leases.fenced(old, old.epoch) is None
    assert leases.fenced(taken, old.epoch) is None  # a command from the earlier ownership is refused
    assert leases.fenced(taken, taken.epoch) is not None


def test_a_released_lease_is_free_at_once_and_a_stale_release_does_nothing(nats: Nats) -> None:
    leases = Leases(nats, seconds=30)
    stale = leases.acquire(KEY, "a")
    assert stale is not None
    lease = leases.renew(stale)
    assert lease is not None
    assert not leases.release(stale)  # a holder's view from before its last renewal releases nothing
    assert leases.holder(KEY) == lease
    assert leases.release(lease)
    assert leases.acquire(KEY, "b") is not None


def test_a_lease_survives_a_restart_of_nats(nats_server: Any) -> None:
    connection = Nats.connect([nats_server.url])
    try:
        lease = Leases(connection, seconds=60).acquire(KEY, "a")
        assert lease is not None
    finally:
        connection.close()
    nats_server.stop()
    nats_server.start()
    again = Nats.connect([nats_server.url])
    try:
        assert Leases(again, seconds=60).holder(KEY) == lease  # JetStream kept what it acknowledged
    finally:
        again.close()


def test_an_unreachable_nats_is_one_clear_error() -> None:
    with pytest.raises(FleetError, match=r"cannot connect to NATS at nats://127\.0\.0\.1:1"):
        Nats.connect(["nats://127.0.0.1:1"], timeout=1)
