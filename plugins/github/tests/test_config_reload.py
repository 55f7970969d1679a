"""A running daemon follows edits to its config file without a restart (A25, issue-222): the receiver's router and
the poller each act on the config in force, and a broken edit keeps the last good one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import yaml
from test_end_to_end import Loop, loop, start_work  # noqa: F401  (loop: the receiver fixture)
from test_poll import REPO, World, world  # noqa: F401  (world: the poller fixture)

from the_loop.testing import LoopEnv, wait_for


def edit_config(env: LoopEnv, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the config file the way an operator's editor does: a new text in place."""
    config = yaml.safe_load(env.config_path.read_text())
    change(config)
    env.write_config(config)


def test_a25_dropping_a_user_from_the_config_applies_to_their_next_comment_without_a_restart(
    loop: Callable[..., Loop],  # noqa: F811  (the fixture imported above)
) -> None:
    machine = loop()
    harness = start_work(machine)
    pid = machine.receiver.process.pid

    edit_config(machine.env, lambda c: c["routing"].update(authorizedUsers=["hubot"]))
    machine.comment("please add tests")
    machine.settled()
    dropped = [e for e in machine.events("routing.dropped") if e["reason"] == "unauthorized-actor"]
    assert [e["actor"] for e in dropped] == ["octocat"]
    assert len(harness.submitted()) == 1  # only the boot prompt
    assert [e["changed"] for e in machine.events("config.reloaded")] == [["routing"]]

    # A broken edit is reported once and changes nothing: octocat stays dropped under the last good config.
    machine.env.config_path.write_text(machine.env.config_path.read_text() + "routing: [unclosed\n")
    machine.comment("still there?")
    machine.settled()
    failed = machine.events("config.reload-failed")
    assert len(failed) == 1 and str(machine.env.config_path) in failed[0]["error"]
    assert len([e for e in machine.events("routing.dropped") if e["reason"] == "unauthorized-actor"]) == 2

    # Putting octocat back lets the next comment through, into the same live session.
    edit_config_text = machine.env.config_path.read_text().replace("routing: [unclosed\n", "")
    machine.env.config_path.write_text(edit_config_text.replace("- hubot", "- octocat"))
    machine.comment("welcome back")
    assert "welcome back" in harness.wait_for_submitted(2, timeout=20)[-1]
    assert machine.receiver.process.pid == pid and machine.receiver.process.poll() is None
    assert len(machine.events("daemon.started")) == 1


def test_issue_222_a_running_poller_reads_a_repository_added_to_the_config(
    world: Callable[..., World],  # noqa: F811  (the fixture imported above)
) -> None:
    w = world()
    w.fake.add_issue(REPO, 1, labels=["the-loop: auto-execute"], author="alice")
    w.fake.add_issue("octo/other", 2, labels=["the-loop: auto-execute"], author="alice")
    process = w.start()
    wait_for(lambda: any(call.path.startswith("/repos/octo/repo/issues") for call in w.fake.calls("GET")), timeout=30)
    time.sleep(1.5)  # a cycle or two more, all under the old config
    assert not [call for call in w.fake.calls("GET") if call.path.startswith("/repos/octo/other")]

    edit_config(w.env, lambda c: c.update(repositories=[REPO, "octo/other"]))
    wait_for(lambda: any(c.path.startswith("/repos/octo/other/issues") for c in w.fake.calls("GET")), timeout=30)
    wait_for(lambda: w.session(1) is not None, timeout=30)
    assert process.poll() is None and len(w.events("poller.started")) == 1
    assert [e["changed"] for e in w.events("config.reloaded")] == [["repositories"]]
