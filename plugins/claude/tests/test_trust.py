"""Pre-spawn preparation of Claude Code's files (R40-R45, C27, C28), against a temporary HOME and
``CLAUDE_CONFIG_DIR`` only: which keys are written where, and the write discipline (lock, refuse what does not
parse, only named keys, no-op writes, atomic replace through symlinks, modes)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from the_loop.config import ConfigError, LoadedConfig
from the_loop.config.models import HarnessPluginsSection, HarnessTrustSection
from the_loop_claude import trust
from the_loop_claude.adapter import ClaudeAdapter
from the_loop_claude.trust import ClaudePaths, PrepareError

REPO = "MadaraUchiha-314/the-loop"
Load = Callable[..., LoadedConfig]


def prepare(
    cwd: Path,
    *,
    root: Path | None = None,
    scope: str = "workspace-root",
    bypass: str = "auto",
    args: tuple[str, ...] = (),
    trust_enabled: bool = True,
    plugins_enabled: bool = True,
    repo: str = REPO,
    onboarding: bool = True,
    approve_key: bool = True,
) -> list[str]:
    return trust.prepare(
        cwd,
        trust=HarnessTrustSection(enabled=trust_enabled, scope=scope, accept_bypass_permissions=bypass),
        plugins=HarnessPluginsSection.model_construct(enabled=plugins_enabled, marketplace_repo=repo),
        workspace_root=root,
        harness_args=args,
        complete_onboarding=onboarding,
        approve_api_key=approve_key,
    )


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace root with one worktree checkout under it."""
    checkout = tmp_path / "ws" / ".worktrees" / "github.com" / "octo" / "repo" / "github-octo-repo-15"
    checkout.mkdir(parents=True)
    return tmp_path / "ws"


def checkout(ws: Path) -> Path:
    return ws / ".worktrees" / "github.com" / "octo" / "repo" / "github-octo-repo-15"


# ---------------------------------------------------------------------------------------------- what is written


def test_c27_both_keys_on_the_spawn_dir_and_trust_only_on_the_root(home: Path, ws: Path, claude_config: Load) -> None:
    adapter = ClaudeAdapter(claude_config(routing={"workspace": {"root": str(ws)}}))

    applied = adapter.prepare(checkout(ws))

    projects = read(home / ".claude.json")["projects"]
    assert projects == {
        str(checkout(ws)): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True},
        str(ws): {"hasTrustDialogAccepted": True},
    }
    settings = read(home / ".claude" / "settings.json")
    assert settings == {
        "extraKnownMarketplaces": {"the-loop": {"source": {"source": "github", "repo": REPO}}},
        "enabledPlugins": {"the-loop@the-loop": True},
    }
    assert applied == [
        str(checkout(ws)),
        str(ws),
        str(home / ".claude.json"),
        str(home / ".claude" / "settings.json"),
    ]


def test_c27_scope_directory_trusts_the_spawn_dir_alone(home: Path, ws: Path) -> None:
    prepare(checkout(ws), root=ws, scope="directory")

    assert list(read(home / ".claude.json")["projects"]) == [str(checkout(ws))]


@pytest.mark.parametrize("case", ["home", "slash", "elsewhere", "sibling-prefix"])
def test_c27_a_root_too_broad_or_not_containing_the_dir_is_dropped(
    home: Path, tmp_path: Path, ws: Path, case: str
) -> None:
    if case == "home":
        cwd, root = home / "src" / "repo", home
    elif case == "slash":
        cwd, root = checkout(ws), Path("/")
    elif case == "elsewhere":
        cwd, root = checkout(ws), tmp_path / "other-root"
    else:  # "/…/ws" is a string prefix of "/…/ws2/x", not one of its directories
        cwd, root = tmp_path / "ws2" / "x", ws
    cwd.mkdir(parents=True, exist_ok=True)

    prepare(cwd, root=root)

    assert list(read(home / ".claude.json")["projects"]) == [str(cwd)]


