"""Kill points of the webhook path (ARCHITECTURE §8, issue 6): the process dies with SIGKILL at a named point while a
signed comment is on its way into a live session; after the restart (the real ``gh-webhook`` daemon, routing on) the
comment reaches the pane

- after the inbox fsync (the 202 was sent, nothing routed yet) — exactly once;
- after enqueue (the router handed it to the dispatcher, nothing pasted yet) — exactly once;
- between the paste and the ``recentDeliveries`` write — at most twice: the restart cannot tell that the paste
  happened, and pastes it again rather than risk losing a person's comment (at-least-once, never a third time).

A GitHub redelivery of the same comment after the restart is a duplicate (its dedupe key) and never pasted again.
The receiver that accepts the deliveries runs with routing off; ``gh_route_driver.py`` routes with the real router,
dispatcher and tmux and kills itself at the named point.
"""

from __future__ import annotations

import signal

import pytest
from gh_world import MakeWorld

NO_REACTIONS = {"reactions": {"enabled": False}}


@pytest.mark.parametrize(
    ("point", "pastes"),
    [("after-inbox-fsync", 1), ("after-enqueue", 1), ("between-paste-and-record", 2)],
)
def test_kill_points_deliver_exactly_once_or_at_most_twice(gh_world: MakeWorld, point: str, pastes: int) -> None:
    world = gh_world(enabled=False, **NO_REACTIONS)
    world.comment("the-loop start")
    assert world.route().returncode == 0
    harness = world.harness()
    harness.wait_ready(timeout=20)
    assert len(harness.submitted()) == 1  # the boot prompt

    payload = world.comment("please add tests")
    key = f"github:comment:{payload['comment']['node_id']}"
    assert [entry["key"] for entry in world.pending()] == [key]  # fsync'd before the 202
    if point == "after-inbox-fsync":
        world.receiver.stop(signal.SIGKILL)
    else:
        killed = world.route(kill_at=f"{point}:{key}")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        world.receiver.stop()
    if point == "between-paste-and-record":
        assert sum("please add tests" in text for text in harness.wait_for_submitted(2, timeout=20)) == 1
    else:
        assert len(harness.submitted()) == 1  # nothing reached the pane before the kill

    world.start_receiver(enabled=True)  # the restart: the real daemon routes what the inbox still holds
    world.settled(timeout=30)
    world.comment("after the restart")  # the item carries on; also proves the earlier one was worked through
    texts = harness.wait_for_submitted(1 + pastes + 1, timeout=20)
    assert "after the restart" in texts[-1]
    world.receiver.post("issue_comment", payload)  # GitHub redelivers the same comment: a duplicate
    world.settled(timeout=30)
    assert world.events("routing.dropped")[-1]["reason"] == "duplicate-delivery"
    submitted = harness.submitted()
    assert sum("please add tests" in text for text in submitted) == pastes
    assert len(submitted) == 1 + pastes + 1
    assert len(harness.records("start")) == 1  # one conversation throughout: no respawn
