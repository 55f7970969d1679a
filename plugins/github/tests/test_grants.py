"""Grants typed on the ticket, end to end (issue-307, issue-375): a signed comment → the receiver → the router, on
real tmux with the fake harness and the real PyGithub client against the fake GitHub API. ``add-collaborator``
puts someone on the item's ``collaborators`` list; their comments then reach the session and their control
keywords do nothing."""

from __future__ import annotations

import json
import subprocess

from gh_world import REF, MakeWorld

from the_loop.state import COLLABORATOR_FIELDS
from the_loop.testing import wait_for


def test_an_authorized_add_collaborator_lets_dana_speak_but_not_steer(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    world.comment("the-loop add-collaborator @Dana thanks for helping")
    world.settled()
    [user] = world.portable()["collaborators"]["users"]
    assert user["login"] == "dana" and user["addedBy"] == "octocat" and user["source"] == "comment"
    assert user["note"].startswith("https://") and user["addedAt"].endswith("Z")
    assert world.events("control.command")[-1]["effect"] == "added"
    assert set(user) <= set(COLLABORATOR_FIELDS)  # only the declared fields (seed 004)
    before = len(harness.submitted())
    assert before == 1  # the grant itself was never pasted

    world.comment("dana here: the flaky test is in teardown", login="dana")
    world.settled()
    wait_for(lambda: len(harness.submitted()) == before + 1, timeout=20)
    assert "the flaky test is in teardown" in harness.submitted()[-1]

    world.comment("the-loop stop", login="dana")
    world.settled()
    rejected = world.events("control.rejected")[-1]
    assert (rejected["command"], rejected["reason"], rejected["actor"]) == ("stop", "unauthorized-actor", "dana")
    assert world.own()["status"] == "active" and world.portable()["control"]["command"] == "start"

    world.comment("the-loop add-collaborator @eve", login="dana")  # a collaborator cannot grant
    world.settled()
    assert [u["login"] for u in world.portable()["collaborators"]["users"]] == ["dana"]

    world.comment("the-loop remove-collaborator @dana")
    world.settled()
    assert "collaborators" not in world.portable()
    world.comment("still me", login="dana")
    world.settled()
    assert world.events("routing.dropped")[-1]["reason"] == "unauthorized-actor"
    assert len(harness.submitted()) == before + 1


def test_a_grant_without_a_login_is_refused_with_a_remedy_on_the_ticket(gh_world: MakeWorld) -> None:
    world = gh_world()
    world.start_work()
    world.comment("the-loop add-collaborator please, Dana")
    world.settled()
    assert world.events("control.rejected")[-1]["reason"] == "missing-collaborator"
    bodies = [c["body"] for c in world.fake.comments_on("octo/repo", 15)]
    assert any("add-collaborator @dana" in body and body.startswith("⚠️") for body in bodies)
    assert "collaborators" not in world.portable()


def test_the_cli_grants_and_a_reset_clears_while_cleanup_keeps(gh_world: MakeWorld) -> None:
    world = gh_world()
    world.start_work()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return world.env.run("sessions", *args)

    done = cli("add-collaborator", "--work-item", REF, "Dana", "slack:U0DANA1", "--note", "pairing")
    assert done.returncode == 0, done.stderr
    users = world.portable()["collaborators"]["users"]
    assert all(set(u) <= set(COLLABORATOR_FIELDS) for u in users)
    assert [(u.get("login"), u.get("slack"), u["source"], u["note"]) for u in users] == [
        ("dana", None, "cli", "pairing"),
        (None, "U0DANA1", "cli", "pairing"),
    ]
    again = cli("add-collaborator", "--work-item", REF, "@dana")
    assert again.returncode == 0 and "already" in again.stdout
    bad = cli("add-collaborator", "--work-item", REF, "not_a_login!")
    assert bad.returncode == 1 and bad.stderr.startswith("error:")
    assert cli("cleanup", "--work-item", REF).returncode == 0
    assert world.portable()["collaborators"]["users"][0]["login"] == "dana"  # cleanup keeps tracking
    assert cli("reset", "--work-item", REF).returncode == 0
    assert "collaborators" not in world.portable()
    effects = [e["effect"] for e in world.events("control.command") if e["command"] == "add-collaborator"]
    assert effects == ["added", "already-collaborator"]
    assert json.dumps(world.events("control.rejected")[-1]).count("missing-collaborator") == 1