def test_r40_a_symlinked_spawn_dir_is_trusted_under_both_spellings(home: Path, ws: Path, tmp_path: Path) -> None:
    link = tmp_path / "short"
    link.symlink_to(checkout(ws))

    prepare(link / ".", root=None)

    projects = read(home / ".claude.json")["projects"]
    assert set(projects) == {str(link), str(checkout(ws))}
    assert all(entry["hasCompletedProjectOnboarding"] is True for entry in projects.values())


def test_r45_only_the_named_keys_change_and_everything_else_is_kept(home: Path, ws: Path) -> None:
    existing = {
        "numStartups": 7,
        "projects": {str(checkout(ws)): {"allowedTools": ["Bash"], "hasTrustDialogAccepted": False}, "/x": {"a": 1}},
    }
    (home / ".claude.json").write_text(json.dumps(existing))
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"model": "opus", "enabledPlugins": {"other@m": True}}))

    prepare(checkout(ws))

    config = read(home / ".claude.json")
    assert config["numStartups"] == 7 and config["projects"]["/x"] == {"a": 1}
    assert config["projects"][str(checkout(ws))] == {
        "allowedTools": ["Bash"],
        "hasTrustDialogAccepted": True,
        "hasCompletedProjectOnboarding": True,
    }
    settings = read(home / ".claude" / "settings.json")
    assert settings["model"] == "opus"
    assert settings["enabledPlugins"] == {"other@m": True, "the-loop@the-loop": True}
    assert "bypassPermissionsModeAccepted" not in config and "skipDangerousModePermissionPrompt" not in settings


def test_c27_a_second_spawn_writes_nothing(home: Path, ws: Path) -> None:
    prepare(checkout(ws), root=ws)
    files = [home / ".claude.json", home / ".claude" / "settings.json"]
    before = [(path.stat().st_mtime_ns, path.stat().st_ino) for path in files]

    assert prepare(checkout(ws), root=ws) == []

    assert [(path.stat().st_mtime_ns, path.stat().st_ino) for path in files] == before


def test_r45_new_files_are_0600_and_an_existing_files_mode_is_kept(home: Path, ws: Path) -> None:
    (home / ".claude.json").write_text("{}")
    (home / ".claude.json").chmod(0o640)

    prepare(checkout(ws))

    assert (home / ".claude.json").stat().st_mode & 0o777 == 0o640
    assert (home / ".claude" / "settings.json").stat().st_mode & 0o777 == 0o600


def test_r45_a_symlinked_config_file_stays_a_link_and_its_target_is_updated(
    home: Path, ws: Path, tmp_path: Path
) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "claude.json").write_text('{"theme": "dark"}')
    (dotfiles / "claude.json").chmod(0o644)
    (home / ".claude.json").symlink_to(dotfiles / "claude.json")

    prepare(checkout(ws))

    assert (home / ".claude.json").is_symlink()
    assert os.readlink(home / ".claude.json") == str(dotfiles / "claude.json")
    target = read(dotfiles / "claude.json")
    assert target["theme"] == "dark" and target["projects"][str(checkout(ws))]["hasTrustDialogAccepted"] is True
    assert (dotfiles / "claude.json").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in dotfiles.iterdir()) == ["claude.json", "claude.json.the-loop.lock"]  # no temp left


@pytest.mark.parametrize(
    "content",
    ['{"projects": {', "", "[1, 2]", '{"projects": []}', '{"projects": {"%s": true}}'],
    ids=["truncated", "empty", "array", "projects-not-object", "entry-not-object"],
)
def test_c27_a_config_file_that_does_not_parse_is_left_byte_identical(home: Path, ws: Path, content: str) -> None:
    raw = (content % checkout(ws) if "%s" in content else content).encode()
    (home / ".claude.json").write_bytes(raw)
    mtime = (home / ".claude.json").stat().st_mtime_ns

    with pytest.raises(PrepareError, match=r"\.claude\.json") as failure:
        prepare(checkout(ws))

    assert (home / ".claude.json").read_bytes() == raw
    assert (home / ".claude.json").stat().st_mtime_ns == mtime
    # The other file is still prepared, and the error says so.
    assert read(home / ".claude" / "settings.json")["enabledPlugins"] == {"the-loop@the-loop": True}
    assert "applied: " in str(failure.value) and "settings.json" in str(failure.value)


