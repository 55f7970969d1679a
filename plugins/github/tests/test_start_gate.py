"""The start gate on GitHub, end to end: the real receiver, real PyGithub against the fake GitHub, real tmux and the
fake harness. An armed issue with the gate on gets a checklist and no session; a stranger's choice does nothing; an
authorized choice spawns the session with that model's arguments, recorded and shown in ``sessions list``."""

from __future__ import annotations

import json
from pathlib import Path

from gh_world import REF, MakeWorld

from the_loop.testing import wait_for

MARKER = "<!-- the-loop:gate phase-selection -->"
DECLARED = {"models": ["sonnet", "opus"], "effort": ["low", "high"]}


def checklists(world: object) -> list[str]:
    calls = world.fake.calls("POST", r"/repos/octo/repo/issues/15/comments")  # type: ignore[attr-defined]
    return [call.body["body"] for call in calls if MARKER in call.body["body"]]


def test_the_gate_parks_a_stranger_changes_nothing_and_a_choice_spawns_with_its_model(gh_world: MakeWorld) -> None:
    world = gh_world(extra=DECLARED, startGate={"enabled": True})
    world.comment("the-loop start")
    world.settled()
    assert world.local() is None and world.tmux("has-session", "-t", "loop-github-octo-repo-15").returncode != 0
    [checklist] = checklists(world)
    assert "- [ ] model: opus" in checklist and "- [ ] effort: high" in checklist
    state_file = Path(world.env.tmp) / "work" / "docs" / "specs" / "issue-15" / "work-item-state.json"
    assert json.loads(state_file.read_text())["phase"] == "phase-selection"
    assert [e["effect"] for e in world.events("control.command")] == ["parked"]

    world.comment("the-loop choose model=opus effort=high", login="mallory")
    world.settled()
    assert world.local() is None
    assert world.events("routing.dropped")[-1]["reason"] == "unauthorized-actor"
    assert json.loads(state_file.read_text())["parked"] is not None

    world.comment("the-loop choose model=opus effort=high")
    wait_for(lambda: world.local() is not None, timeout=20)
    harness = world.harness()
    harness.wait_ready(timeout=20)
    world.settled()
    argv = harness.records("start")[0]["argv"]
    assert argv[argv.index("--model") + 1] == "opus" and argv[argv.index("--effort") + 1] == "high"
    own = world.own()
    assert (own["model"], own["effort"]) == ("opus", "high")
    assert own["harnessArgs"][-4:] == ["--model", "opus", "--effort", "high"]
    decision = json.loads(state_file.read_text())["decisions"][-1]
    assert (decision["by"], decision["provider"], decision["source"]) == ("octocat", "github", "comment")
    assert len(checklists(world)) == 1

    listed = world.env.run("sessions", "list")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if REF in line)
    assert "opus (high)" in row
