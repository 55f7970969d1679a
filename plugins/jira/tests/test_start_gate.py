"""The start gate on a Jira ticket, end to end through ``the-loop daemon run poller --once``, the real ``jira``
library against the fake Jira, real tmux and the fake harness (Jira tickets have no pull requests: the gate and the
model choice)."""

from __future__ import annotations

import json

import pytest
from jira_world import JiraWorld

MARKER = "<!-- the-loop:gate phase-selection -->"


@pytest.fixture
def world(world: JiraWorld) -> JiraWorld:
    world.configure_services()

    def gated(config: dict) -> None:  # type: ignore[type-arg]
        config.update(models=["sonnet", "opus"], effort=["low", "high"])
        config["routing"]["startGate"] = {"enabled": True}

    world.env.edit_config(gated)
    return world


def posted(world: JiraWorld) -> list[str]:
    return [json.dumps(comment["body"]) for comment in world.fake.issues["PROJ-12"].comments]


def test_a_jira_ticket_parks_at_the_gate_and_an_authorized_choice_spawns_with_it(world: JiraWorld) -> None:
    world.poll()  # first sight baselines the thread
    world.fake.add_comment("PROJ-12", "the-loop start", "acc-ok")
    world.poll()
    assert world.local() is None
    gate_comments = [body for body in posted(world) if "the-loop:gate phase-selection" in body or "model: opus" in body]
    assert len(gate_comments) == 1
    state_file = world.work / "docs" / "specs" / "jira-proj-12" / "work-item-state.json"
    assert json.loads(state_file.read_text())["phase"] == "phase-selection"

    world.fake.add_comment("PROJ-12", "the-loop choose model=opus", "acc-stranger")
    world.poll()
    assert world.local() is None

    world.fake.add_comment("PROJ-12", "the-loop choose model=sonnet effort=low", "acc-ok")
    world.poll()
    assert world.local() is not None
    harness = world.harness()
    harness.wait_ready(timeout=20)
    argv = harness.records("start")[0]["argv"]
    assert argv[argv.index("--model") + 1] == "sonnet" and argv[argv.index("--effort") + 1] == "low"
    decision = json.loads(state_file.read_text())["decisions"][-1]
    assert (decision["by"], decision["provider"]) == ("acc-ok", "jira")
