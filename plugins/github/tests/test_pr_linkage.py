"""Pull request linkage and CI events at the plugin's edge (A §2.3 X3 to X5, §2.8 M8): which refs an event names, which
of them rest on the branch convention alone, what GitHub's GraphQL closing references add, and which CI results are
worth acting on — on real payloads, and for GraphQL against the fake GitHub API."""

from __future__ import annotations

from typing import Any

import gh_payloads as g
import pytest
from fake_github import FakeGitHub

from the_loop.models import InboundEvent
from the_loop.refs import parse_ref
from the_loop_github.linkage import closing_references
from the_loop_github.normalize import normalize

PR = parse_ref("github:octo/repo#20")


def norm(event: str, payload: dict[str, Any]) -> InboundEvent:
    result = normalize(event, "d-1", payload)
    assert isinstance(result, InboundEvent), result
    return result


def test_x5_a_ref_only_the_branch_names_is_unconfirmed() -> None:
    payload = g.adapt(g.load("pull_request.opened"), number=30, sender="octocat")
    payload["pull_request"].update(body="Fixes #15", head={**payload["pull_request"]["head"], "ref": "feat/issue-999"})
    event = norm("pull_request", payload)
    assert event.work_items == ("github:octo/repo#999", "github:octo/repo#15", "github:octo/repo#30")
    assert event.unconfirmed == ("github:octo/repo#999",)
    payload["pull_request"]["body"] = "Fixes #999"  # a keyword confirms what the branch says
    assert norm("pull_request", payload).unconfirmed == ()


def test_x3a_closing_references_keep_each_nodes_repository_and_skip_the_pull_request_itself() -> None:
    nodes = [
        {"number": 15, "repository": {"nameWithOwner": "octo/repo"}},
        {"number": 7, "repository": {"name": "lib", "owner": {"login": "octo"}}},  # issue-183: another repository
        {"number": 3, "url": "https://github.com/octo/other/issues/3"},
        {"number": 4},  # no repository at all: the pull request's
        {"number": 20, "repository": {"nameWithOwner": "octo/repo"}},  # itself
        {"number": "x"},
    ]
    data = {"data": {"repository": {"pullRequest": {"closingIssuesReferences": {"nodes": nodes}}}}}
    assert [str(ref) for ref in closing_references(data, PR) or []] == [
        "github:octo/repo#15",
        "github:octo/lib#7",
        "github:octo/other#3",
        "github:octo/repo#4",
    ]
    assert closing_references({"data": {"repository": None}}, PR) is None
    ghe = parse_ref("github:ghe.example/octo/repo#20")
    assert str((closing_references(data, ghe) or [])[0]) == "github:ghe.example/octo/repo#15"


def test_x3a_the_provider_asks_graphql_and_a_failure_is_no_answer(provider: Any, fake_github: FakeGitHub) -> None:
    fake_github.closes("octo/repo", 20, ("octo/repo", 15), ("octo/lib", 7))
    assert [str(ref) for ref in provider.delivered_items(PR)] == ["github:octo/repo#15", "github:octo/lib#7"]
    call = fake_github.calls("POST", "/graphql")[-1]
    assert call.body["variables"] == {"owner": "octo", "name": "repo", "number": 20} and call.login == "the-loop-bot"
    assert provider.delivered_items(parse_ref("github:octo/repo#15")) is None  # an issue: GitHub says NOT_FOUND
    fake_github.fault("POST", "/graphql", status=502)
    assert provider.delivered_items(PR) is None
    fake_github.clear_faults()
    fake_github.fault("POST", "/graphql", status=0)  # the connection drops
    assert provider.delivered_items(PR) is None


def test_x5_existence_answers_are_cached_up_to_256_and_only_definite_ones(
    provider: Any, fake_github: FakeGitHub
) -> None:
    from the_loop.routing.router import EXISTENCE_CACHE_SIZE, Router

    router = Router(provider.config)
    fake_github.add_issue("octo/repo", 1000)
    assert router._exists(parse_ref("github:octo/repo#1000")) is True
    fake_github.fault("GET", r"/repos/octo/repo/issues/1001", status=503, times=1)
    assert router._exists(parse_ref("github:octo/repo#1001")) is None  # not an answer: asked again next time
    assert router._exists(parse_ref("github:octo/repo#1001")) is False  # the fake's definite 404
    for number in range(2000, 2000 + EXISTENCE_CACHE_SIZE):
        assert router._exists(parse_ref(f"github:octo/repo#{number}")) is False
    asked = len(fake_github.calls("GET", r"/repos/octo/repo/issues/\d+"))
    assert len(router._existence) == EXISTENCE_CACHE_SIZE == 256
    assert router._exists(parse_ref(f"github:octo/repo#{2000 + EXISTENCE_CACHE_SIZE - 1}")) is False  # cached
    assert router._exists(parse_ref("github:octo/repo#1000")) is True  # the oldest was evicted: asked again
    assert len(fake_github.calls("GET", r"/repos/octo/repo/issues/\d+")) == asked + 1


