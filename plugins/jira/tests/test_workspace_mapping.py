"""J4: a Jira work item's session runs in a checkout of its project's mapped repository when workspaces are on;
a mirror-only project, or workspaces off, runs it in ``routing.spawnWorkdir``. Local bare repository, no network."""

from __future__ import annotations

from pathlib import Path

from jira_world import JiraWorld

from the_loop.refs import parse_ref
from the_loop.sessions import workspace
from the_loop.testing import bare_repository


def test_j4_a_mapped_project_checks_out_its_repository(world: JiraWorld, tmp_path: Path) -> None:
    bare_repository(tmp_path)
    routing = {
        "spawnWorkdir": str(tmp_path / "work"),
        "workspace": {"root": str(tmp_path / "ws"), "cloneUrlBase": f"file://{tmp_path / 'remote'}"},
    }
    config = world.load(routing=routing)

    mapped = workspace.spawn_cwd(config, parse_ref("jira:jira.test/PROJ-12"))
    assert mapped.strategy == "worktree"
    assert mapped.path == tmp_path / "ws" / ".worktrees" / "github.com" / "octo" / "repo" / "jira-jira.test-PROJ-12"
    assert (mapped.path / "README").read_text() == "hello\n"

    # OPS is mirror-only (no repository), and another site's ticket maps nowhere: both run in spawnWorkdir
    for text in ("jira:jira.test/OPS-1", "jira:elsewhere.test/PROJ-12"):
        assert workspace.spawn_cwd(config, parse_ref(text)) == workspace.Checkout(tmp_path / "work", "workdir")


def test_j4_without_a_workspace_root_every_jira_session_runs_in_spawn_workdir(world: JiraWorld, tmp_path: Path) -> None:
    config = world.load(routing={"spawnWorkdir": str(tmp_path / "work")})
    checkout = workspace.spawn_cwd(config, parse_ref("jira:jira.test/PROJ-12"))
    assert checkout == workspace.Checkout(tmp_path / "work", "workdir")
    assert not (tmp_path / "ws").exists()
