"""A fleet on one machine (issue 22): a real ``nats-server``, the gateway and three workers as separate processes
with their own state roots and tmux servers, the fake GitHub, and the fake harness."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_world import FleetWorld

from the_loop.testing import wait_for

COMMENT = re.compile(r"fleet-comment (\d+)-(\d+)")


@pytest.fixture
def fleet(tmp_path: Path, nats_server: Any) -> Iterator[Any]:
    worlds: list[FleetWorld] = []

    def make(**options: Any) -> FleetWorld:
        world = FleetWorld.create(tmp_path, nats_server, **options)
        worlds.append(world)
        world.start()
        return world

    yield make
    for world in worlds:
        world.close()


def comments_in(pasted: list[str], number: int) -> list[int]:
    """The numbers of the fleet comments of item ``number`` among what its session received, in order."""
    found = []
    for text in pasted:
        for item, n in COMMENT.findall(text):
            if int(item) == number:
                found.append(int(n))
    return found


def received(world: FleetWorld, machine: Any, number: int) -> list[int]:
    return comments_in(world.pasted(machine, number), number)


def wait_received(world: FleetWorld, machine: Any, number: int, count: int, timeout: float = 60) -> list[int]:
    """The item's fleet comments in ``machine``'s session once it has at least ``count`` of them."""
    wait_for(lambda: len(received(world, machine, number)) >= count, timeout=timeout, interval=0.3)
    return received(world, machine, number)


def test_a_small_fleet_spreads_items_and_delivers_in_order(fleet: Any) -> None:
    world = fleet(workers=2, numbers=range(101, 105))
    world.arm(range(101, 105))
    wait_for(lambda: all(world.owner(n) is not None for n in range(101, 105)), timeout=60)
    for n in range(3):
        for number in range(101, 105):
            assert world.comment(number, f"fleet-comment {number}-{n}").status_code == 202
    for number in range(101, 105):
        owner = world.owner(number)
        assert owner is not None
        assert wait_received(world, owner, number, 3) == [0, 1, 2]
    assert {world.owner(n).name for n in range(101, 105)} == {"w1", "w2"}  # type: ignore[union-attr]


def delivered_everywhere(world: FleetWorld, numbers: range, count: int) -> dict[int, list[int]]:
    """Each item's fleet comments in its sessions on every worker, waiting until each item has ``count``."""

    def each() -> dict[int, list[int]] | None:
        found = {}
        for number in numbers:
            seen = [n for machine in world.workers for n in received(world, machine, number)]
            if len(seen) < count:
                return None
            found[number] = seen
        return found

    return wait_for(each, timeout=180, interval=0.5)


def test_thirty_items_spread_over_three_workers_each_on_one_and_twenty_comments_each_in_order(fleet: Any) -> None:
    numbers = range(101, 131)
    world = fleet(workers=3, numbers=numbers)
    world.arm(numbers)
    wait_for(lambda: all(world.owner(n) is not None for n in numbers), timeout=120, interval=0.5)
    for n in range(20):
        for number in numbers:
            assert world.comment(number, f"fleet-comment {number}-{n}").status_code == 202

    found = delivered_everywhere(world, numbers, 20)

    assert all(found[number] == list(range(20)) for number in numbers), found  # in order, none lost, none doubled
    assert all(len(world.owners(number)) == 1 for number in numbers)  # no item on two workers
    spread = {machine.name: sum(1 for n in numbers if world.owner(n) is machine) for machine in world.workers}
    assert spread == {"w1": 10, "w2": 10, "w3": 10}, spread  # the most free capacity first: even
    gateway_spawns = [e for e in world.gateway.events() if e["event"] == "session.spawned"]
    assert not gateway_spawns  # the gateway runs no session


def test_a_killed_worker_s_items_move_within_the_lease_and_their_later_comments_reach_new_sessions(
    fleet: Any,
) -> None:
    numbers = range(101, 107)
    world = fleet(workers=3, numbers=numbers, lease_seconds=3)
    world.arm(numbers)
    wait_for(lambda: all(world.owner(n) is not None for n in numbers), timeout=60, interval=0.3)
    for n in range(5):
        for number in numbers:
            world.comment(number, f"fleet-comment {number}-{n}")
    delivered_everywhere(world, numbers, 5)
    victim = world.owner(numbers[0])
    assert victim is not None and victim.process is not None
    moved = [n for n in numbers if world.owner(n) is victim]

    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    killed_at = time.monotonic()
    for n in range(5, 10):
        for number in numbers:
            assert world.comment(number, f"fleet-comment {number}-{n}").status_code == 202

    def new_owner(number: int) -> Any:
        owners = [m for m in world.owners(number) if m is not victim]
        return owners[0] if len(owners) == 1 else None

    wait_for(lambda: all(new_owner(n) is not None for n in moved), timeout=60, interval=0.2)
    took = time.monotonic() - killed_at
    assert took < 3 * 3 + 5, f"the items moved after {took:.1f}s"  # the lease, the sweep, a fresh spawn
    for number in moved:
        owner = new_owner(number)
        assert "stopped answering" in world.boot_prompt(owner, number)  # a fresh session that says why
        before = received(world, victim, number)
        later = wait_received(world, owner, number, 10 - len(before))
        assert before + later == list(range(10)), (before, later)  # in order, none lost, none pasted twice
    for number in [n for n in numbers if n not in moved]:
        assert wait_received(world, world.owner(number), number, 10) == list(range(10))
    failovers = world.gateway.events("fleet.failover")
    assert sorted(e["work_item"] for e in failovers) == sorted(f"github:octo/repo#{n}" for n in moved)