def test_x3a_no_token_means_no_graphql_call(provider: Any, fake_github: FakeGitHub, monkeypatch: Any) -> None:
    monkeypatch.delenv("GH_TOKEN")
    assert provider.delivered_items(PR) is None
    assert not fake_github.calls("POST", "/graphql")


def test_x4_ci_events_name_their_pull_requests_and_the_issues_their_branches_name() -> None:
    run = g.adapt(g.load("check_run.completed"))
    run["check_run"]["check_suite"]["head_branch"] = "fix/issue-15"
    event = norm("check_run", run)
    assert event.work_items == ("github:octo/repo#2", "github:octo/repo#15")
    assert event.pull_request == "github:octo/repo#2" and event.unconfirmed == ("github:octo/repo#15",)
    suite = g.adapt(g.load("check_suite.completed"))
    suite["check_suite"]["head_branch"] = "issue/16"
    assert norm("check_suite", suite).work_items == ("github:octo/repo#2", "github:octo/repo#16")
    workflow = g.adapt(g.load("workflow_run.completed"))
    workflow["workflow_run"]["head_branch"] = "Issue-17-docs"
    workflow["workflow_run"]["head_repository"]["full_name"] = "Octo/Repo"  # (GitHub's example names another)
    assert norm("workflow_run", workflow).work_items == ("github:octo/repo#17",)
    status = g.adapt(g.load("status"))
    status["branches"] = [{"name": "main"}, {"name": "issue-18"}, {"name": 5}]
    status_event = norm("status", status)
    assert status_event.work_items == ("github:octo/repo#18",) and status_event.pull_request is None
    assert status_event.unconfirmed == ("github:octo/repo#18",)


def test_x4_a_fork_branch_names_no_issue_here() -> None:
    """A fork's branch is named by an outsider: ``issue-15`` there routes nothing to #15 here (its PR still counts)."""
    workflow = g.adapt(g.load("workflow_run.completed"))
    workflow["workflow_run"].update(head_branch="issue-15", head_repository={"full_name": "mallory/repo"})
    assert norm("workflow_run", workflow).work_items == ()
    suite = g.adapt(g.load("check_suite.completed"))
    suite["check_suite"].update(head_branch="issue-15", head_repository={"full_name": "mallory/repo"})
    assert norm("check_suite", suite).work_items == ("github:octo/repo#2",)
    run = g.adapt(g.load("check_run.completed"))
    run["check_run"]["check_suite"].update(head_branch="issue-15", head_repository={"full_name": "mallory/repo"})
    assert norm("check_run", run).work_items == ("github:octo/repo#2",)
    run["check_run"]["check_suite"]["head_repository"] = {"full_name": "octo/repo"}  # its own branch: named
    assert norm("check_run", run).work_items == ("github:octo/repo#2", "github:octo/repo#15")


@pytest.mark.parametrize(
    ("event", "field", "value", "expected"),
    [
        ("check_run", "conclusion", "failure", "failure"),
        ("check_run", "conclusion", "timed_out", "failure"),
        ("check_run", "conclusion", "action_required", "failure"),
        ("check_run", "conclusion", "startup_failure", "failure"),
        ("check_run", "conclusion", "success", "success"),
        ("check_run", "conclusion", "cancelled", "cancelled"),
        ("check_suite", "conclusion", "failure", "summary"),  # the suite's failing runs arrive on their own
        ("workflow_run", "conclusion", "failure", "summary"),
        ("status", "state", "failure", "failure"),
        ("status", "state", "error", "failure"),
        ("status", "state", "pending", "pending"),
    ],
)
def test_m8_only_failing_checks_and_statuses_conclude_failure(
    event: str, field: str, value: str, expected: str
) -> None:
    name = "status" if event == "status" else f"{event}.completed"
    payload = g.adapt(g.load(name))
    container = payload if event == "status" else payload[event]
    container[field] = value
    if event == "workflow_run":
        container["status"] = "completed"
    payload["action"] = "completed" if event != "status" else payload.get("action")
    assert norm(event, payload).conclusion == expected


def test_m8_requested_actions_and_reruns_are_not_routed() -> None:
    payload = g.adapt(g.load("check_run.completed"))
    for action in ("rerequested", "requested_action", "created"):
        payload["action"] = action
        assert normalize("check_run", "d-1", payload).reason == "ignored-action"  # type: ignore[union-attr]


def test_non_ci_events_carry_no_conclusion() -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15, body="hi", login="octocat", pull_request=False)
    assert norm("issue_comment", payload).conclusion == ""
