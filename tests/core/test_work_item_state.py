"""``work-item-state.json`` is agent-writable and proposable by anyone who can open a pull request: every value is
re-validated on read, a bad entry is skipped and the rest honoured (a test per field)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from the_loop.refs import parse_ref
from the_loop.state import StateLayout
from the_loop.state.work_item_state import (
    Allowed,
    WorkItemState,
    parse,
    read,
    relative_path,
    spec_id,
    update,
)

REF = parse_ref("github:octo/repo#7")
ALLOWED = Allowed(
    models=frozenset({"sonnet", "opus"}),
    efforts=frozenset({"low", "high"}),
    repositories=("octo/repo", "octo/lib"),
    session_per_pr="cross-repository",
)
ROW = {"ref": "github:octo/lib#3", "repository": "octo/lib", "number": 3, "linkedBy": "session"}


def read_back(**fields: Any) -> WorkItemState:
    return parse({"version": 1, "workItem": str(REF), **fields}, REF, ALLOWED)


def test_the_spec_directory_is_named_for_the_work_item() -> None:
    assert spec_id(REF) == "issue-7"
    assert spec_id(parse_ref("jira:acme.atlassian.net/PROJ-12")) == "jira-proj-12"
    assert relative_path(REF, "docs/specs") == Path("docs/specs/issue-7/work-item-state.json")


@pytest.mark.parametrize("model", ["gpt-9", "--dangerously-skip-permissions", 7, ["opus"], "opus; rm -rf /"])
def test_an_undeclared_model_is_dropped(model: object) -> None:
    state = read_back(model=model, effort="high")
    assert state.model == "" and state.effort == "high"
    assert any("model" in problem for problem in state.problems)


def test_a_declared_model_and_effort_are_honoured() -> None:
    state = read_back(model="opus", effort="low")
    assert (state.model, state.effort, state.problems) == ("opus", "low", ())


def test_an_undeclared_effort_is_dropped() -> None:
    assert read_back(effort="ultra").effort == ""


@pytest.mark.parametrize("value", ["sometimes", True, ""])
def test_a_session_per_pr_outside_the_three_is_the_operators_default(value: object) -> None:
    state = read_back(sessionPerPr=value)
    assert state.session_per_pr == ""  # "" = no choice: routing.tmux.sessionPerPr applies


def test_a_repository_outside_repositories_is_skipped_and_the_rest_kept() -> None:
    state = read_back(repos=["octo/lib", "evil/repo", "../../etc", "Octo/Repo", "github.com/octo/lib"])
    assert state.repos == ("octo/lib", "octo/repo")
    assert len(state.problems) == 2


def test_any_usable_repository_is_kept_when_repositories_is_unbounded() -> None:
    state = parse({"repos": ["some/where", "not a repo"]}, REF, Allowed())
    assert state.repos == ("some/where",)


def test_a_state_dir_outside_its_derivation_is_recomputed() -> None:
    state = read_back(pullRequests=[{**ROW, "stateDir": "../../../home/victim"}])
    assert state.pull_requests[0].state_dir == "pr-loops/octo__lib/pr-3"
    assert any("recomputed" in problem for problem in state.problems)
    same = read_back(pullRequests=[{"ref": "github:octo/repo#9"}])
    assert same.pull_requests[0].state_dir == "pr-loops/pr-9"


def test_a_self_row_has_no_state_dir() -> None:
    state = read_back(pullRequests=[{"ref": "github:octo/repo#9", "self": True, "stateDir": "pr-loops/pr-9"}])
    assert state.pull_requests[0].is_self and state.pull_requests[0].state_dir == ""


def test_pull_request_rows_that_do_not_parse_are_skipped_and_the_rest_honoured() -> None:
    rows = [
        "github:octo/lib#1",  # not an object
        {"ref": "not a ref"},
        {"ref": "github:evil/repo#2"},  # outside repositories
        {"ref": "github:octo/lib#4", "repository": "octo/repo"},  # names another repository than its ref
        {"ref": str(REF)},  # the work item itself
        {**ROW, "state": "exploded", "linkedBy": "agent", "url": "javascript:alert(1)"},
        {**ROW, "state": "merged"},  # a second row for the same ref: the first wins
    ]
    state = read_back(pullRequests=rows)
    assert [row.ref for row in state.pull_requests] == ["github:octo/lib#3"]
    row = state.pull_requests[0]
    assert (row.state, row.linked_by, row.url) == ("open", "event", "")
    assert len(state.problems) == 5


def test_a_file_naming_another_work_item_is_ignored() -> None:
    state = parse({"workItem": "github:octo/repo#8", "model": "opus"}, REF, ALLOWED)
    assert state.model == "" and "ignored" in state.problems[0]


def test_a_decision_without_provenance_is_skipped() -> None:
    kept = {"gate": "phase-selection", "by": "octocat", "at": "2026-12-01T00:00:00Z", "choices": {"model": "gpt-9"}}
    state = read_back(decisions=[{"gate": "phase-selection", "choices": {"model": "opus"}}, kept])
    assert len(state.decisions) == 1 and state.decisions[0]["choices"] == {}  # its undeclared choice is gone too
    assert state.decided


def test_a_parked_block_naming_an_unknown_gate_is_dropped() -> None:
    assert read_back(parked={"gate": "merge-everything"}).parked is None


def test_an_old_session_block_is_ignored_and_gone_after_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "docs" / "specs" / "issue-7" / "work-item-state.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"workItem": str(REF), "session": {"id": "x"}, "model": "opus", "junk": 1}))
    layout = StateLayout(tmp_path / "state")
    written = update(path, layout, REF, ALLOWED, lambda state: state)
    on_disk = json.loads(path.read_text())
    assert "session" not in on_disk and "junk" not in on_disk and on_disk["model"] == "opus"
    assert read(path, REF, ALLOWED) == written
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_written_file_has_only_declared_keys(tmp_path: Path) -> None:
    from the_loop.state import ATTRIBUTES

    path = tmp_path / "work-item-state.json"
    full = read_back(
        phase="phase-selection",
        parked={"gate": "phase-selection", "reason": "r", "since": "s"},
        decisions=[{"gate": "phase-selection", "by": "o", "at": "t"}],
        sessionPerPr="always",
        model="opus",
        effort="low",
        repos=["octo/lib"],
        pullRequests=[ROW],
    )
    update(path, StateLayout(tmp_path / "state"), REF, ALLOWED, lambda _: full)
    declared = {a.key for a in ATTRIBUTES if a.file == "repository"}
    assert set(json.loads(path.read_text())) == declared
