"""Sessions per pull request end to end (issue-260, issue 19): signed deliveries → the real receiver → the router →
a pull request in another repository than the issue's gets its own tmux session, running the fake harness in a
checkout of that repository, while one in the issue's own repository reaches the issue's session; PyGithub against
the fake GitHub (GraphQL closing references), each checkout a real git worktree of a local bare repository."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import gh_payloads
from gh_world import REF, TARGET, GitHubWorld, MakeWorld

from the_loop.testing import LoopEnv, bare_repository, wait_for
from the_loop.testing.harness import FakeHarness

LIB = "github:octo/lib#7"
LIB_TARGET = "loop-github-octo-lib-7"
SAME = "github:octo/repo#20"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60).stdout


def two_repositories(gh_world: MakeWorld, gh_env: LoopEnv) -> GitHubWorld:
    """octo/repo (issue #15, pull request #20) and octo/lib (pull request #7, branch ``fix-lib``, closing #15 in
    GitHub's own record), each a bare repository the workspace clones."""
    bare_repository(gh_env.tmp, "octo", "repo")
    lib = bare_repository(gh_env.tmp, "octo", "lib")
    seed = gh_env.tmp / "seed-octo-lib"
    git("checkout", "-q", "-b", "fix-lib", cwd=seed)
    (seed / "lib.py").write_text("answer = 41\n")
    git("add", ".", cwd=seed)
    git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "-m", "fix", cwd=seed)
    git("push", "-q", str(lib), "fix-lib", cwd=seed)
    workspace = {"root": str(gh_env.tmp / "ws"), "cloneUrlBase": f"file://{gh_env.tmp / 'remote'}"}
    world = gh_world(repositories=("octo/repo", "octo/lib"), workspace=workspace)
    world.fake.add_issue("octo/lib", 7, title="Library half", pull_request=True)
    world.fake.closes("octo/lib", 7, ("octo/repo", 15))
    return world


def review_comment(world: GitHubWorld, repo: str, number: int, body: str, object_id: int, branch: str) -> None:
    """An inline review comment by octocat on ``repo``'s pull request ``number``, headed by ``branch``."""
    payload = gh_payloads.adapt(gh_payloads.load("pull_request_review_comment.created"), repo=repo, login="octocat")
    pull = payload["pull_request"]
    pull.update(number=number, body="", html_url=f"https://github.com/{repo}/pull/{number}", labels=[])
    pull["head"]["ref"] = branch
    payload["comment"].update(id=object_id, node_id=f"PRRC_test{object_id}", body=body, path="lib.py", line=1)
    assert world.receiver.post("pull_request_review_comment", payload).status_code == 202


def pr_comment(world: GitHubWorld, repo: str, number: int, body: str, comment_id: int, pull_body: str = "") -> None:
    """A comment by octocat on ``repo``'s pull request ``number`` (its conversation tab)."""
    example = gh_payloads.load("issue_comment.created")
    payload = gh_payloads.adapt(example, repo=repo, number=number, body=body, login="octocat", pull_request=True)
    payload = gh_payloads.new_comment(payload, comment_id)
    payload["issue"].update(body=pull_body, labels=[])
    assert world.receiver.post("issue_comment", payload).status_code == 202


def merge(world: GitHubWorld, repo: str, number: int, branch: str) -> None:
    payload = gh_payloads.adapt(
        gh_payloads.load("pull_request.closed"), repo=repo, number=number, sender="octocat", merged=True
    )
    payload["pull_request"]["head"]["ref"] = branch
    payload["pull_request"].update(body="", labels=[])
    assert world.receiver.post("pull_request", payload).status_code == 202
    world.settled()


def endpoint(world: GitHubWorld, ref: str) -> dict[str, Any]:
    record = world.local()
    assert record is not None and ref in record["sessions"], f"{ref} is not recorded on {REF}"
    return record["sessions"][ref]


def spawned(world: GitHubWorld, ref: str) -> bool:
    """Whether ``ref`` has a session of its own recorded on #15 yet."""
    record = world.local() or {"sessions": {}}
    return bool((record["sessions"].get(ref) or {}).get("tmuxTarget"))


def lib_session(world: GitHubWorld) -> FakeHarness:
    """The pull request's own harness, once its session is recorded and ready."""
    wait_for(lambda: spawned(world, LIB), timeout=30)
    harness = FakeHarness(world.logs / f"{endpoint(world, LIB)['harnessSessionId']}.jsonl")
    harness.wait_ready(timeout=20)
    return harness


def state_file(world: GitHubWorld) -> Path:
    return Path(world.own()["cwd"]) / "docs" / "specs" / "issue-15" / "work-item-state.json"


