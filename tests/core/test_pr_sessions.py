"""Sessions per pull request (issue-260, seed 004's session record): the router's choice of endpoint, the lazy spawn
of a pull request's own session in a checkout of its repository, and what close, reset and cleanup do to every
endpoint — on real tmux with the fake harness and the fake ticket provider, in-process, each checkout a real git
worktree of a local bare repository (``routing.workspace.cloneUrlBase: file://…``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from the_loop.models import InboundEvent
from the_loop.sessions import closing
from the_loop.sessions.dispatcher import Outcome
from the_loop.state.registry import Endpoint
from the_loop.testing import bare_repository
from the_loop.testing.harness import FakeHarness
from the_loop.testing.world import LABEL, REF, World

LIB = "fake:octo/lib#7"
SAME = "fake:octo/repo#20"
TARGET = "loop-fake-octo-repo-15"
LIB_TARGET = "loop-fake-octo-lib-7"
SAME_TARGET = "loop-fake-octo-repo-20"


def git(*args: str, cwd: Path | None = None) -> str:
    answer = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60)
    return answer.stdout.strip()


def remote(tmp: Path, owner: str, repo: str, *branches: str) -> None:
    """``<tmp>/remote/<owner>/<repo>.git`` with ``main`` and each of ``branches`` (one commit more each)."""
    bare = bare_repository(tmp, owner, repo)
    seed = tmp / f"seed-{owner}-{repo}"
    for branch in branches:
        git("checkout", "-q", "-b", branch, cwd=seed)
        (seed / f"{branch}.txt").write_text(branch)
        git("add", ".", cwd=seed)
        git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "-m", branch, cwd=seed)
        git("push", "-q", str(bare), branch, cwd=seed)
        git("checkout", "-q", "main", cwd=seed)


def routing(tmp: Path, **more: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "spawnOnUnmatched": "labeled",
        "authorizedUsers": ["octocat"],
        "announce": {"enabled": False},
        "tmux": {"resumeProbeSeconds": 0.3, "harnessKillGraceSeconds": 2},
        "workspace": {"root": str(tmp / "ws"), "cloneUrlBase": f"file://{tmp / 'remote'}"},
        **more,
    }


@pytest.fixture
def world(world: World) -> World:
    remote(world.tmp, "octo", "repo")
    remote(world.tmp, "octo", "lib", "fix-lib")
    world.configure(defaults={"repositories": ["octo/repo", "octo/lib"], "routing": routing(world.tmp)})
    return world


def handle(world: World, event: InboundEvent) -> Outcome:
    return world.router.handle(event)


def on_pull_request(world: World, body: str = "hello", pull: str = LIB, branch: str = "", **more: Any) -> InboundEvent:
    """A comment by octocat on pull request ``pull``, which names #15 as what it delivers (its linkage)."""
    repository = pull.split(":", 1)[1].split("#", 1)[0]
    event = world.inbound_event(body, ref=pull, repository=repository, **more)
    return event.model_copy(update={"pull_request": pull, "work_items": (REF, pull), "head_branch": branch})


def start(world: World) -> FakeHarness:
    assert handle(world, world.inbound_event("the-loop start")).reason == "control-executed"
    harness = world.harness()
    harness.wait_ready(screen=lambda: world.runner.capture(TARGET))
    return harness


def entry(world: World, ref: str) -> Endpoint:
    record = world.record()
    assert record is not None and ref in record.sessions, f"{ref} is not recorded on {REF}"
    return record.sessions[ref]


def pr_harness(world: World, ref: str = LIB) -> FakeHarness:
    session = entry(world, ref)
    harness = FakeHarness(world.logs / f"{session.harness_session_id}.jsonl")
    harness.wait_ready(screen=lambda: world.runner.capture(session.tmux_target))
    return harness


def checkout(world: World, repo: str, slug: str) -> Path:
    return world.tmp / "ws" / ".worktrees" / "github.com" / "octo" / repo / slug


def upstream(world: World, ref: str, state: str) -> None:
    """What the fake tracker answers for ``ref``'s state from now on."""
    data = json.loads(world.tickets.read_text()) if world.tickets.exists() else {"items": {}}
    data["items"].setdefault(ref, {})["state"] = state
    world.tickets.write_text(json.dumps(data))