def test_c27_claude_config_dir_redirects_every_write(home: Path, ws: Path, tmp_path: Path, monkeypatch: Any) -> None:
    config_dir = tmp_path / "claude-config"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config_dir))

    applied = prepare(checkout(ws), args=("--dangerously-skip-permissions",))

    assert sorted(p.name for p in config_dir.iterdir() if not p.name.endswith(".lock")) == [
        ".claude.json",
        "settings.json",
    ]
    assert read(config_dir / ".claude.json")["bypassPermissionsModeAccepted"] is True
    assert read(config_dir / "settings.json")["skipDangerousModePermissionPrompt"] is True
    assert list(home.iterdir()) == []  # nothing under the real home
    assert str(config_dir / ".claude.json") in applied and str(config_dir / "settings.json") in applied


def test_r42_a_legacy_config_json_in_the_config_dir_wins(home: Path, ws: Path) -> None:
    (home / ".claude").mkdir()
    (home / ".claude" / ".config.json").write_text("{}")

    assert ClaudePaths.from_env().config_file == home / ".claude" / ".config.json"
    prepare(checkout(ws))

    assert str(checkout(ws)) in read(home / ".claude" / ".config.json")["projects"]
    assert not (home / ".claude.json").exists()


# ------------------------------------------------------------------------------------------ plugin and bypass


def test_c28_an_existing_false_stays_false_and_an_existing_marketplace_is_kept(home: Path, ws: Path) -> None:
    (home / ".claude").mkdir()
    mine = {"source": {"source": "github", "repo": "me/fork"}}
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"enabledPlugins": {"the-loop@the-loop": False}, "extraKnownMarketplaces": {"the-loop": mine}})
    )
    mtime = (home / ".claude" / "settings.json").stat().st_mtime_ns

    applied = prepare(checkout(ws))

    settings = read(home / ".claude" / "settings.json")
    assert settings["enabledPlugins"]["the-loop@the-loop"] is False
    assert settings["extraKnownMarketplaces"]["the-loop"] == mine
    assert (home / ".claude" / "settings.json").stat().st_mtime_ns == mtime
    assert str(home / ".claude" / "settings.json") not in applied


def test_c28_the_marketplace_is_added_only_where_absent(home: Path, ws: Path) -> None:
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"enabledPlugins": {"the-loop@the-loop": False}}))

    prepare(checkout(ws))

    settings = read(home / ".claude" / "settings.json")
    assert settings["extraKnownMarketplaces"] == {"the-loop": {"source": {"source": "github", "repo": REPO}}}
    assert settings["enabledPlugins"] == {"the-loop@the-loop": False}


def test_r44_an_empty_marketplace_repo_enables_the_plugin_without_a_marketplace(home: Path, ws: Path) -> None:
    prepare(checkout(ws), repo="")

    assert read(home / ".claude" / "settings.json") == {"enabledPlugins": {"the-loop@the-loop": True}}


def test_c28_a_marketplace_repo_that_is_not_owner_repo_is_refused(home: Path, ws: Path, claude_config: Load) -> None:
    with pytest.raises(ConfigError, match=r"routing\.harnessPlugins\.marketplaceRepo"):
        claude_config(routing={"harnessPlugins": {"marketplaceRepo": "a/b; rm"}})
    # Even a section that skipped validation never writes it.
    with pytest.raises(PrepareError, match="not OWNER/REPO"):
        prepare(checkout(ws), repo="a/b; rm -rf ~")
    assert not (home / ".claude" / "settings.json").exists()
    assert read(home / ".claude.json")["projects"]  # trust was still written


@pytest.mark.parametrize(
    ("mode", "args", "written"),
    [
        ("auto", ("--dangerously-skip-permissions",), True),
        ("auto", ("--permission-mode=bypassPermissions",), True),
        ("auto", ("--verbose", "--permission-mode", "bypassPermissions"), True),
        ("auto", ("--permission-mode", "acceptEdits"), False),
        ("auto", (), False),
        ("always", (), True),
        ("never", ("--dangerously-skip-permissions",), False),
    ],
)
def test_c28_bypass_keys_follow_accept_bypass_permissions(
    home: Path, ws: Path, mode: str, args: tuple[str, ...], written: bool
) -> None:
    prepare(checkout(ws), bypass=mode, args=args)

    config = read(home / ".claude.json")
    settings = read(home / ".claude" / "settings.json")
    assert config.get("bypassPermissionsModeAccepted") is (True if written else None)
    assert settings.get("skipDangerousModePermissionPrompt") is (True if written else None)


