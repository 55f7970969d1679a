"""How a work item ended (seed 004 ``ended``, issue-452): ``outcome`` decided by the documented rule, ``terminal``
copied from the checkout's ``work-item-state.json`` before the close path removes it, cleanup adding a terminal to a
stamp that has none, and a pull request merging after its work item's close completing it.

In-process (``world``: real tmux, the fake harness and the fake ticket provider). The world has no workspace root,
so the work item's checkout is ``routing.spawnWorkdir`` (``work/``), where its ``docs/specs/issue-15/`` lives.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from the_loop.sessions.closing import cleanup, pull_request_ended, work_item_ended
from the_loop.sessions.closing.terminal import EVIDENCE_CAP, outcome
from the_loop.state.registry import Endpoint
from the_loop.testing.world import REF, World

PR_REF = "fake:octo/repo#16"
LIB_PR = "fake:octo/lib#7"
CONFIG = {"models": ["opus", "sonnet"], "effort": ["high"], "routing": {"announce": {"enabled": False}}}


@pytest.fixture
def world(world: World) -> World:
    world.configure(defaults=CONFIG)
    return world


def spec_dir(world: World) -> Path:
    return world.work / "docs" / "specs" / "issue-15"


def write_state(world: World, **fields: Any) -> Path:
    """The work item's ``work-item-state.json`` as a session (or anyone with a pull request) would leave it."""
    path = spec_dir(world) / "work-item-state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "workItem": REF, **fields}))
    return path


def row(ref: str, state: str = "open") -> dict[str, Any]:
    number = int(ref.rpartition("#")[2])
    return {"ref": ref, "url": f"https://tickets.example/pull/{number}", "state": state, "linkedBy": "session"}


def ended(world: World) -> dict[str, Any]:
    return world.config.store.read(REF)["ended"]  # type: ignore[index]


def close(world: World, reason: str = "issue-closed", state_reason: str = "", **kwargs: Any) -> dict[str, Any]:
    work_item_ended(
        world.config,
        REF,
        reason=reason,
        actor=kwargs.pop("actor", "octocat"),
        authorized=kwargs.pop("authorized", False),
        source="webhook",
        state_reason=state_reason,
    )
    return ended(world)


MERGED = {"pullRequests": [{"ref": PR_REF, "state": "merged"}]}
OPEN = {"pullRequests": [{"ref": PR_REF, "state": "open"}]}


@pytest.mark.parametrize(
    ("reason", "terminal", "state_reason", "expected"),
    [
        ("pr-merged", None, "", "completed"),
        ("issue-closed", MERGED, "completed", "completed"),
        ("issue-closed", MERGED, "not_planned", "completed"),  # a merged pull request delivered it regardless
        ("pr-closed", OPEN, "", "cancelled"),
        ("issue-closed", OPEN, "not_planned", "cancelled"),
        ("issue-closed", None, "duplicate", "cancelled"),
        ("issue-closed", OPEN, "completed", "closed-externally"),  # closed by hand, nothing merged on record
        ("issue-closed", {"pullRequests": []}, "", "closed-externally"),
        ("issue-closed", None, "completed", "unknown"),  # no terminal record could be read
        ("deleted", OPEN, "", "unknown"),
    ],
)
def test_the_outcome_rule(reason: str, terminal: dict[str, Any] | None, state_reason: str, expected: str) -> None:
    assert outcome(reason, terminal, state_reason) == expected


def test_a_close_copies_the_filtered_terminal_before_the_checkout_goes_and_completes_on_a_merged_pr(
    world: World,
) -> None:
    world.spawn("go")
    write_state(
        world,
        phase="work",
        model="opus",
        effort="high",
        sessionPerPr="always",
        repos=["octo/repo"],
        decisions=[{"gate": "phase-selection", "by": "dana", "at": "2026-09-01T00:00:00Z"}],
        nodes={"work": {"attempts": 1}},  # not a field the terminal keeps
        pullRequests=[row(PR_REF, "merged"), row(LIB_PR)],
    )
    evidence = spec_dir(world) / "evidence"
    evidence.mkdir()
    (evidence / "after.png").write_bytes(b"\x89PNG")
    (evidence / "report.txt").write_text("ok\n")
    (evidence / ".hidden").write_text("x")
    (evidence / "sub").mkdir()
    outside = world.tmp / "outside.txt"
    outside.write_text("secret\n")
    os.symlink(outside, evidence / "linked.txt")
    stamp = close(world, state_reason="completed")
    assert stamp["outcome"] == "completed"
    terminal = stamp["terminal"]
    assert set(terminal) == {"workItem", "phase", "selections", "pullRequests", "specDir", "evidence", "recordedAt"}
    assert terminal["workItem"] == REF and terminal["phase"] == "work"
    selections = {"model": "opus", "effort": "high", "sessionPerPr": "always", "repos": ["octo/repo"]}
    assert terminal["selections"] == selections
    assert terminal["pullRequests"] == [
        {"ref": PR_REF, "url": "https://tickets.example/pull/16", "state": "merged"},
        {"ref": LIB_PR, "url": "https://tickets.example/pull/7", "state": "open"},
    ]
    assert terminal["specDir"] == "docs/specs/issue-15"
    assert terminal["evidence"] == ["after.png", "report.txt"]  # names of regular files only: no link, no dir
    assert str(world.tmp) not in json.dumps(terminal)  # no path of this machine in a portable record
    [logged] = world.events("work_item.ended")
    assert logged["outcome"] == "completed"