def choose(world: World, value: str, **more: str) -> None:
    """Write the work item's ``sessionPerPr`` (and ``more`` choices) into its work-item-state.json, in its checkout."""
    path = Path(world.own().cwd) / "docs" / "specs" / "issue-15" / "work-item-state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "workItem": REF, "sessionPerPr": value, **more}))


# ------------------------------------------------------------------------------------------------ the spawn


def test_a_pull_request_in_another_repository_gets_its_own_session_on_its_branch_and_keeps_it(world: World) -> None:
    own = start(world)
    outcome = handle(world, on_pull_request(world, "please look at lib.py", branch="fix-lib"))
    assert (outcome.status, outcome.tmux_target) == ("spawned", LIB_TARGET)
    session = entry(world, LIB)
    lib = checkout(world, "lib", "fake-octo-lib-7")
    assert (session.cwd, session.tmux_target, session.status) == (str(lib), LIB_TARGET, "active")
    assert session.harness == "fake" and session.harness_session_id
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=lib) == "fix-lib" and (lib / "fix-lib.txt").exists()
    harness = pr_harness(world)
    assert harness.records("start")[0]["cwd"] == str(lib)
    boot = harness.submitted()[0]
    assert f"pull request {LIB}" in boot and "octo/lib" in boot and f"delivers work item {REF}" in boot
    assert "head branch, fix-lib" in boot and "please look at lib.py" in boot and "untrusted" in boot
    [spawned] = [e for e in world.events("session.spawned") if e.get("endpoint")]
    assert (spawned["endpoint"], spawned["tmux_target"], spawned["branch"]) == (LIB, LIB_TARGET, "fix-lib")
    assert [e["pull_request"] for e in world.events("session.pr_linked")] == [LIB]

    assert handle(world, on_pull_request(world, "and the tests too")).status == "delivered"
    assert "and the tests too" in harness.wait_for_submitted(2)[-1]
    assert len(own.submitted()) == 1  # the work item's session saw neither
    world.runner.kill(LIB_TARGET)  # gone: the next event brings it back, resuming its conversation
    assert handle(world, on_pull_request(world, "still there?")).status == "respawned"
    assert entry(world, LIB).harness_session_id == session.harness_session_id
    assert harness.records("start")[-1]["mode"] == "resume" and harness.records("start")[-1]["cwd"] == str(lib)


def test_a_pull_request_without_a_branch_checks_out_the_default_and_says_how_to_get_its_head(world: World) -> None:
    start(world)
    assert handle(world, on_pull_request(world, "hi")).status == "spawned"
    lib = checkout(world, "lib", "fake-octo-lib-7")
    assert git("rev-parse", "HEAD", cwd=lib) == git("rev-parse", "main", cwd=world.tmp / "seed-octo-lib")
    boot = pr_harness(world).submitted()[0]
    assert "at origin/main, not at the pull request's head" in boot and "gh pr checkout 7" in boot


def test_a_pull_request_in_the_work_items_own_repository_reaches_the_work_items_session(world: World) -> None:
    own = start(world)
    assert handle(world, on_pull_request(world, "same repository", pull=SAME)).status == "delivered"
    assert "same repository" in own.wait_for_submitted(2)[-1]
    binding = entry(world, SAME)
    assert (binding.tmux_target, binding.harness_session_id, binding.cwd) == ("", "", "")
    assert world.runner.probe(SAME_TARGET) == "absent"
    assert not checkout(world, "repo", "fake-octo-repo-20").exists()


def test_a_pull_request_event_for_an_item_without_a_live_session_starts_the_items_own_as_before(
    world: World,
) -> None:
    world.configure(control={"requireStartCommand": False})
    assert handle(world, on_pull_request(world, "first words", labels=(LABEL,))).status == "spawned"
    own = world.own()
    assert own.tmux_target == TARGET and own.cwd == str(checkout(world, "repo", "fake-octo-repo-15"))
    assert entry(world, LIB).tmux_target == "" and world.runner.probe(LIB_TARGET) == "absent"
    assert "first words" in world.harness().submitted()[0]
    assert not checkout(world, "lib", "fake-octo-lib-7").exists()
    # and only now, with the work item's session live, does the pull request get one of its own
    world.harness().wait_ready(screen=lambda: world.runner.capture(TARGET))
    assert handle(world, on_pull_request(world, "now yours")).status == "spawned"


