"""The gateway's routing decisions (issue 22) against a real ``nats-server``: what it drops, what waits, which
worker a new item goes to (addressed, scope, capacity), and that an owned item's events all go to its owner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import count
from typing import Any

import pytest

from the_loop.config import load_config
from the_loop.fleet import Fleet, connect
from the_loop.fleet.items import item_key
from the_loop.fleet.workers import Worker
from the_loop.inbox import InboxEntry
from the_loop.routing.gateway import GatewayRouter, addresses
from the_loop.testing import LoopEnv
from the_loop.testing.world import REF, comment_event

_ids = count(1)


@pytest.fixture
def gateway(loop_env: LoopEnv, plugin_host: Any, nats_server: Any) -> Iterator[tuple[GatewayRouter, Fleet]]:
    loop_env.write_config(
        {
            "version": "0.12.0",
            "repositories": ["octo/repo"],
            "routing": {"enabled": True, "authorizedUsers": ["octocat"], "spawnOnUnmatched": "labeled"},
            "instance": {"name": "gw", "role": "gateway"},
            "fleet": {"nats": {"servers": [nats_server.url]}, "leaseSeconds": 5},
        }
    )
    config = load_config(loop_env.config_path, plugin_host)
    fleet = connect(config.core.fleet)
    router = GatewayRouter(lambda: config, lambda: fleet)
    router.calm_until = 0.0
    yield router, fleet
    fleet.close()


def entry(body: str, **fields: Any) -> InboxEntry:
    event = comment_event(next(_ids), body, **fields)
    data = event.inbox_entry()
    return InboxEntry("name", event.dedupe_key, data, 0, 0.0, {"entry": data})


def beat(fleet: Fleet, name: str, capacity: int = 5, live: int = 0, scope: str = "open") -> None:
    fleet.workers.beat(Worker(name, capacity, live, host=f"{name}.internal", scope=scope))


def assigned(fleet: Fleet, name: str) -> list[str]:
    """The items the gateway told worker ``name`` about, in order."""
    queue = fleet.assign.owned(name, ack_wait=5)
    found = []
    while (notice := queue.next(timeout=0.5)) is not None:
        found.append(json.loads(notice.data)["workItem"])
        queue.ack(notice)
    return found


def commands(fleet: Fleet, ref: str = REF) -> list[str]:
    """The dedupe keys queued for ``ref``'s owner, in order."""
    owned = fleet.commands.owned(item_key(ref), ack_wait=5)
    found = []
    while (command := owned.next(timeout=0.5)) is not None:
        found.append(command.key)
        owned.ack(command)
    return found


def test_a_start_goes_to_the_worker_with_the_most_room_and_every_later_event_to_it(gateway: Any) -> None:
    router, fleet = gateway
    beat(fleet, "w1", capacity=5, live=4)
    beat(fleet, "w2", capacity=5, live=1)
    start = entry("the-loop start")
    later = entry("more detail", actor="stranger")  # the owner decides about strangers and collaborators

    assert router(start).reason == "forwarded"
    assert router(later).reason == "forwarded"

    assert assigned(fleet, "w2") == [REF] and assigned(fleet, "w1") == []
    assert commands(fleet) == [start.key, later.key]


def test_what_cannot_start_an_unowned_item_is_dropped_and_assigns_nothing(gateway: Any) -> None:
    router, fleet = gateway
    beat(fleet, "w1")
    assert router(entry("the-loop start", actor="stranger")).reason == "unauthorized-actor"
    assert router(entry("just a comment")).reason == "awaiting-start"
    assert router(entry("the-loop stop")).reason == "no-session"
    assert router(entry("the-loop start", repository="other/repo")).reason == "undeclared-repository"
    assert assigned(fleet, "w1") == []
    # An unlabelled start is the owner's to refuse, with the reply one machine gives: it is assigned.
    assert router(entry("the-loop start", labels=())).reason == "forwarded"
    assert assigned(fleet, "w1") == [REF]


def test_instance_addresses_and_scopes_decide_who_takes_new_work(gateway: Any) -> None:
    router, fleet = gateway
    beat(fleet, "w1", capacity=9)
    beat(fleet, "w2", capacity=1, scope="addressed")
    beat(fleet, "w3", capacity=9, scope="locked")

    assert router(entry("the-loop start instance:w2", ref="fake:octo/repo#1")).reason == "forwarded"
    assert router(entry("the-loop start", ref="fake:octo/repo#2")).reason == "forwarded"
    assert router(entry("the-loop start instance:w3", ref="fake:octo/repo#3")).status == "queued"  # locked
    assert router(entry("the-loop start instance:gone", ref="fake:octo/repo#4")).status == "queued"  # not live
    two = router(entry("the-loop start instance:w1 instance:w2", ref="fake:octo/repo#5"))
    assert two.reason == "conflicting-addresses"

    assert assigned(fleet, "w2") == ["fake:octo/repo#1"]  # addressed: only what names it
    assert assigned(fleet, "w1") == ["fake:octo/repo#2"]
    assert assigned(fleet, "w3") == []
    assert addresses("the-loop start instance:a, instance:a and xinstance:b") == ["a"]


def test_a_full_fleet_or_an_unreachable_nats_keeps_the_event_waiting_without_an_attempt(gateway: Any) -> None:
    router, fleet = gateway
    beat(fleet, "w1", capacity=1, live=1)
    full = router(entry("the-loop start"))
    assert (full.status, full.reason) == ("queued", "no-worker")

    fleet.nats.close()
    away = router(entry("the-loop start", ref="fake:octo/repo#9"))
    assert (away.status, away.reason) == ("queued", "fleet-unreachable")


def test_a_silent_workers_items_move_to_a_live_one_on_their_next_event(gateway: Any) -> None:
    router, fleet = gateway
    beat(fleet, "w1")
    assert router(entry("the-loop start")).reason == "forwarded"
    assert assigned(fleet, "w1") == [REF]
    fleet.nats.run(fleet.workers.kv.delete("w1"))  # w1 goes silent (and it never took the lease)
    beat(fleet, "w2")

    assert router(entry("still there?")).reason == "forwarded"

    assert assigned(fleet, "w2") == [REF]
    moved = fleet.assignments.get(REF)
    assert moved is not None and (moved.worker, moved.previous) == ("w2", "w1")