def test_c28_bypass_through_the_adapter_reads_harness_args(home: Path, ws: Path, claude_config: Load) -> None:
    routing = {"harnessArgs": {"claude": ["--dangerously-skip-permissions"]}}
    flagged = ClaudeAdapter(claude_config(routing=routing, claude={"sandbox": True}))
    flagged.prepare(checkout(ws))
    assert read(home / ".claude" / "settings.json")["skipDangerousModePermissionPrompt"] is True


def test_each_step_can_be_turned_off_on_its_own(home: Path, ws: Path) -> None:
    prepare(checkout(ws), trust_enabled=False, onboarding=False)
    assert not (home / ".claude.json").exists()
    assert read(home / ".claude" / "settings.json")["enabledPlugins"] == {"the-loop@the-loop": True}

    (home / ".claude" / "settings.json").unlink()
    prepare(checkout(ws), plugins_enabled=False)
    assert not (home / ".claude" / "settings.json").exists()
    assert str(checkout(ws)) in read(home / ".claude.json")["projects"]

    (home / ".claude.json").unlink()
    assert prepare(checkout(ws), trust_enabled=False, plugins_enabled=False, onboarding=False) == []
    assert not (home / ".claude.json").exists() and not (home / ".claude" / "settings.json").exists()


def test_a_fresh_home_gets_onboarding_done_and_the_inherited_api_key_approved_by_its_last_20_characters(
    home: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-ant-api03-" + "k" * 40 + "0123456789abcdefghij"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    prepare(checkout(ws), plugins_enabled=False)
    config = read(home / ".claude.json")
    assert config["hasCompletedOnboarding"] is True
    assert config["customApiKeyResponses"] == {"approved": ["0123456789abcdefghij"]}
    assert key not in (home / ".claude.json").read_text()  # only the tail Claude Code itself records
    mtime = (home / ".claude.json").stat().st_mtime_ns
    prepare(checkout(ws), plugins_enabled=False)
    assert (home / ".claude.json").stat().st_mtime_ns == mtime  # nothing left to write


def test_an_api_key_already_answered_is_left_as_answered(home: Path, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-rejected-once-0123456789ABCDEFGHIJ")
    tail = "0123456789ABCDEFGHIJ"
    (home / ".claude.json").write_text(
        json.dumps({"customApiKeyResponses": {"approved": ["other"], "rejected": [tail]}})
    )
    with pytest.raises(PrepareError, match=r"customApiKeyResponses\.rejected"):
        prepare(checkout(ws), plugins_enabled=False)
    config = read(home / ".claude.json")
    assert config["customApiKeyResponses"] == {"approved": ["other"], "rejected": [tail]}  # the answer stays
    assert config["hasCompletedOnboarding"] is True  # and the rest of the file was still prepared


def test_no_api_key_and_approval_turned_off_write_no_answer(
    home: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    prepare(checkout(ws), plugins_enabled=False)
    assert "customApiKeyResponses" not in read(home / ".claude.json")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-0123456789abcdefghijklmnop")
    prepare(checkout(ws), plugins_enabled=False, approve_key=False, onboarding=False)
    assert "customApiKeyResponses" not in read(home / ".claude.json")


def test_r45_a_write_waits_for_the_files_lock(home: Path, ws: Path, hold_lock: Any) -> None:
    (home / ".claude").mkdir()
    holder = hold_lock(home / ".claude.json.the-loop.lock", "empty")
    done = threading.Event()
    thread = threading.Thread(target=lambda: (prepare(checkout(ws), plugins_enabled=False), done.set()))
    thread.start()

    assert not done.wait(0.5)
    assert not (home / ".claude.json").exists()
    holder.process.kill()
    holder.process.wait()
    thread.join(10)

    assert done.is_set() and read(home / ".claude.json")["projects"]