def test_an_unarmed_item_gets_nothing_from_a_pull_request(world: World) -> None:
    assert handle(world, on_pull_request(world, "hello?")).reason == "awaiting-start"
    assert world.record() is None and world.runner.list_sessions() == []


def test_a_paused_work_item_suppresses_its_pull_requests_sessions_too(world: World) -> None:
    start(world)
    assert handle(world, on_pull_request(world, "one")).status == "spawned"
    assert handle(world, world.inbound_event("the-loop pause")).reason == "control-executed"
    assert handle(world, on_pull_request(world, "two")).reason == "session-paused"
    assert len(pr_harness(world).submitted()) == 1


# ------------------------------------------------------------------------------------------ sessionPerPr


@pytest.mark.parametrize(
    ("operator", "chosen", "pull", "own_session"),
    [
        ("never", "", LIB, False),  # the operator's default
        ("cross-repository", "never", LIB, False),  # the work item's frozen choice wins
        ("never", "cross-repository", LIB, True),
        ("cross-repository", "always", SAME, True),
        ("always", "", SAME, True),
        ("always", "sometimes", SAME, True),  # a bogus choice is the operator's default, never a guess
        ("never", "sometimes", LIB, False),
        ("cross-repository", "sometimes", LIB, True),
    ],
)
def test_session_per_pr_comes_from_the_items_file_else_the_operators_default(
    world: World, operator: str, chosen: str, pull: str, own_session: bool
) -> None:
    world.configure(tmux={"sessionPerPr": operator})
    own = start(world)
    if chosen:
        choose(world, chosen)
    outcome = handle(world, on_pull_request(world, "which session?", pull=pull))
    target = LIB_TARGET if pull == LIB else SAME_TARGET
    if own_session:
        assert (outcome.status, outcome.tmux_target) == ("spawned", target)
        assert "which session?" in pr_harness(world, pull).submitted()[0]
        assert len(own.submitted()) == 1
    else:
        assert outcome.status == "delivered" and "which session?" in own.wait_for_submitted(2)[-1]
        assert world.runner.probe(target) == "absent" and entry(world, pull).tmux_target == ""


def test_a_pull_requests_session_runs_on_the_model_its_work_item_chose(world: World) -> None:
    world.configure(defaults={**world.defaults, "models": ["opus"]})
    start(world)
    choose(world, "cross-repository", model="opus")
    assert handle(world, on_pull_request(world, "review me")).status == "spawned"
    session = entry(world, LIB)
    assert (session.model, session.harness_args) == ("opus", ["--model", "opus"])
    argv = pr_harness(world).records("start")[0]["argv"]
    assert argv[argv.index("--model") + 1] == "opus"


def test_without_a_workspace_a_pull_requests_session_is_declined_once_and_the_item_gets_its_events(
    world: World,
) -> None:
    world.configure(workspace={"root": ""})
    own = start(world)
    for n, text in enumerate(("first", "second"), start=2):
        assert handle(world, on_pull_request(world, text)).status == "delivered"
        assert text in own.wait_for_submitted(n)[-1]
    [declined] = world.events("session.pr_session_declined")
    assert (declined["pull_request"], declined["reason"]) == (LIB, "no-workspace")
    assert entry(world, LIB).tmux_target == "" and world.runner.probe(LIB_TARGET) == "absent"


def test_a_checkout_that_cannot_be_made_declines_the_session_and_the_item_gets_the_event(world: World) -> None:
    own = start(world)
    world.configure(workspace={"cloneUrlBase": f"file://{world.tmp / 'nowhere'}"})
    assert handle(world, on_pull_request(world, "clone me")).status == "delivered"
    assert "clone me" in own.wait_for_submitted(2)[-1]
    [declined] = world.events("session.pr_session_declined")
    assert declined["reason"] == "no-checkout" and declined["level"] == "warning" and "git clone" in declined["detail"]
    assert entry(world, LIB).tmux_target == ""


# --------------------------------------------------------------------------------------- close, reset, cleanup


