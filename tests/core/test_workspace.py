"""Workspace checkouts (sessions-runner-harness.md §2.10, R34-R36) against local bare repositories — no network.

Each test gets a bare ``octo/repo.git`` with ``main`` and a pull-request branch ``feature-x`` under ``<tmp>/remote``,
reached through ``routing.workspace.cloneUrlBase: file://<tmp>/remote``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.models import WorkEvent
from the_loop.plugins import get_host
from the_loop.refs import parse_ref
from the_loop.sessions import workspace
from the_loop.sessions.dispatcher import Dispatcher
from the_loop.sessions.tmux import TmuxRunner
from the_loop.testing import fake_plugin
from the_loop.testing.harness import FakeHarness

REF = parse_ref("github:octo/repo#15")


def git(*args: str, cwd: Path | None = None) -> str:
    answer = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60)
    return answer.stdout.strip()


@dataclass
class Remote:
    root: Path
    seed: Path

    def commit(self, message: str, branch: str = "main") -> str:
        """Commit on ``branch`` of the seed repository and push it; the new commit's id."""
        git("checkout", "-q", branch, cwd=self.seed)
        (self.seed / f"{message}.txt").write_text(message)
        git("add", ".", cwd=self.seed)
        git("commit", "-q", "-m", message, cwd=self.seed)
        git("push", "-q", "origin", branch, cwd=self.seed)
        return git("rev-parse", "HEAD", cwd=self.seed)


def make_remote(tmp: Path, owner: str = "octo", repo: str = "repo", default: str = "main") -> Remote:
    bare = tmp / "remote" / owner / f"{repo}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "--bare", "-b", default, str(bare))
    seed = tmp / f"seed-{owner}-{repo}"
    git("init", "-q", "-b", default, str(seed))
    for key, value in (("user.email", "t@example.invalid"), ("user.name", "t"), ("commit.gpgsign", "false")):
        git("config", key, value, cwd=seed)
    git("remote", "add", "origin", str(bare), cwd=seed)
    (seed / "README").write_text("hello\n")
    git("add", ".", cwd=seed)
    git("commit", "-q", "-m", "first", cwd=seed)
    git("push", "-q", "origin", default, cwd=seed)
    git("checkout", "-q", "-b", "feature-x", cwd=seed)
    (seed / "feature.txt").write_text("x\n")
    git("add", ".", cwd=seed)
    git("commit", "-q", "-m", "feature", cwd=seed)
    git("push", "-q", "origin", "feature-x", cwd=seed)
    git("checkout", "-q", default, cwd=seed)
    return Remote(bare, seed)


def make_config(tmp: Path, routing: dict[str, Any] | None = None, **workspace_keys: Any) -> LoadedConfig:
    path = tmp / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = {"root": str(tmp / "ws"), "cloneUrlBase": f"file://{tmp / 'remote'}", **workspace_keys}
    routing = {"spawnWorkdir": str(tmp / "work"), "workspace": keys, **(routing or {})}
    path.write_text(yaml.safe_dump({"routing": routing}))
    config = load_config(path, get_host())
    events.configure(config.state.events_path, "test")
    return config


def logged(config: LoadedConfig, name: str) -> list[dict[str, Any]]:
    path = config.state.events_path
    lines = path.read_text().splitlines() if path.exists() else []
    return [record for record in map(json.loads, lines) if record["event"] == name]


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    return make_remote(tmp_path)


@pytest.fixture
def config(tmp_path: Path, remote: Remote) -> LoadedConfig:
    (tmp_path / "work").mkdir()
    return make_config(tmp_path)


# ------------------------------------------------------------------------------------------------- worktree


