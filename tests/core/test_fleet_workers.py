"""Worker heartbeats on a real nats-server (:mod:`the_loop.fleet.workers`): a silent worker drops out, and new work
goes to the live worker with the most room, or to the one a start comment names."""

from __future__ import annotations

import time

import pytest

from the_loop.fleet.connection import Nats
from the_loop.fleet.workers import Worker, Workers, choose


@pytest.fixture
def nats(nats_client: Nats) -> Nats:
    return nats_client


def test_live_workers_are_those_still_beating(nats: Nats) -> None:
    workers = Workers(nats, seconds=1)
    workers.beat(Worker("a", capacity=10, live=3, free_memory_mib=4096))
    workers.beat(Worker("b", capacity=10, live=9))
    assert [(w.name, w.free) for w in workers.live()] == [("a", 7), ("b", 1)]
    deadline = time.monotonic() + 15
    while "b" in [w.name for w in workers.live()] and time.monotonic() < deadline:  # "b" went silent
        workers.beat(Worker("a", capacity=10, live=3, free_memory_mib=4096))  # "a" keeps beating
        time.sleep(0.2)
    workers.beat(Worker("a", capacity=10, live=3, free_memory_mib=4096))
    assert [w.name for w in workers.live()] == ["a"]


def test_new_work_goes_to_the_most_room_or_the_one_named() -> None:
    fleet = [Worker("a", 10, 8), Worker("b", 10, 2, 1024), Worker("c", 10, 2, 8192), Worker("d", 4, 4)]
    assert choose(fleet).name == "c"  # type: ignore[union-attr]
    assert choose(fleet, addressed="a").name == "a"  # type: ignore[union-attr]
    assert choose(fleet, addressed="gone") is None
    assert choose([Worker("d", 4, 4)]) is None  # every one full: nobody takes it