def test_the_pull_request_ending_ends_only_its_endpoint_and_later_events_reach_the_item(world: World) -> None:
    own = start(world)
    assert handle(world, on_pull_request(world, "review me")).status == "spawned"
    lib, harness = checkout(world, "lib", "fake-octo-lib-7"), pr_harness(world)
    merged = on_pull_request(world, None, kind="closed", closed="pr-merged")
    upstream(world, LIB, "merged")
    assert handle(world, merged).reason == "pull-request-ended"
    assert entry(world, LIB).status == "closed" and world.own().status == "active"
    assert harness.records("signal") and world.runner.probe(LIB_TARGET) == "dead"  # kept, its harness ended
    assert not lib.exists() and Path(world.own().cwd).is_dir()
    [kept] = world.events("session.kept_open")
    assert (kept["closed_ref"], kept["endpoint_closed"]) == (LIB, True)
    assert handle(world, on_pull_request(world, "after the merge")).status == "delivered"
    assert "after the merge" in own.wait_for_submitted(2)[-1]


def test_an_open_pull_request_closed_with_its_work_item_gets_a_fresh_session_when_the_item_runs_again(
    world: World,
) -> None:
    start(world)
    assert handle(world, on_pull_request(world, "first round")).status == "spawned"
    first = entry(world, LIB).harness_session_id
    closing.close_session(world.config, REF, remove_checkout=True, runner=world.runner)  # a stop
    assert entry(world, LIB).status == "closed" and not checkout(world, "lib", "fake-octo-lib-7").exists()
    start(world)
    upstream(world, LIB, "open")
    assert handle(world, on_pull_request(world, "second round")).status == "spawned"
    again = entry(world, LIB)
    assert again.status == "active" and again.harness_session_id != first
    assert checkout(world, "lib", "fake-octo-lib-7").is_dir()
    assert "second round" in pr_harness(world).submitted()[0]


def test_a_pull_request_ending_keeps_its_checkout_with_keep_checkout_on_close(world: World) -> None:
    start(world)
    world.configure(workspace={"keepCheckoutOnClose": True})
    assert handle(world, on_pull_request(world, "review me")).status == "spawned"
    assert handle(world, on_pull_request(world, None, kind="closed", closed="pr-closed")).reason == "pull-request-ended"
    assert entry(world, LIB).status == "closed" and checkout(world, "lib", "fake-octo-lib-7").is_dir()


def test_the_work_item_ending_ends_every_endpoint_and_removes_every_checkout(world: World) -> None:
    start(world)
    assert handle(world, on_pull_request(world, "review me")).status == "spawned"
    pr_harness(world)
    closing.work_item_ended(world.config, REF, reason="issue-closed", actor="", authorized=False, source="webhook")
    record = world.record()
    assert record is not None and {ref: e.status for ref, e in record.sessions.items()} == {
        REF: "closed",
        LIB: "closed",
    }
    assert world.runner.probe(TARGET) == "dead" and world.runner.probe(LIB_TARGET) == "dead"
    assert not checkout(world, "repo", "fake-octo-repo-15").exists()
    assert not checkout(world, "lib", "fake-octo-lib-7").exists()
    report = closing.cleanup(world.config, REF, actor="octocat", source="cli", runner=world.runner)
    assert report.endpoints == [LIB, REF] and world.runner.list_sessions() == [] and world.record() is None


def test_cleanup_kills_every_endpoint_and_removes_every_checkout(world: World) -> None:
    start(world)
    assert handle(world, on_pull_request(world, "review me")).status == "spawned"
    report = closing.cleanup(world.config, REF, actor="octocat", source="cli", runner=world.runner)
    assert report.endpoints == [LIB, REF] and not report.errors
    assert world.runner.list_sessions() == [] and world.record() is None
    assert not checkout(world, "lib", "fake-octo-lib-7").exists()
    assert not checkout(world, "repo", "fake-octo-repo-15").exists()
    assert (world.tmp / "ws" / "github.com" / "octo" / "lib" / ".git").is_dir()  # the shared clone stays


def test_reset_closes_every_endpoint_and_removes_every_checkout(world: World) -> None:
    start(world)
    assert handle(world, on_pull_request(world, "review me")).status == "spawned"
    lib, repo = checkout(world, "lib", "fake-octo-lib-7"), checkout(world, "repo", "fake-octo-repo-15")
    dry = closing.reset(world.config, REF, dry_run=True, runner=world.runner)
    assert sorted(dry.checkouts) == sorted([str(lib), str(repo)]) and lib.is_dir()
    report = closing.reset(world.config, REF, runner=world.runner)
    assert report.was_live and "checkout" in report.removed and world.record() is None
    assert not lib.exists() and not repo.exists()
    assert world.runner.probe(TARGET) == "dead" and world.runner.probe(LIB_TARGET) == "dead"  # retained, harness ended