def test_a_pull_request_in_another_repository_gets_its_own_session_and_only_its_merge_ends_it(
    gh_world: MakeWorld, gh_env: LoopEnv
) -> None:
    world = two_repositories(gh_world, gh_env)
    issue = world.start_work()
    issue_checkout = gh_env.tmp / "ws" / ".worktrees" / "github.com" / "octo" / "repo" / "github-octo-repo-15"
    assert world.own()["cwd"] == str(issue_checkout)

    review_comment(world, "octo/lib", 7, "answer should be 42", 7001, branch="fix-lib")
    lib = lib_session(world)
    world.settled()
    checkout = gh_env.tmp / "ws" / ".worktrees" / "github.com" / "octo" / "lib" / "github-octo-lib-7"
    session = endpoint(world, LIB)
    assert (session["cwd"], session["tmuxTarget"], session["status"]) == (str(checkout), LIB_TARGET, "active")
    assert lib.records("start")[0]["cwd"] == str(checkout)  # the harness runs in the checkout of octo/lib
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=checkout).strip() == "fix-lib"
    boot = lib.submitted()[0]
    assert f"pull request {LIB}" in boot and f"delivers work item {REF}" in boot
    assert "https://github.com/octo/repo/issues/15" in boot and "answer should be 42" in boot
    assert world.tmux("has-session", "-t", f"={LIB_TARGET}").returncode == 0

    pr_comment(world, "octo/lib", 7, "and a changelog entry", 7002)  # no head branch here: the session is there
    assert "and a changelog entry" in lib.wait_for_submitted(2, timeout=20)[-1]
    pr_comment(world, "octo/repo", 20, "the app half looks fine", 7003, pull_body="Fixes #15")
    assert "the app half looks fine" in issue.wait_for_submitted(2, timeout=20)[-1]
    world.settled()
    assert len(issue.submitted()) == 2 and len(lib.submitted()) == 2  # each got its own, nothing else
    assert endpoint(world, SAME)["tmuxTarget"] == "" and endpoint(world, SAME)["harnessSessionId"] == ""
    assert world.tmux("has-session", "-t", "=loop-github-octo-repo-20").returncode != 0

    linked = world.env.run("sessions", "link-pr", "--work-item", REF, "--pull-request", LIB)
    assert linked.returncode == 0, linked.stderr
    assert LIB_TARGET in linked.stdout and "recorded in its work-item-state.json" in linked.stdout
    [row] = json.loads(state_file(world).read_text())["pullRequests"]
    assert (row["ref"], row["repository"], row["number"], row["state"], row["linkedBy"]) == (
        LIB,
        "octo/lib",
        7,
        "open",
        "session",
    )
    # the provider's own derivation: GitHub serves a pull request at issues/N too (it redirects to pull/N)
    assert row["url"] == "https://github.com/octo/lib/issues/7" and row["stateDir"] == "pr-loops/octo__lib/pr-7"
    assert row["linkedAt"]
    before = state_file(world).read_bytes()
    again = world.env.run("sessions", "link-pr", "--work-item", REF, "--pull-request", LIB)
    assert again.returncode == 0 and "already linked" in again.stdout
    assert state_file(world).read_bytes() == before  # a second run writes nothing
    assert len(world.events("graph.pull_request_linked")) == 1

    merge(world, "octo/lib", 7, "fix-lib")
    assert endpoint(world, LIB)["status"] == "closed" and world.own()["status"] == "active"
    assert not checkout.exists() and issue_checkout.is_dir()
    assert lib.records("signal"), "the pull request's harness was ended"
    assert world.tmux("has-session", "-t", f"={LIB_TARGET}").returncode == 0  # kept: keepSessionOnClose
    assert [(e["closed_ref"], e["endpoint_closed"]) for e in world.events("session.kept_open")] == [(LIB, True)]
    assert json.loads(state_file(world).read_text())["pullRequests"][0]["state"] == "merged"
    assert not world.events("work_item.ended") and not issue.records("signal")
    world.comment("still going")
    assert "still going" in issue.wait_for_submitted(3, timeout=20)[-1]

    listing = json.loads(world.env.run("sessions", "list", "--format", "json").stdout)
    assert [(row["endpoint"], row["status"]) for row in listing] == [
        (REF, "active"),
        (LIB, "closed"),
        (SAME, "bound"),
    ]


def test_closing_the_issue_ends_every_endpoint_and_its_cleanup_removes_every_checkout(
    gh_world: MakeWorld, gh_env: LoopEnv
) -> None:
    world = two_repositories(gh_world, gh_env)
    issue = world.start_work()
    review_comment(world, "octo/lib", 7, "one more thing", 7101, branch="fix-lib")
    lib = lib_session(world)
    world.settled()
    checkouts = [Path(world.own()["cwd"]), Path(endpoint(world, LIB)["cwd"])]
    assert all(path.is_dir() for path in checkouts)
    world.close_issue("mallory")  # nobody authorized: every session closed, the cleanup deferred
    assert world.own()["status"] == "closed" and endpoint(world, LIB)["status"] == "closed"
    assert issue.records("signal") and lib.records("signal")
    assert not any(path.exists() for path in checkouts)
    assert world.events("cleanup.deferred")
    cleaned = world.env.run("sessions", "cleanup", "--work-item", REF, "--no-comment")
    assert cleaned.returncode == 0, cleaned.stderr
    assert world.local() is None
    assert world.tmux("has-session", "-t", f"={TARGET}").returncode != 0
    assert world.tmux("has-session", "-t", f"={LIB_TARGET}").returncode != 0


def test_always_gives_a_same_repository_pull_request_its_own_session_in_its_own_checkout(
    gh_world: MakeWorld, gh_env: LoopEnv
) -> None:
    world = two_repositories(gh_world, gh_env)
    world.restart(tmux={"socketName": world.socket, "resumeProbeSeconds": 0.3, "sessionPerPr": "always"})
    issue = world.start_work()
    pr_comment(world, "octo/repo", 20, "the app half", 7201, pull_body="Fixes #15")
    wait_for(lambda: spawned(world, SAME), timeout=30)
    world.settled()
    session = endpoint(world, SAME)
    own_checkout = gh_env.tmp / "ws" / ".worktrees" / "github.com" / "octo" / "repo" / "github-octo-repo-20"
    assert (session["tmuxTarget"], session["cwd"]) == ("loop-github-octo-repo-20", str(own_checkout))
    harness = FakeHarness(world.logs / f"{session['harnessSessionId']}.jsonl")
    harness.wait_ready(timeout=20)
    assert "the app half" in harness.submitted()[0] and len(issue.submitted()) == 1
