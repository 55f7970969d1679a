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
from collections.abc import Iterator

import pytest
from fake_github import FakeGitHub
from gh_machine import Machine, machine_for

from the_loop.testing import LoopEnv, wait_for


@pytest.fixture
def machine(gh_env: LoopEnv, fake_github: FakeGitHub) -> Iterator[Machine]:
    with machine_for(gh_env, fake_github) as found:
        yield found


@pytest.mark.parametrize(
    ("point", "pastes"),
    [("after-inbox-fsync", 1), ("after-enqueue", 1), ("between-paste-and-record", 2)],
)
def test_kill_points_deliver_exactly_once_or_at_most_twice(machine: Machine, point: str, pastes: int) -> None:
    machine.start(routing=False)
    machine.comment("the-loop start")
    assert machine.route().returncode == 0
    harness = machine.harness()
    harness.wait_ready(timeout=20)
    assert len(harness.submitted()) == 1  # the boot prompt

    payload = machine.comment("please add tests")
    key = f"github:comment:{payload['comment']['node_id']}"
    assert [entry["key"] for entry in machine.pending()] == [key]  # fsync'd before the 202
    if point == "after-inbox-fsync":
        machine.stop(signal.SIGKILL)
    else:
        killed = machine.route(kill_at=f"{point}:{key}")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        machine.stop()
    if point == "between-paste-and-record":
        assert sum("please add tests" in text for text in harness.wait_for_submitted(2, timeout=20)) == 1
    else:
        assert len(harness.submitted()) == 1  # nothing reached the pane before the kill

    machine.start(routing=True)  # the restart: the real daemon routes what the inbox still holds
    wait_for(lambda: not machine.pending(), timeout=30)
    machine.comment("after the restart")  # the item carries on; also proves the earlier one was worked through
    texts = harness.wait_for_submitted(1 + pastes + 1, timeout=20)
    assert "after the restart" in texts[-1]
    assert machine.receiver is not None
    machine.receiver.post("issue_comment", payload)  # GitHub redelivers the same comment: a duplicate
    wait_for(lambda: not machine.pending(), timeout=30)
    assert machine.receiver.events("routing.dropped")[-1]["reason"] == "duplicate-delivery"
    submitted = harness.submitted()
    assert sum("please add tests" in text for text in submitted) == pastes
    assert len(submitted) == 1 + pastes + 1
    assert len(harness.records("start")) == 1  # one conversation throughout: no respawn
