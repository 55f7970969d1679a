"""A work item's commands on a real nats-server (:mod:`the_loop.fleet.commands`): its owner acts on them in order;
when the owner dies its unsettled commands go to the next owner, none lost and none acted on twice; and an owner back
from a partition acts on nothing of the item it lost."""

from __future__ import annotations

import time
from typing import Any

import pytest

from the_loop.fleet.commands import Command, CommandQueue, Delivered, handle
from the_loop.fleet.connection import Nats
from the_loop.fleet.leases import Held, Leases

ITEM = "fake-octo-repo-15"


@pytest.fixture
def nats(nats_client: Nats) -> Nats:
    return nats_client


def test_an_owner_acts_on_its_items_commands_in_order_and_each_once(nats: Nats) -> None:
    queue, leases, delivered = CommandQueue(nats), Leases(nats, seconds=10), Delivered(nats)
    lease = leases.acquire(ITEM, "a")
    assert lease is not None
    for n in range(10):
        queue.send(ITEM, lease.epoch, f"comment-{n}", f"c{n}".encode())
    queue.send(ITEM, lease.epoch, "comment-3", b"c3")  # the same event again (a webhook retry): stored once

    acted: list[bytes] = []
    owned = queue.owned(ITEM)
    held = Held(leases, lease)
    while (command := owned.next(timeout=1)) is not None:
        done = handle(held, delivered, owned, command, lambda c: acted.append(c.data))  # type: ignore[func-returns-value]
        assert done == "done" and held.lease is not None

    assert acted == [f"c{n}".encode() for n in range(10)]


def test_a_dead_owners_unsettled_commands_reach_the_next_owner_none_lost_none_twice(
    nats: Nats, nats_server: Any
) -> None:
    queue, leases, delivered = CommandQueue(nats), Leases(nats, seconds=1), Delivered(nats)
    a = leases.acquire(ITEM, "a")
    assert a is not None
    for n in range(20):
        queue.send(ITEM, a.epoch, f"comment-{n}", f"c{n}".encode())
    acted: list[tuple[str, bytes]] = []
    owned_by_a = queue.owned(ITEM, ack_wait=1)
    held_a = Held(leases, a)
    for _ in range(8):
        command = owned_by_a.next()
        assert command is not None
        handle(held_a, delivered, owned_by_a, command, lambda c: acted.append(("a", c.data)))  # type: ignore[func-returns-value]
    last = owned_by_a.next()  # "a" pastes the 9th and dies before it records or acknowledges it
    assert last is not None
    acted.append(("a", last.data))
    delivered.record(last.key, "a")  # it got as far as the record: the next owner must not paste it again

    deadline = time.monotonic() + 15  # "a" renews nothing now: its lease runs out and "b" takes the item
    b = None
    while b is None and time.monotonic() < deadline:
        time.sleep(0.2)
        b = leases.acquire(ITEM, "b")
    assert b is not None and b.epoch != a.epoch
    other = Nats.connect([nats_server.url])  # "b" is another machine: its own connection
    try:
        owned_by_b, leases_b, delivered_b = (
            CommandQueue(other).owned(ITEM, ack_wait=1),
            Leases(other, 1),
            Delivered(other),
        )
        held_b = Held(leases_b, b)
        while (command := owned_by_b.next(timeout=2)) is not None:
            handle(held_b, delivered_b, owned_by_b, command, lambda c: acted.append(("b", c.data)))  # type: ignore[func-returns-value]
            assert held_b.lease is not None
    finally:
        other.close()

    assert [data for _, data in acted] == [f"c{n}".encode() for n in range(20)]  # in order, each once
    assert {who for who, data in acted[9:]} == {"b"}


def test_an_owner_back_from_a_partition_acts_on_nothing_of_the_item_it_lost(nats: Nats) -> None:
    queue, leases, delivered = CommandQueue(nats), Leases(nats, seconds=1), Delivered(nats)
    old = leases.acquire(ITEM, "a")
    assert old is not None
    queue.send(ITEM, old.epoch, "comment-1", b"c1")
    owned = queue.owned(ITEM, ack_wait=30)
    command = owned.next()
    assert command is not None
    deadline = time.monotonic() + 15  # "a" is cut off; the item moves to "b"
    taken = None
    while taken is None and time.monotonic() < deadline:
        time.sleep(0.2)
        taken = leases.acquire(ITEM, "b")
    assert taken is not None

    acted: list[Command] = []
    held = Held(leases, old)
    done = handle(held, delivered, owned, command, acted.append)  # type: ignore[arg-type]

    assert (done, held.lease, acted) == ("lost", None, [])
    assert not delivered.seen("comment-1")  # left for "b", its new owner
