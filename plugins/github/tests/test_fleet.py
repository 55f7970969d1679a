"""A fleet on one machine (issue 22): a real ``nats-server``, the gateway and three workers as separate processes
with their own state roots and tmux servers, the fake GitHub, and the fake harness."""

from __future__ import annotations

import re
import signal
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
        wait_for(lambda o=owner, n=number: len(comments_in(world.pasted(o, n), n)) >= 3, timeout=60)
        assert comments_in(world.pasted(owner, number), number) == [0, 1, 2]
    assert {world.owner(n).name for n in range(101, 105)} == {"w1", "w2"}  # type: ignore[union-attr]


def test_a_killed_workers_item_moves_to_a_fresh_session_that_gets_its_next_comment(fleet: Any) -> None:
    world = fleet(workers=2, numbers=range(101, 102))
    world.arm([101])
    wait_for(lambda: world.owner(101) is not None, timeout=60)
    victim = world.owner(101)
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    assert world.comment(101, "fleet-comment 101-0").status_code == 202
    [other] = [machine for machine in world.workers if machine is not victim]
    wait_for(lambda: comments_in(world.pasted(other, 101), 101) == [0], timeout=60)
    assert "moved to this machine" in world.boot_prompt(other, 101)
    assert other.session(101)["harnessSessionId"] != victim.session(101)["harnessSessionId"]
