"""The start gate and the model choice, through the router and the dispatcher on real tmux with the fake harness and
the fake ticket provider: an armed item parks with a checklist and no session, an authorized choice spawns it with
that model's arguments, a stranger's changes nothing, and the choice survives a respawn."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from the_loop.sessions import gate
from the_loop.state.work_item_state import START_GATE
from the_loop.testing.harness import FakeHarness
from the_loop.testing.world import REF, World

GATED = {
    "repositories": ["octo/repo", "octo/lib"],
    "models": ["sonnet", "opus"],
    "effort": ["low", "high"],
    "routing": {
        "enabled": True,
        "spawnOnUnmatched": "labeled",
        "authorizedUsers": ["octocat"],
        "startGate": {"enabled": True},
        "tmux": {"resumeProbeSeconds": 0.3},
    },
}


@pytest.fixture
def world(world: World) -> World:
    world.configure(defaults=GATED)
    return world


def state_file(world: World) -> Path:
    return world.work / "docs" / "specs" / "issue-15" / "work-item-state.json"


def state(world: World) -> dict[str, Any]:
    return json.loads(state_file(world).read_text())


def say(world: World, body: str, actor: str = "octocat") -> Any:
    return world.router.handle(world.inbound_event(body, actor=actor))


def launched(world: World) -> tuple[FakeHarness, list[str]]:
    harness = world.harness()
    harness.wait_ready(screen=lambda: world.runner.capture(world.own().tmux_target))
    return harness, harness.records("start")[-1]["argv"]


def parked(world: World) -> None:
    outcome = say(world, "the-loop start")
    assert outcome.reason == "control-executed", outcome
    assert world.record() is None, "a parked item has no session"


def test_an_armed_item_parks_with_one_checklist_and_no_session(world: World) -> None:
    parked(world)
    checklists = [body for body in world.comments() if gate.MARKER in body]
    assert len(checklists) == 1
    body = checklists[0]
    for line in (
        "- [ ] model: sonnet",
        "- [ ] model: opus",
        "- [ ] effort: high",
        "- [x] sessionPerPr: cross-repository",
    ):
        assert line in body
    assert "- [x] repo: octo/repo" in body and "- [ ] repo: octo/lib" in body
    recorded = state(world)
    assert recorded["phase"] == START_GATE
    assert recorded["parked"]["gate"] == START_GATE and recorded["parked"]["comment"]
    assert [e["effect"] for e in world.events("control.command")] == ["parked"]
    assert len(world.events("session.spawn_deferred")) == 1

    assert say(world, "and another thing").reason == "spawn-deferred"  # settled: no second checklist, no session
    assert len([body for body in world.comments() if gate.MARKER in body]) == 1
    assert world.record() is None
    assert len(world.events("session.spawn_deferred")) == 2


def test_a_strangers_choice_changes_nothing_and_is_logged(world: World) -> None:
    parked(world)
    before = state_file(world).read_bytes()
    outcome = say(world, "the-loop choose model=opus", actor="mallory")
    assert outcome.reason == "unauthorized-actor"
    assert state_file(world).read_bytes() == before
    assert world.record() is None
    dropped = world.events("routing.dropped")[-1]
    assert dropped["reason"] == "unauthorized-actor" and dropped["actor"] == "mallory"


def test_an_authorized_choice_spawns_with_the_models_arguments(world: World) -> None:
    parked(world)
    outcome = say(world, "the-loop choose model=opus effort=high")
    assert outcome.reason == "control-executed", outcome
    _, argv = launched(world)
    assert argv[argv.index("--model") + 1] == "opus" and argv[argv.index("--effort") + 1] == "high"
    assert argv.index("--model") < argv.index("--effort")
    own = world.own()
    assert (own.model, own.effort) == ("opus", "high")
    assert own.harness_args[-4:] == ["--model", "opus", "--effort", "high"]
    recorded = state(world)
    assert recorded["phase"] == "work" and recorded["parked"] is None
    assert recorded["model"] == "opus" and recorded["effort"] == "high"
    decision = recorded["decisions"][-1]
    assert decision["gate"] == START_GATE and decision["by"] == "octocat" and decision["source"] == "comment"
    assert decision["choices"] == {"model": "opus", "effort": "high"}
    assert world.events("session.spawned")[-1]["model"] == "opus"
    assert [e["effect"] for e in world.events("control.command")] == ["parked", "started"]


def test_a_ticked_copy_of_the_checklist_answers_the_gate(world: World) -> None:
    parked(world)
    checklist = next(body for body in world.comments() if gate.MARKER in body)
    reply = "\n".join(
        "> " + line.replace("- [ ] model: sonnet", "- [x] model: sonnet")
        for line in checklist.splitlines()
        if line.startswith("- [")
    )
    assert say(world, reply).reason == "control-executed"
    _, argv = launched(world)
    assert argv[argv.index("--model") + 1] == "sonnet"
    assert state(world)["decisions"][-1]["choices"]["repos"] == ["octo/repo"]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("the-loop choose model=gpt-9", "model 'gpt-9' is not offered (offered: sonnet, opus)"),
        ("the-loop choose repos=evil/repo", "repository 'evil/repo' is not one this installation works on"),
        ("the-loop choose", "it chose nothing"),
        ("- [x] model: sonnet\n- [x] model: opus", "model: tick one box, not sonnet and opus"),
    ],
)
def test_a_bad_choice_is_refused_on_the_ticket_and_the_item_stays_parked(world: World, body: str, said: str) -> None:
    parked(world)
    outcome = say(world, body)
    assert outcome.error == "bad-choice", outcome
    assert said in world.comments()[-1]
    assert state(world)["parked"] is not None and world.record() is None


def test_with_the_gate_off_the_start_comment_chooses(world: World) -> None:
    world.configure(startGate={"enabled": False})
    assert say(world, "the-loop start model=sonnet effort=low").reason == "control-executed"
    _, argv = launched(world)
    assert argv[argv.index("--model") + 1] == "sonnet" and argv[argv.index("--effort") + 1] == "low"
    decision = state(world)["decisions"][-1]
    assert decision["source"] == "start-comment" and decision["by"] == "octocat"
    assert not [body for body in world.comments() if gate.MARKER in body]


def test_with_the_gate_off_and_no_choice_the_harness_runs_on_its_defaults(world: World) -> None:
    world.configure(startGate={"enabled": False})
    assert say(world, "the-loop start").reason == "control-executed"
    _, argv = launched(world)
    assert "--model" not in argv and "--effort" not in argv
    assert (world.own().model, world.own().effort) == ("", "")


def test_a_start_comment_with_a_choice_answers_the_gate_in_advance(world: World) -> None:
    assert say(world, "the-loop start model=opus").reason == "control-executed"
    _, argv = launched(world)
    assert argv[argv.index("--model") + 1] == "opus"
    assert not [body for body in world.comments() if gate.MARKER in body]


def test_a_respawn_launches_with_the_choice_again(world: World) -> None:
    parked(world)
    say(world, "the-loop choose model=opus")
    launched(world)
    world.runner.kill(world.own().tmux_target)
    assert say(world, "are you there?").status == "respawned"
    argv = world.harness().records("start")[-1]["argv"]
    assert argv[argv.index("--model") + 1] == "opus"


@pytest.mark.parametrize(
    ("edit", "expected_model"),
    [
        ({"model": "gpt-9"}, ""),  # undeclared: the harness's own arguments
        ({"model": "--dangerously-skip-permissions"}, ""),  # never an argv flag
        ({"model": "opus"}, "opus"),  # declared: honoured, whoever wrote it
    ],
)
def test_a_hand_edited_model_is_honoured_only_when_declared(
    world: World, edit: dict[str, Any], expected_model: str
) -> None:
    world.configure(startGate={"enabled": False})
    path = state_file(world)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "workItem": REF, **edit}))
    assert say(world, "the-loop start").reason == "control-executed"
    _, argv = launched(world)
    assert (argv[argv.index("--model") + 1] if "--model" in argv else "") == expected_model
    assert world.own().model == expected_model


def test_a_corrupt_state_file_is_moved_aside_when_the_gate_writes(world: World) -> None:
    path = state_file(world)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    parked(world)
    assert state(world)["phase"] == START_GATE
    aside = [name for name in os.listdir(path.parent) if name.startswith("work-item-state.json.corrupt-")]
    assert len(aside) == 1 and (path.parent / aside[0]).read_text() == "{not json"


def test_the_chosen_repositories_are_named_in_the_boot_prompt(world: World) -> None:
    parked(world)
    assert say(world, "the-loop choose model=sonnet repos=octo/repo,octo/lib").reason == "control-executed"
    harness, _ = launched(world)
    boot = harness.submitted()[0]
    assert "contributes to these repositories" in boot and "octo/repo, octo/lib" in boot
    assert state(world)["repos"] == ["octo/repo", "octo/lib"]


def test_a_new_choice_resumes_the_live_session_on_it_and_the_same_choice_changes_nothing(world: World) -> None:
    parked(world)
    say(world, "the-loop choose model=opus")
    harness, _ = launched(world)
    session_id = world.own().harness_session_id
    assert say(world, "the-loop choose model=sonnet effort=low").reason == "control-executed"
    start = harness.wait_for("start", 2)[-1]
    assert start["mode"] == "resume" and start["session_id"] == session_id  # the same conversation
    argv = start["argv"]
    assert argv[argv.index("--model") + 1] == "sonnet" and argv[argv.index("--effort") + 1] == "low"
    assert (world.own().model, world.own().effort) == ("sonnet", "low")
    changed = world.events("session.choice_changed")[-1]
    assert changed["was"][-2:] == ["--model", "opus"] and changed["model"] == "sonnet"
    assert [e["effect"] for e in world.events("control.command")][-1] == "relaunched"

    assert say(world, "the-loop choose model=sonnet").reason == "control-executed"
    assert [e["effect"] for e in world.events("control.command")][-1] == "recorded"
    assert len(harness.records("start")) == 2