def test_worktree_strategy_shares_one_clone_and_detaches_at_the_default_branch(
    config: LoadedConfig, remote: Remote, tmp_path: Path
) -> None:
    checkout = workspace.prepare(config, REF)
    ws = tmp_path / "ws"
    assert checkout.path == ws / ".worktrees" / "github.com" / "octo" / "repo" / "github-octo-repo-15"
    assert checkout.strategy == "worktree" and checkout.base == "origin/main" and checkout.branch == ""
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=checkout.path) == "HEAD"  # detached: the agent branches
    assert git("rev-parse", "HEAD", cwd=checkout.path) == git("rev-parse", "main", cwd=remote.seed)
    shared = ws / "github.com" / "octo" / "repo"
    assert (shared / ".git").is_dir() and (checkout.path / ".git").is_file()  # a worktree of the shared clone
    other = workspace.prepare(config, parse_ref("github:octo/repo#16"))
    assert other.path.parent == checkout.path.parent and other.path != checkout.path
    assert str(checkout.path) in git("worktree", "list", cwd=shared)
    [first, _second] = logged(config, "workspace.prepared")
    assert first["work_item"] == str(REF) and first["strategy"] == "worktree"
    assert first["checkout"] == str(checkout.path) and first["base"] == "origin/main"


def test_an_existing_checkout_is_reused_as_it_is(config: LoadedConfig) -> None:
    first = workspace.prepare(config, REF)
    (first.path / "work-in-progress.txt").write_text("uncommitted")
    again = workspace.prepare(config, REF)
    assert again.path == first.path and again.reused
    assert (again.path / "work-in-progress.txt").read_text() == "uncommitted"
    assert logged(config, "workspace.prepared")[-1]["reused"] is True


def test_a_new_checkout_is_made_from_a_fetched_clone(config: LoadedConfig, remote: Remote) -> None:
    workspace.prepare(config, REF)
    newer = remote.commit("second")
    checkout = workspace.prepare(config, parse_ref("github:octo/repo#16"))
    assert git("rev-parse", "HEAD", cwd=checkout.path) == newer


def test_a_failing_fetch_only_warns(config: LoadedConfig, tmp_path: Path) -> None:
    workspace.prepare(config, REF)
    shared = tmp_path / "ws" / "github.com" / "octo" / "repo"
    git("remote", "set-url", "origin", f"file://{tmp_path}/nowhere.git", cwd=shared)
    checkout = workspace.prepare(config, parse_ref("github:octo/repo#16"))
    assert checkout.path.is_dir() and checkout.warnings
    assert "fetch" in logged(config, "workspace.prepared")[-1]["warnings"][0]


def test_a_pull_request_branch_is_checked_out_by_name(config: LoadedConfig, remote: Remote) -> None:
    checkout = workspace.prepare(config, REF, branch="feature-x")
    assert checkout.branch == "feature-x"
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=checkout.path) == "feature-x"
    assert (checkout.path / "feature.txt").exists()


def test_the_default_branch_comes_from_origin_head(tmp_path: Path) -> None:
    make_remote(tmp_path, "octo", "trunky", default="trunk")
    (tmp_path / "work").mkdir()
    config = make_config(tmp_path)
    checkout = workspace.prepare(config, parse_ref("github:octo/trunky#1"))
    assert checkout.base == "origin/trunk"


def test_a_repository_named_with_dot_git_shares_the_clone(config: LoadedConfig, tmp_path: Path) -> None:
    checkout = workspace.prepare(config, parse_ref("github:octo/repo.git#3"))
    assert checkout.path == tmp_path / "ws" / ".worktrees" / "github.com" / "octo" / "repo" / "github-octo-repo.git-3"


# ---------------------------------------------------------------------------------------------------- clone


def test_clone_strategy_makes_a_clone_per_work_item(tmp_path: Path, remote: Remote) -> None:
    (tmp_path / "work").mkdir()
    config = make_config(tmp_path, strategy="clone")
    checkout = workspace.prepare(config, REF)
    item = tmp_path / "ws" / ".work-items" / "github-octo-repo-15"
    assert checkout.path == item / "github.com" / "octo" / "repo"
    assert (checkout.path / ".git").is_dir() and checkout.branch == "main"
    assert not (tmp_path / "ws" / "github.com").exists()  # no shared clone
    branch = workspace.prepare(config, parse_ref("github:octo/repo#16"), branch="feature-x")
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=branch.path) == "feature-x"
    assert workspace.prepare(config, REF).reused
    assert workspace.remove(config, REF) == [item]
    assert not item.exists() and branch.path.exists()


# -------------------------------------------------------------------------------------------- where it runs


