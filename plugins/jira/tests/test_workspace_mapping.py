"""J4: a Jira work item's session runs in a checkout of its project's mapped repository when workspaces are on;
a mirror-only project, or workspaces off, runs it in ``routing.spawnWorkdir``. Local bare repository, no network."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fake_jira import FakeJira
from jira_fixtures import base_config

from the_loop import workspace
from the_loop.refs import parse_ref
from the_loop.testing import LoopEnv


def git(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def bare_repository(tmp: Path) -> Path:
    """``<tmp>/remote/octo/repo.git`` with one commit on ``main``."""
    bare, seed = tmp / "remote" / "octo" / "repo.git", tmp / "seed"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    git("init", "-q", "-b", "main", str(seed))
    (seed / "README.md").write_text("widget\n")
    git("add", "README.md", cwd=seed)
    git("-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-q", "-m", "seed", cwd=seed)
    git("push", "-q", str(bare), "main", cwd=seed)
    return bare


def test_j4_a_mapped_project_checks_out_its_repository(
    load: Callable[..., Any], jira_env: LoopEnv, fake_jira: FakeJira, tmp_path: Path
) -> None:
    bare_repository(tmp_path)
    routing = {
        "spawnWorkdir": str(tmp_path / "work"),
        "workspace": {"root": str(tmp_path / "ws"), "cloneUrlBase": f"file://{tmp_path / 'remote'}"},
    }
    config = load(base_config(fake_jira, routing=routing))

    mapped = workspace.spawn_cwd(config, parse_ref("jira:jira.test/PROJ-12"))
    assert mapped.strategy == "worktree"
    assert mapped.path == tmp_path / "ws" / ".worktrees" / "github.com" / "octo" / "repo" / "jira-jira.test-PROJ-12"
    assert (mapped.path / "README.md").read_text() == "widget\n"

    # OPS is mirror-only (no repository), and another site's ticket maps nowhere: both run in spawnWorkdir
    for text in ("jira:jira.test/OPS-1", "jira:elsewhere.test/PROJ-12"):
        assert workspace.spawn_cwd(config, parse_ref(text)) == workspace.Checkout(tmp_path / "work", "workdir")


def test_j4_without_a_workspace_root_every_jira_session_runs_in_spawn_workdir(
    load: Callable[..., Any], fake_jira: FakeJira, tmp_path: Path
) -> None:
    config = load(base_config(fake_jira, routing={"spawnWorkdir": str(tmp_path / "work")}))
    checkout = workspace.spawn_cwd(config, parse_ref("jira:jira.test/PROJ-12"))
    assert checkout == workspace.Checkout(tmp_path / "work", "workdir")
    assert not (tmp_path / "ws").exists()
