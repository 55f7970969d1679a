"""Pull requests, reviews and CI results end to end (ingress-routing.md §2.3 X3 to X7, §2.8 M8, §2.11 R3; scenarios A13,
A15, A23 and regressions issue-93, 172, 186, 246, 269, 274, 279, 393, 462): a signed delivery → the real receiver →
the router → the work item's one tmux session running the fake harness, with PyGithub against the fake GitHub API
(GraphQL closing references, the existence check, reactions and replies)."""

from __future__ import annotations

import json
from typing import Any

import gh_payloads
import pytest
from gh_receiver import AUTO_LABEL
from gh_world import REF, TARGET, GitHubWorld, MakeWorld

from the_loop.testing import wait_for

MARKER = "<!-- the-loop:agent-comment -->"
GHOST = "github:octo/repo#999"


def _set_pull_request(payload: dict[str, Any], number: int, body: str, branch: str, labels: list[str]) -> None:
    pull = payload["pull_request"]
    pull.update(number=number, body=body, html_url=f"https://github.com/octo/repo/pull/{number}")
    pull["head"]["ref"] = branch
    pull["labels"] = [{"name": label} for label in labels]


def pr_comment(
    world: GitHubWorld,
    number: int,
    body: str,
    comment_id: int,
    *,
    pull_body: str = "",
    login: str = "octocat",
    repo: str = "octo/repo",
    labels: list[str] | None = None,
) -> dict[str, Any]:
    """An ``issue_comment`` on pull request ``number`` (its conversation tab)."""
    payload = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"),
        repo=repo,
        number=number,
        body=body,
        login=login,
        pull_request=True,
        labels=labels,
    )
    payload = gh_payloads.new_comment(payload, comment_id)
    payload["issue"]["body"] = pull_body
    assert world.receiver.post("issue_comment", payload).status_code == 202
    return payload


def review(
    world: GitHubWorld,
    number: int,
    body: str,
    object_id: int,
    *,
    pull_body: str = "",
    branch: str = "feature",
    labels: list[str] | None = None,
    inline: tuple[str, int] | None = None,
) -> None:
    """A submitted review, or with ``inline`` = (path, line) a review comment, on pull request ``number``."""
    event = "pull_request_review_comment" if inline else "pull_request_review"
    name = "pull_request_review_comment.created" if inline else "pull_request_review.submitted"
    payload = gh_payloads.adapt(gh_payloads.load(name), body=body, login="octocat")
    _set_pull_request(payload, number, pull_body, branch, labels or [])
    target = payload["comment" if inline else "review"]
    target.update(id=object_id, node_id=f"PRR_test{object_id}")
    if inline:
        target.update(path=inline[0], line=inline[1])
    assert world.receiver.post(event, payload).status_code == 202


def fenced(message: str) -> dict[str, Any]:
    return json.loads(message.split("```json\n", 1)[1].rsplit("\n```", 1)[0])


def linked_to_15(world: GitHubWorld) -> Any:
    """Start #15 and link PR #20 to it by a comment on the PR whose body says ``Fixes #15`` (A13)."""
    harness = world.start_work()
    pr_comment(world, 20, "first look", 501, pull_body="Fixes #15")
    harness.wait_for_submitted(2, timeout=20)
    world.settled()
    return harness


# ---------------------------------------------------------------------------------------- X3(a), issue-93/172