def test_a_hand_edited_file_reaches_the_terminal_only_as_far_as_it_validates(world: World) -> None:
    world.spawn("go")
    write_state(
        world,
        phase="somewhere-else",
        model="gpt-undeclared",
        effort="maximum",
        sessionPerPr="sometimes",
        repos=["../escape", "octo/repo"],
        pullRequests=[{"ref": PR_REF, "state": "merged", "url": "javascript:alert(1)"}, {"ref": "not a ref"}],
    )
    evidence = spec_dir(world) / "evidence"
    evidence.mkdir()
    for index in range(EVIDENCE_CAP + 5):
        (evidence / f"shot-{index:03}.png").write_bytes(b"")
    (evidence / "bad\nname.txt").write_text("")
    terminal = close(world)["terminal"]
    assert terminal["phase"] == "" and terminal["selections"] == {"repos": ["octo/repo"]}
    assert terminal["pullRequests"] == [{"ref": PR_REF, "url": "", "state": "merged"}]
    assert terminal["evidence"] == [f"shot-{index:03}.png" for index in range(EVIDENCE_CAP)]


def test_an_evidence_directory_that_is_a_link_is_not_listed(world: World) -> None:
    write_state(world, phase="work")
    elsewhere = world.tmp / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "private.txt").write_text("x")
    os.symlink(elsewhere, spec_dir(world) / "evidence")
    world.config.store.update_section(REF, "control", {"command": "start", "source": "cli", "actor": "dana"})
    assert close(world)["terminal"]["evidence"] == []


def test_no_checkout_means_no_terminal_and_an_unknown_outcome(world: World, tmp_path: Path) -> None:
    world.configure(workspace={"root": str(tmp_path / "ws")})  # a workspace root, and no checkout made in it
    world.config.store.update_section(REF, "control", {"command": "start", "source": "cli", "actor": "dana"})
    stamp = close(world)
    assert stamp["outcome"] == "unknown" and "terminal" not in stamp
    assert close(world, reason="pr-merged")["outcome"] == "unknown"  # already ended: the first stamp stands


def test_a_corrupt_file_is_no_terminal(world: World) -> None:
    path = write_state(world)
    path.write_text("{not json")
    world.config.store.update_section(REF, "control", {"command": "start", "source": "cli", "actor": "dana"})
    stamp = close(world, state_reason="not_planned")
    assert stamp["outcome"] == "cancelled" and "terminal" not in stamp


def test_a_pull_request_merged_before_the_close_marks_its_row_and_the_close_completes(world: World) -> None:
    world.spawn("go")
    write_state(world, pullRequests=[row(PR_REF)])
    cwd = str(world.work)
    world.config.registry.update(REF, lambda record: record.sessions.update({PR_REF: Endpoint("fake", "", cwd)}))
    assert pull_request_ended(world.config, REF, PR_REF, reason="pr-merged")
    on_disk = json.loads((spec_dir(world) / "work-item-state.json").read_text())
    assert [(r["ref"], r["state"]) for r in on_disk["pullRequests"]] == [(PR_REF, "merged")]
    assert close(world)["outcome"] == "completed"


def test_a_pull_request_merged_after_the_close_completes_the_ended_item(world: World) -> None:
    world.spawn("go")
    write_state(world, pullRequests=[row(PR_REF)])
    world.config.store.update_section(REF, "pullRequests", {PR_REF: {"seenComments": []}})  # its poll ledger
    stamp = close(world, authorized=True)  # cleaned up: the record and the checkout's session are gone
    assert stamp["outcome"] == "closed-externally" and stamp["terminal"]["pullRequests"][0]["state"] == "open"
    assert world.record() is None
    assert pull_request_ended(world.config, REF, PR_REF, reason="pr-merged")
    later = ended(world)
    assert later["outcome"] == "completed" and later["terminal"]["pullRequests"][0]["state"] == "merged"
    [changed] = world.events("work_item.outcome_changed")
    assert (changed["pull_request"], changed["was"], changed["outcome"]) == (PR_REF, "closed-externally", "completed")


def test_a_pull_request_closed_unmerged_after_the_close_changes_no_outcome(world: World) -> None:
    world.spawn("go")
    world.config.store.update_section(REF, "pullRequests", {PR_REF: {"seenComments": []}})
    assert close(world)["outcome"] == "closed-externally"
    assert pull_request_ended(world.config, REF, PR_REF, reason="pr-closed")
    assert ended(world)["outcome"] == "closed-externally" and world.events("work_item.outcome_changed") == []


def test_cleanup_adds_a_terminal_to_a_stamp_that_has_none_while_the_checkout_exists(world: World) -> None:
    world.spawn("go")
    stamp = {"state": "closed", "kind": "issue", "reason": "issue-closed", "at": "2026-09-09T06:10:30Z"}
    world.config.store.update_section(REF, "ended", {**stamp, "outcome": "unknown"})  # stamped with no checkout
    write_state(world, phase="work", pullRequests=[row(PR_REF, "merged")])
    report = cleanup(world.config, REF, actor="dana", source="cli", runner=world.runner)
    assert report.terminal_recorded and not report.errors
    later = ended(world)
    assert later["terminal"]["pullRequests"][0]["state"] == "merged" and later["outcome"] == "completed"
    assert {key: later[key] for key in stamp} == stamp  # the stamp itself is kept
    [cleaned] = world.events("session.cleaned")
    assert cleaned["terminal_recorded"] is True
    again = cleanup(world.config, REF, actor="dana", source="cli", runner=world.runner)
    assert not again.terminal_recorded  # it has one now: never replaced


def test_cleanup_of_an_item_that_has_not_ended_records_no_terminal(world: World) -> None:
    world.spawn("go")
    write_state(world, phase="work")
    report = cleanup(world.config, REF, actor="dana", source="cli", runner=world.runner)
    assert not report.terminal_recorded and "ended" not in (world.config.store.read(REF) or {})