def test_no_root_or_a_key_form_ref_runs_in_spawn_workdir(tmp_path: Path, config: LoadedConfig) -> None:
    jira = parse_ref("jira:acme.atlassian.net/PROJ-12")
    assert workspace.spawn_cwd(config, jira) == workspace.Checkout(tmp_path / "work", "workdir")
    plain = make_config(tmp_path / "plain", root="")
    assert workspace.spawn_cwd(plain, REF).path == tmp_path / "plain" / "work"
    assert workspace.checkout_paths(plain, REF) == [] and workspace.remove(plain, REF) == []
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize(
    "ref, part",
    [("fake:octo/..#1", "'..'"), ("fake:-octo/repo#1", "'-octo'"), ("fake:octo/_repo#1", "'_repo'")],
)
def test_unsafe_path_parts_are_refused_before_anything_runs(
    config: LoadedConfig, tmp_path: Path, ref: str, part: str
) -> None:
    with pytest.raises(workspace.WorkspaceError, match=part) as caught:
        workspace.prepare(config, parse_ref(ref))
    assert caught.value.transient is False
    assert not (tmp_path / "ws").exists()


def test_a_clone_that_fails_is_a_transient_error(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    config = make_config(tmp_path)  # no remote made: the clone URL leads nowhere
    with pytest.raises(workspace.WorkspaceError, match="git clone failed") as caught:
        workspace.prepare(config, REF)
    assert caught.value.transient is True


def test_clone_urls_follow_the_protocol_or_the_base(tmp_path: Path) -> None:
    https = make_config(tmp_path / "a", cloneUrlBase="")
    ssh = make_config(tmp_path / "b", cloneUrlBase="", cloneProtocol="ssh")
    assert workspace.clone_url(https, "github.com", "octo", "repo") == "https://github.com/octo/repo.git"
    assert workspace.clone_url(ssh, "ghe.example.com", "octo", "repo") == "git@ghe.example.com:octo/repo.git"
    mirror = make_config(tmp_path / "c", cloneUrlBase="https://mirror.example/git/")
    assert workspace.clone_url(mirror, "github.com", "octo", "repo") == "https://mirror.example/git/octo/repo.git"


# --------------------------------------------------------------------------------------------------- remove


def test_removal_takes_the_worktree_and_never_the_shared_clone(config: LoadedConfig, tmp_path: Path) -> None:
    checkout = workspace.prepare(config, REF)
    (checkout.path / "dirty.txt").write_text("uncommitted")
    shared = tmp_path / "ws" / "github.com" / "octo" / "repo"
    assert workspace.remove(config, REF) == [checkout.path]
    assert not checkout.path.exists() and (shared / ".git").is_dir()
    assert str(checkout.path) not in git("worktree", "list", cwd=shared)
    assert workspace.remove(config, REF) == []  # nothing left: still fine
    [cleaned] = logged(config, "workspace.cleaned")
    assert cleaned["removed"] is True and cleaned["checkout"] == str(checkout.path)


def test_removal_without_git_or_shared_clone_falls_back_to_deleting(config: LoadedConfig, tmp_path: Path) -> None:
    checkout = workspace.prepare(config, REF)
    shutil.rmtree(tmp_path / "ws" / "github.com")
    assert workspace.remove(config, REF) == [checkout.path]
    again = workspace.prepare(config, REF)
    broken = make_config(tmp_path, gitBinary=str(tmp_path / "no-such-git"))
    assert workspace.remove(broken, REF) == [again.path]


def test_removal_never_raises_and_reports_what_it_could_not_remove(
    config: LoadedConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = workspace.prepare(config, REF)

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(shutil, "rmtree", refuse)
    no_git = make_config(tmp_path, gitBinary=str(tmp_path / "no-such-git"))  # nor can git remove the worktree
    assert workspace.remove(no_git, REF) == []
    assert checkout.path.exists()
    cleaned = logged(no_git, "workspace.cleaned")[-1]
    assert cleaned["removed"] is False and cleaned["level"] == "warning" and "Permission denied" in cleaned["error"]


def test_a_stray_path_that_is_no_checkout_is_refused_not_reused(config: LoadedConfig, tmp_path: Path) -> None:
    stray = tmp_path / "ws" / ".worktrees" / "github.com" / "octo" / "repo" / "github-octo-repo-15"
    stray.mkdir(parents=True)
    with pytest.raises(workspace.WorkspaceError, match="not a checkout"):
        workspace.prepare(config, REF)
    assert workspace.checkout_paths(config, REF) == [stray]  # cleanup still finds it from the ref alone


# ---------------------------------------------------------------------------------------------- dispatcher


def test_a_first_spawn_runs_in_the_work_items_checkout(
    tmp_path: Path, remote: Remote, plugin_host: Any, tmux_runner: TmuxRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_host.register(fake_plugin, "fake")
    monkeypatch.setenv("FAKE_HARNESS_LOG", str(tmp_path / "{session}.jsonl"))
    (tmp_path / "work").mkdir()
    path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    routing = {
        "defaultHarness": "fake",
        "announce": {"enabled": False},
        "tmux": {"socketName": tmux_runner.socket},
        "workspace": {"root": str(tmp_path / "ws"), "cloneUrlBase": f"file://{tmp_path / 'remote'}"},
    }
    path.write_text(yaml.safe_dump({"routing": routing}))
    config = load_config(path, plugin_host)
    events.configure(config.state.events_path, "test")
    dispatcher = Dispatcher(config, runner=tmux_runner)
    ref = "fake:octo/repo#15"
    outcome = dispatcher.dispatch(WorkEvent(delivery_id="d1", work_item=ref, text="go", spawn=True))
    assert outcome.status == "spawned", outcome
    expected = tmp_path / "ws" / ".worktrees" / "github.com" / "octo" / "repo" / "fake-octo-repo-15"
    own = dispatcher.registry.load(ref).own  # type: ignore[union-attr]
    assert own is not None and own.cwd == str(expected)
    harness = FakeHarness(tmp_path / f"{own.harness_session_id}.jsonl")
    assert harness.wait_for("start")[0]["cwd"] == str(expected)

    broken = make_config(tmp_path / "other", {"defaultHarness": "fake"}, cloneUrlBase=f"file://{tmp_path}/nowhere")
    failing = Dispatcher(broken, runner=tmux_runner)
    events.configure(config.state.events_path, "test")
    failed = failing.dispatch(WorkEvent(delivery_id="d2", work_item="fake:octo/lib#2", text="go", spawn=True))
    assert failed.status == "failed" and failed.will_retry and "workspace: git clone failed" in failed.error
    [spawn_failed] = logged(config, "session.spawn_failed")
    assert spawn_failed["will_retry"] is True and spawn_failed["work_item"] == "fake:octo/lib#2"
    assert tmux_runner.list_sessions() == ["loop-fake-octo-repo-15"]


def test_a_respawn_whose_checkout_was_removed_makes_it_again_and_resumes_there(
    tmp_path: Path, remote: Remote, plugin_host: Any, tmux_runner: TmuxRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_host.register(fake_plugin, "fake")
    monkeypatch.setenv("FAKE_HARNESS_LOG", str(tmp_path / "{session}.jsonl"))
    (tmp_path / "work").mkdir()
    tmux = {"socketName": tmux_runner.socket, "resumeProbeSeconds": 0.3}
    config = make_config(tmp_path, {"defaultHarness": "fake", "announce": {"enabled": False}, "tmux": tmux})
    dispatcher = Dispatcher(config, runner=tmux_runner)
    ref = "fake:octo/repo#15"
    assert dispatcher.dispatch(WorkEvent(delivery_id="d1", work_item=ref, text="go", spawn=True)).status == "spawned"
    own = dispatcher.registry.load(ref).own  # type: ignore[union-attr]
    assert own is not None
    checkout = Path(own.cwd)
    harness = FakeHarness(tmp_path / f"{own.harness_session_id}.jsonl")
    harness.wait_for("ready")
    tmux_runner.kill(own.tmux_target)
    shutil.rmtree(checkout)  # removed by hand while the record is live
    outcome = dispatcher.dispatch(WorkEvent(delivery_id="d2", work_item=ref, text="still there?"))
    assert outcome.status == "respawned", outcome
    assert (checkout / "README").exists()
    start = harness.wait_for("start", 2)[1]
    assert start["mode"] == "resume" and start["cwd"] == str(checkout)
    assert harness.wait_for_submitted(2)[-1] == "still there?"