def test_a_worker_cut_off_and_back_acts_on_none_of_the_items_it_lost(fleet: Any) -> None:
    numbers = range(101, 105)
    world = fleet(workers=2, numbers=numbers, lease_seconds=3)
    world.arm(numbers)
    wait_for(lambda: all(world.owner(n) is not None for n in numbers), timeout=60, interval=0.3)
    cut = world.owner(numbers[0])
    assert cut is not None and cut.process is not None
    lost = [n for n in numbers if world.owner(n) is cut]
    before = {n: list(world.pasted(cut, n)) for n in lost}

    cut.process.send_signal(signal.SIGSTOP)  # cut off: it neither beats nor renews, and its leases run out
    try:
        for number in lost:
            world.comment(number, f"fleet-comment {number}-0")
        other = next(m for m in world.workers if m is not cut)
        wait_for(lambda: all(other.session(n) is not None for n in lost), timeout=60, interval=0.3)
        for number in lost:
            world.comment(number, f"fleet-comment {number}-1")
    finally:
        cut.process.send_signal(signal.SIGCONT)  # back: it finds each lease held by another

    for number in lost:
        assert wait_received(world, other, number, 2) == [0, 1]
    wait_for(lambda: len(cut.events("fleet.lease_lost")) >= len(lost), timeout=30, interval=0.3)
    time.sleep(2)  # anything it would still do, it would do now
    for number in lost:
        assert world.pasted(cut, number) == before[number]  # it acted on nothing it lost
        assert world.owners(number) == [other]  # and its own session of the item was closed
    assert not [e for e in cut.events("dispatch.succeeded") if e.get("delivery_id", "").startswith("fleet")]


def test_nats_restarted_mid_run_loses_nothing_that_was_acknowledged_to_github(fleet: Any, nats_server: Any) -> None:
    numbers = range(101, 104)
    world = fleet(workers=2, numbers=numbers, lease_seconds=3)
    world.arm(numbers)
    wait_for(lambda: all(world.owner(n) is not None for n in numbers), timeout=60, interval=0.3)
    owners = {n: world.owner(n) for n in numbers}
    accepted: dict[int, list[int]] = {n: [] for n in numbers}

    def post(n: int) -> None:
        for number in numbers:
            if world.comment(number, f"fleet-comment {number}-{n}").status_code == 202:
                accepted[number].append(n)

    for n in range(3):
        post(n)
    nats_server.stop()
    for n in range(3, 6):  # NATS is away: the gateway keeps them in its inbox, GitHub hears 202 all the same
        post(n)
    nats_server.start()
    for n in range(6, 9):
        post(n)

    for number in numbers:
        assert accepted[number] == list(range(9))
        owner = owners[number]
        assert wait_received(world, owner, number, 9, timeout=90) == list(range(9))  # in order, none lost or doubled
        assert world.owners(number) == [owner]  # nobody lost an item to the restart
    assert world.gateway.events("fleet.fallback")


def test_the_gateway_lists_every_workers_sessions_names_a_silent_one_and_prints_the_ssh_attach_line(
    fleet: Any,
) -> None:
    import json

    numbers = range(101, 105)
    world = fleet(workers=2, numbers=numbers)
    world.arm(numbers)
    wait_for(lambda: all(world.owner(n) is not None for n in numbers), timeout=60, interval=0.3)

    listed = world.gateway.run("sessions", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    owners = {f"github:octo/repo#{n}": world.owner(n).name for n in numbers}  # type: ignore[union-attr]
    assert {row["workItem"]: row["worker"] for row in rows} == owners  # stamped with the worker that has it
    table = world.gateway.run("sessions", "list")
    assert table.stdout.splitlines()[0].split()[0] == "Worker" and "w1" in table.stdout and "w2" in table.stdout

    ref = "github:octo/repo#101"
    owner = world.owner(101)
    attach = world.gateway.run("sessions", "attach", "--work-item", ref)
    assert attach.returncode == 0, attach.stderr
    target = owner.session(101)["tmuxTarget"]  # type: ignore[union-attr,index]
    expected = f"ssh -t {owner.name}.example.internal tmux -L {owner.socket} attach-session -t ={target}"  # type: ignore[union-attr]
    assert attach.stdout.strip() == expected

    silent = next(m for m in world.workers if m is not owner)
    assert silent.process is not None
    silent.process.send_signal(signal.SIGSTOP)  # alive to its heartbeat for a while, but answering nothing
    try:
        partial = world.gateway.run("sessions", "list", "--format", "json")
    finally:
        silent.process.send_signal(signal.SIGCONT)
    assert partial.returncode == 1  # never an empty (or partial) success
    assert f"warning: worker {silent.name} did not answer" in partial.stderr
    assert {row["worker"] for row in json.loads(partial.stdout)} == {owner.name}  # type: ignore[union-attr]