def test_x3a_a_pull_request_github_says_closes_the_issue_reaches_its_session_and_stays_there(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    harness = world.start_work()
    world.fake.closes("octo/repo", 20, ("octo/repo", 15))
    pr_comment(world, 20, "nothing in my text links this", 511)  # no keyword, no branch: only GraphQL
    assert "nothing in my text links this" in harness.wait_for_submitted(2, timeout=20)[-1]
    world.settled()
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-20").returncode != 0  # issue-93
    assert "github:octo/repo#20" in world.local()["sessions"]  # type: ignore[index]
    graphql = world.fake.calls("POST", "/graphql")
    assert graphql and graphql[0].body["variables"] == {"owner": "octo", "name": "repo", "number": 20}
    world.fake.add_issue("octo/repo", 16, labels=[AUTO_LABEL])
    world.fake.closes("octo/repo", 20, ("octo/repo", 16))  # issue-172: GitHub's answer changes
    pr_comment(world, 20, "still yours", 512)
    assert "still yours" in harness.wait_for_submitted(3, timeout=20)[-1]
    world.settled()
    assert world.local("github-octo-repo-16") is None


def test_x3a_a_graphql_failure_falls_back_to_the_closing_keywords(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    world.fake.fault("POST", "/graphql", status=502)
    pr_comment(world, 20, "review after a GraphQL outage", 521, pull_body="Fixes #15")
    assert "review after a GraphQL outage" in harness.wait_for_submitted(2, timeout=20)[-1]
    world.settled()
    assert world.fake.calls("POST", "/graphql")  # it was asked, and failing did not drop the event


# ----------------------------------------------------------------------------------------- X5, A15, issue-269


def test_a15_issue_269_a_ghost_branch_ref_is_dropped_and_the_start_binds_the_pull_request_itself(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    world.fake.add_issue("octo/repo", 30, title="Feature", pull_request=True, labels=[AUTO_LABEL])
    review(world, 30, "hello first", 3001, branch="feat/issue-999", labels=[AUTO_LABEL])
    review(world, 30, "the-loop start", 3002, branch="feat/issue-999", labels=[AUTO_LABEL])
    wait_for(lambda: world.local("github-octo-repo-30") is not None, timeout=20)
    world.settled()
    dropped = world.events("routing.linkage_dropped")
    assert dropped and {(e["work_item"], e["source"], e["reason"]) for e in dropped} == {(GHOST, "branch", "not-found")}
    assert world.local("github-octo-repo-999") is None
    assert world.own("github:octo/repo#30")["tmuxTarget"] == "loop-github-octo-repo-30"  # issue-279: the PR itself
    assert len(world.fake.calls("GET", "/repos/octo/repo/issues/999")) == 1  # the answer is cached


@pytest.mark.parametrize("status", [0, 503])
def test_a15_an_unavailable_existence_check_keeps_the_branch_ref(gh_world: MakeWorld, status: int) -> None:
    world = gh_world()
    world.fake.add_issue("octo/repo", 30, title="Feature", pull_request=True, labels=[AUTO_LABEL])
    world.fake.fault("GET", "/repos/octo/repo/issues/999", status=status)
    review(world, 30, "the-loop start", 3101, branch="feat/issue-999", labels=[AUTO_LABEL])
    wait_for(lambda: world.local("github-octo-repo-999") is not None, timeout=20)
    world.settled()
    assert not world.events("routing.linkage_dropped")
    assert world.fake.calls("GET", "/repos/octo/repo/issues/999")


def test_x5_a_live_record_owning_a_ref_needs_no_existence_check(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = linked_to_15(world)
    review(world, 20, "looks fine", 3201, pull_body="Fixes #15", branch="feat/issue-999")
    assert "looks fine" in harness.wait_for_submitted(3, timeout=20)[-1]
    world.settled()
    assert not world.fake.calls("GET", "/repos/octo/repo/issues/999")


def test_x5_when_every_ref_is_missing_the_event_is_settled_as_work_item_not_found(gh_world: MakeWorld) -> None:
    world = gh_world()
    payload = gh_payloads.adapt(gh_payloads.load("status"))
    payload.update(state="failure", branches=[{"name": "feat/issue-999"}])
    delivery = "status-ghost-1"
    assert world.receiver.post("status", payload, delivery=delivery).status_code == 202
    world.settled()
    dropped = world.events("dispatch.dropped")
    assert [(e["reason"], e["delivery_id"]) for e in dropped] == [("work-item-not-found", delivery)]
    assert delivery in world.receiver.accepted_keys()  # settled: kept, never retried
    assert world.tmux("list-sessions").returncode != 0


# ------------------------------------------------------------------------------------ reviews, issue-246/93


def test_issue_246_a_review_and_an_inline_review_comment_reach_the_linked_issues_session(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    harness = linked_to_15(world)
    review(world, 20, "please rename the widget", 4001, pull_body="Fixes #15")
    assert fenced(harness.wait_for_submitted(3, timeout=20)[-1])["review"]["body"] == "please rename the widget"
    review(world, 20, "off by one here", 4002, pull_body="Fixes #15", inline=("src/widget.py", 12))
    comment = fenced(harness.wait_for_submitted(4, timeout=20)[-1])["comment"]
    assert list(comment)[:3] == ["path", "line", "body"]  # file and line before the body
    assert (comment["path"], comment["line"], comment["body"]) == ("src/widget.py", 12, "off by one here")
    world.settled()
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-20").returncode != 0  # issue-93: one session
    # R1: a review comment's reactions go to pulls/comments/{id} (unknown to the fake: a 404 changes nothing)
    assert [call.body["content"] for call in world.fake.calls("POST", r".*/pulls/comments/4002/reactions")] == [
        "eyes",
        "hooray",
    ]


# ---------------------------------------------------------------------------------------- CI, A23, issue-462


def _ci(example: str, **changes: Any) -> dict[str, Any]:
    payload = gh_payloads.adapt(gh_payloads.load(example))
    event = example.split(".")[0]
    run = payload.get(event, payload)
    for pulls in (run.get("pull_requests"), (run.get("check_suite") or {}).get("pull_requests")):
        for pull in pulls or []:
            pull["number"] = 20
    if isinstance(run.get("head_repository"), dict):  # GitHub's example names another repository: a fork's
        run["head_repository"]["full_name"] = payload["repository"]["full_name"]
    run.update(changes)
    return payload


def test_a23_a_failing_check_reaches_the_issue_and_passing_or_summary_results_do_not(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    harness = linked_to_15(world)
    assert world.receiver.post("check_run", _ci("check_run.completed", conclusion="failure", name="unit")).is_success
    message = harness.wait_for_submitted(3, timeout=20)[-1]
    assert fenced(message)["check_run"]["conclusion"] == "failure" and fenced(message)["check_run"]["name"] == "unit"
    for event, payload in [
        ("check_suite", _ci("check_suite.completed", conclusion="success")),
        ("check_suite", _ci("check_suite.completed", conclusion="failure")),
        ("check_run", _ci("check_run.completed", conclusion="success")),
        ("workflow_run", _ci("workflow_run.completed", conclusion="failure", head_branch="issue-15")),
    ]:
        assert world.receiver.post(event, payload).status_code == 202
    world.settled()
    reasons = [e["reason"] for e in world.events("dispatch.dropped")]
    assert reasons.count("ci-not-actionable") == 4
    status = _ci("status", state="error", branches=[{"name": "fix/issue-15"}])
    assert world.receiver.post("status", status).status_code == 202
    assert fenced(harness.wait_for_submitted(4, timeout=20)[-1])["state"] == "error"
    world.settled()
    assert len(harness.submitted()) == 4


# ------------------------------------------------------------------------------------------------- R3, 393


def test_issue_393_a_refusal_with_a_remedy_gets_one_marked_warning_reply_others_only_a_reaction(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    world.start_work()
    before = len(world.fake.comments_on("octo/repo", 15))
    world.comment("the-loop resume")  # nothing is paused
    world.settled()
    assert world.events("control.rejected")[-1]["reason"] == "nothing-to-resume"
    replies = world.fake.comments_on("octo/repo", 15)[before:]
    assert len(replies) == 1 and replies[0]["body"].startswith("⚠️") and MARKER in replies[0]["body"]
    assert "resume" in replies[0]["body"] and replies[0]["user"]["login"] == "the-loop-bot"
    world.fake.add_issue("octo/repo", 17, title="Unlabelled")
    world.comment("the-loop start", number=17)
    world.settled()
    assert world.events("control.rejected")[-1]["reason"] == "spawn-policy"
    assert world.fake.comments_on("octo/repo", 17) == []  # no remedy: only the reaction
    contents = [c.body["content"] for c in world.fake.calls("POST", r"/repos/octo/repo/issues/comments/\d+/reactions")]
    assert contents[-2:] == ["eyes", "confused"]


# ----------------------------------------------------------------------------------------- link-pr, issue-274


def test_issue_274_link_pr_binds_a_pull_request_nothing_links(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = world.start_work()
    world.fake.add_issue("octo/repo", 40, title="Spec", pull_request=True)
    linked = world.env.run("sessions", "link-pr", "--work-item", REF, "--pull-request", "40")
    assert linked.returncode == 0, linked.stderr
    assert "github:octo/repo#40" in linked.stdout and TARGET in linked.stdout
    again = world.env.run("sessions", "link-pr", "--work-item", REF, "--pull-request", "github:octo/repo#40")
    assert again.returncode == 0 and "already linked" in again.stdout
    pr_comment(world, 40, "comment on the spec PR", 541)
    assert "comment on the spec PR" in harness.wait_for_submitted(2, timeout=20)[-1]
    world.settled()
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-40").returncode != 0
    assert [e["pull_request"] for e in world.events("session.pr_linked")] == ["github:octo/repo#40"]


def test_issue_274_link_pr_refuses_bad_input_and_unknown_work_items(gh_world: MakeWorld) -> None:
    world = gh_world()
    for value in ("nope", "0", REF):
        bad = world.env.run("sessions", "link-pr", "--work-item", REF, "--pull-request", value)
        assert bad.returncode == 2 and bad.stderr.strip().startswith("error:") and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
    unknown = world.env.run("sessions", "link-pr", "--work-item", "github:octo/repo#77", "--pull-request", "40")
    assert unknown.returncode == 1 and "no session" in unknown.stderr
    assert world.local("github-octo-repo-77") is None  # nothing written for it


# -------------------------------------------------------------------------------------------------- issue-186


def test_issue_186_a_close_nobody_is_named_for_closes_the_session_and_defers_cleanup(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    world.start_work()
    payload = gh_payloads.adapt(gh_payloads.load("issues.reopened"), number=15, labels=[AUTO_LABEL])
    payload.update(action="closed")
    payload["issue"]["state"] = "closed"
    payload.pop("sender")
    assert world.receiver.post("issues", payload).status_code == 202
    world.settled()
    assert world.events("cleanup.deferred")[0]["reason"] == "no-actor"
    assert world.own()["status"] == "closed" and world.local() is not None  # the local record is kept


def test_issue_393_a_command_a_hook_refuses_gets_one_warning_reply_with_the_hooks_reason(
    gh_world: MakeWorld,
) -> None:
    from gh_refusing_hooks import REASON

    world = gh_world(plugins=("gh_refusing_hooks",))
    world.start_work()
    before = len(world.fake.comments_on("octo/repo", 15))
    world.comment("the-loop pause")
    world.settled()
    assert world.events("control.rejected")[-1]["reason"] == "input-refused"
    assert world.own()["status"] == "active"
    replies = world.fake.comments_on("octo/repo", 15)[before:]
    assert len(replies) == 1 and replies[0]["body"].startswith("⚠️") and MARKER in replies[0]["body"]
    assert "`pause`" in replies[0]["body"] and REASON in replies[0]["body"]


def test_issue_93_a_start_on_a_linked_pull_request_spawns_the_issues_session_and_records_the_pull_request(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    world.fake.add_issue("octo/repo", 20, title="Widget", pull_request=True, labels=[AUTO_LABEL])
    review(world, 20, "the-loop start", 9301, pull_body="Closes #15", labels=[AUTO_LABEL])
    wait_for(lambda: world.local() is not None, timeout=20)
    world.harness().wait_ready(timeout=20)
    world.settled()
    assert world.own()["tmuxTarget"] == TARGET
    assert "github:octo/repo#20" in world.local()["sessions"]  # type: ignore[index]  # X7: recorded on spawn
    assert world.local("github-octo-repo-20") is None
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-20").returncode != 0


def test_a16_merging_a_pull_request_that_is_itself_the_work_item_ends_it(gh_world: MakeWorld) -> None:
    """The other half of issue-101: a pull request started on its own (nothing links it) is the work item, so its
    merge closes the session and stamps ``ended`` — no prompt reaches the session."""
    world = gh_world()
    world.fake.add_issue("octo/repo", 30, title="Feature", pull_request=True, labels=[AUTO_LABEL])
    review(world, 30, "the-loop start", 3101, branch="widget", labels=[AUTO_LABEL])
    wait_for(lambda: world.local("github-octo-repo-30") is not None, timeout=20)
    harness = world.harness("github:octo/repo#30")
    harness.wait_ready(timeout=20)
    world.settled()
    payload = gh_payloads.adapt(gh_payloads.load("pull_request.closed"), number=30, sender="octocat", merged=True)
    _set_pull_request(payload, 30, "", "widget", [AUTO_LABEL])
    assert world.receiver.post("pull_request", payload).status_code == 202
    world.settled()
    [closed] = world.events("session.autoclosed")
    assert (closed["work_item"], closed["reason"], closed["merged"]) == ("github:octo/repo#30", "pr-merged", True)
    portable = json.loads((world.env.root / "portable" / "github-octo-repo-30.json").read_text())
    assert (portable["ended"]["state"], portable["ended"]["kind"]) == ("merged", "pull-request")
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-30").returncode != 0  # cleaned: octocat closed it
    assert len(harness.submitted()) == 1  # only the boot prompt: the close was never pasted


# ------------------------------------------------------------------------------- X6 / issue-172, the binding wins


def test_issue_172_the_recorded_binding_wins_over_another_live_item_github_now_names(gh_world: MakeWorld) -> None:
    world = gh_world()
    harness = linked_to_15(world)
    world.fake.add_issue("octo/repo", 16, title="Another widget", labels=[AUTO_LABEL])
    world.comment("the-loop start", number=16)
    wait_for(lambda: world.local("github-octo-repo-16") is not None, timeout=20)
    other = world.harness("github:octo/repo#16")
    other.wait_ready(timeout=20)
    world.settled()
    world.fake.closes("octo/repo", 20, ("octo/repo", 16))  # GitHub and the body now both name #16, which is live
    pr_comment(world, 20, "which session am I in?", 1721, pull_body="Fixes #16")
    assert "which session am I in?" in harness.wait_for_submitted(3, timeout=20)[-1]
    world.settled()
    assert all("which session am I in?" not in text for text in other.submitted())
    assert "github:octo/repo#20" not in world.local("github-octo-repo-16")["sessions"]  # type: ignore[index]


# ---------------------------------------------------------------------------------------- L1 / L2, issue-183


def test_issue_183_l1_a_qualified_reference_reaches_the_other_repository_and_a_same_numbered_merge_ends_nothing_there(
    gh_world: MakeWorld,
) -> None:
    world = gh_world(repositories=("octo/repo", "octo/lib"))
    world.fake.add_issue("octo/lib", 7, title="Library bug", labels=[AUTO_LABEL])
    world.fake.add_issue("octo/repo", 7, title="Fix the library", pull_request=True)
    start = gh_payloads.adapt(
        gh_payloads.load("issue_comment.created"),
        repo="octo/lib",
        number=7,
        body="the-loop start",
        login="octocat",
        labels=[AUTO_LABEL],
        pull_request=False,
    )
    assert world.receiver.post("issue_comment", gh_payloads.new_comment(start, 7001)).status_code == 202
    wait_for(lambda: world.local("github-octo-lib-7") is not None, timeout=20)
    harness = world.harness("github:octo/lib#7")
    harness.wait_ready(timeout=20)
    world.settled()
    pr_comment(world, 7, "the library fix is up", 7002, pull_body="Fixes octo/lib#7")
    assert "the library fix is up" in harness.wait_for_submitted(2, timeout=20)[-1]
    world.settled()
    assert "github:octo/repo#7" in world.local("github-octo-lib-7")["sessions"]  # type: ignore[index]
    assert world.local("github-octo-repo-7") is None
    payload = gh_payloads.adapt(gh_payloads.load("pull_request.closed"), number=7, sender="octocat", merged=True)
    _set_pull_request(payload, 7, "Fixes octo/lib#7", "fix-lib", [])
    assert world.receiver.post("pull_request", payload).status_code == 202
    world.settled()
    # L1: the merged pull request is octo/repo#7, not octo/lib#7 — the number alone closes nothing
    [kept] = world.events("session.kept_open")
    assert (kept["work_item"], kept["closed_ref"], kept["reason"]) == (
        "github:octo/lib#7",
        "github:octo/repo#7",
        "pr-merged",
    )
    assert not world.events("session.autoclosed") and not world.events("work_item.ended")
    assert world.own("github:octo/lib#7")["status"] == "active"
    assert "ended" not in world.portable("github-octo-lib-7")


def test_l2_a_pull_request_that_is_its_own_work_item_ends_on_merge_after_a_stop_and_a_new_link(
    gh_world: MakeWorld,
) -> None:
    """The pull request was started on its own, then stopped, then its body named an untracked issue: the merge still
    ends the pull request's own work item (the closed object decides), and the named issue is not touched."""
    world = gh_world()
    world.fake.add_issue("octo/repo", 30, title="Feature", pull_request=True, labels=[AUTO_LABEL])
    review(world, 30, "the-loop start", 3301, branch="widget", labels=[AUTO_LABEL])
    wait_for(lambda: world.local("github-octo-repo-30") is not None, timeout=20)
    world.harness("github:octo/repo#30").wait_ready(timeout=20)
    world.settled()
    review(world, 30, "the-loop stop", 3302, branch="widget", labels=[AUTO_LABEL])
    world.settled()
    assert world.own("github:octo/repo#30")["status"] == "closed"
    payload = gh_payloads.adapt(gh_payloads.load("pull_request.closed"), number=30, sender="octocat", merged=True)
    _set_pull_request(payload, 30, "Fixes #5", "widget", [AUTO_LABEL])
    assert world.receiver.post("pull_request", payload).status_code == 202
    world.settled()
    ended = world.portable("github-octo-repo-30")["ended"]
    assert (ended["state"], ended["kind"], ended["reason"], ended["actor"]) == (
        "merged",
        "pull-request",
        "pr-merged",
        "octocat",
    )
    assert world.local("github-octo-repo-30") is None  # octocat merged it: cleaned up
    assert world.portable("github-octo-repo-5") == {} and not world.events("session.kept_open")


# --------------------------------------------------------------------------------- collaborators, issue-307


def test_issue_307_a_collaborator_is_heard_on_a_pull_request_linked_to_their_item_and_only_for_that_item(
    gh_world: MakeWorld,
) -> None:
    world = gh_world()
    harness = world.start_work()
    world.add_sections(collaborators={"users": [{"login": "dana", "addedBy": "octocat"}]})
    world.fake.closes("octo/repo", 20, ("octo/repo", 15))
    pr_comment(world, 20, "dana's review notes", 7101, login="dana")  # no text link: only GitHub names #15
    assert "dana's review notes" in harness.wait_for_submitted(2, timeout=20)[-1]
    world.settled()
    assert world.events("routing.routed")[-1]["collaborator"] is True
    assert len(world.fake.calls("POST", "/graphql")) == 1  # asked once for the grant and the linkage both
    # eve may speak on #17 only; her comment names #17, but the pull request is recorded on #15
    world.add_sections("github-octo-repo-17", ref="github:octo/repo#17", collaborators={"users": [{"login": "eve"}]})
    pr_comment(world, 20, "eve was here", 7102, login="eve", pull_body="Fixes #17")
    world.settled()
    dropped = world.events("routing.dropped")[-1]
    assert (dropped["reason"], dropped["actor"]) == ("unauthorized-actor", "eve")
    assert len(harness.submitted()) == 2


def test_l4_a_linked_pull_request_reopening_leaves_its_ended_issue_ended(gh_world: MakeWorld) -> None:
    world = gh_world()
    linked_to_15(world)
    world.close_issue("mallory")  # #15 ended, its session record kept (closed)
    payload = gh_payloads.adapt(gh_payloads.load("pull_request.reopened"), number=20, sender="octocat")
    _set_pull_request(payload, 20, "Fixes #15", "feature", [])
    assert world.receiver.post("pull_request", payload).status_code == 202
    world.settled()
    assert world.portable()["ended"]["reason"] == "issue-closed"  # only the reopened object's stamp is cleared
    assert not world.events("work_item.reopened")


def test_x7_a_binding_that_cannot_be_written_is_logged_and_never_raises(
    provider: Any, gh_env: Any, mocker: Any
) -> None:
    """The delivery happened before the binding is written: a failed write is one ``session.link_failed`` line and
    nothing else (the injected fault is the disk refusing the record)."""
    from the_loop import events
    from the_loop.refs import parse_ref
    from the_loop.routing.router import Router
    from the_loop.state.registry import Endpoint, SessionRegistry

    log = gh_env.root / "logs" / "events.jsonl"
    events.configure(log, "test")
    try:
        router = Router(provider.config)
        router.registry.update(REF, lambda record: record.sessions.update({REF: Endpoint(harness="fake")}))
        mocker.patch.object(SessionRegistry, "update", side_effect=OSError("No space left on device"))
        router._bind_pull_request(parse_ref(REF), "github:octo/repo#20")
    finally:
        events.configure(None, "cli")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    [failed] = [line for line in lines if line["event"] == "session.link_failed"]
    assert failed["pull_request"] == "github:octo/repo#20" and "No space left" in failed["error"]
    assert not [line for line in lines if line["event"] == "session.pr_linked"]
    assert "github:octo/repo#20" not in router.registry.load(REF).sessions  # type: ignore[union-attr]
