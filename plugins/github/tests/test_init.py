"""``the-loop init --github`` and ``the-loop doctor github`` against the fake GitHub API, through the real CLI.

The first test is the first ten minutes of a new user (issue 18): ``init --github octo/demo`` with a token from
``GH_TOKEN`` or from a GitHub CLI that is logged in (a fake ``gh`` on PATH that prints the token), then ``the-loop
start``, then an issue armed on the fake: a session spawns with no edit of the config. The others are what goes wrong
on the way: a refused token, a repository the token cannot read, a missing label, a missing harness, an existing
config, each a finding with its remedy and an exit code, from ``init`` and from ``doctor github``.

Sessions run the fake harness (``the_loop.testing.fake_plugin``) on a tmux server of the test's own
(``TMUX_TMPDIR``), so the config init writes is used as written.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from fake_github import FakeGitHub

from the_loop.testing import LoopEnv, kill_lock_holders, wait_for

LABEL = "the-loop: auto-execute"
TOKEN = "tok-octocat"
INIT = ("init", "--github", "octo/demo", "--harness", "fake")


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(tokens={TOKEN: "octocat", "tok-other": "mallory"}, scopes={"octocat": "repo"}) as github:
        github.add_repo("octo/demo", labels=(LABEL,))
        yield github


@pytest.fixture
def env(loop_env: LoopEnv, fake: FakeGitHub) -> Iterator[LoopEnv]:
    """A new user's machine: nothing configured, a token in ``GH_TOKEN``, the fake harness installed."""
    for name in ("GH_TOKEN", "GITHUB_TOKEN"):
        loop_env.env.pop(name, None)
    logs = loop_env.tmp / "harness-logs"
    logs.mkdir()
    (loop_env.tmp / "tmux").mkdir()
    loop_env.env.update(
        GH_TOKEN=TOKEN,
        THE_LOOP_EXTRA_PLUGINS="the_loop.testing.fake_plugin",
        FAKE_HARNESS_LOG=str(logs / "{session}.jsonl"),
        TMUX_TMPDIR=str(loop_env.tmp / "tmux"),
    )
    yield loop_env
    kill_lock_holders(loop_env.root)
    subprocess.run(["tmux", "kill-server"], env=loop_env.env, capture_output=True, timeout=10, check=False)


def init(env: LoopEnv, fake: FakeGitHub, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return env.run(*INIT, "--api-url", fake.url, *args, **extra)


def written(env: LoopEnv) -> dict[str, Any]:
    return yaml.safe_load(env.config_path.read_text())


def gh_on_path(env: LoopEnv, token: str) -> None:
    """A GitHub CLI that is logged in: ``gh auth token`` prints ``token``; no token variable is set."""
    bin_dir = env.tmp / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(f'#!/bin/sh\n[ "$1 $2" = "auth token" ] && echo {token} && exit 0\necho "unknown" >&2; exit 1\n')
    gh.chmod(0o755)
    env.env.pop("GH_TOKEN")
    env.env["PATH"] = f"{bin_dir}{os.pathsep}{env.env['PATH']}"


def session_of(env: LoopEnv, number: int) -> dict[str, Any] | None:
    path = env.root / "local" / f"github-octo-demo-{number}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["sessions"].get(f"github:octo/demo#{number}")


@pytest.mark.parametrize("token_from", ["GH_TOKEN", "gh auth token"])
def test_init_start_and_an_armed_issue_spawns_a_session_with_no_edit(
    env: LoopEnv, fake: FakeGitHub, token_from: str
) -> None:
    if token_from == "gh auth token":
        gh_on_path(env, TOKEN)
    result = init(env, fake, "--poll-interval", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"[ok] the token from {token_from} is octocat's (scopes: repo)" in result.stdout
    assert "[ok] fake is installed and runs" in result.stdout
    assert f"wrote {env.config_path}" in result.stdout
    assert "next: label an issue 'the-loop: auto-execute' and comment `the-loop start` on it" in result.stdout
    config = written(env)
    assert config["routing"] == {
        "enabled": True,
        "defaultHarness": "fake",
        "spawnOnUnmatched": "labeled",
        "authorizedUsers": ["octocat"],
    }
    assert config["repositories"] == ["octo/demo"]
    assert config["polling"] == {"enabled": True, "intervalSeconds": 1, "sources": [{"provider": "github"}]}
    assert TOKEN not in env.config_path.read_text()  # the token is found again at run time, never written
    assert env.run("config", "validate").returncode == 0

    started = env.run("start")
    assert started.returncode == 0, started.stdout + started.stderr
    fake.add_issue("octo/demo", 7, title="Add a widget", labels=[LABEL], author="octocat")
    fake.add_comment("octo/demo", 7, "the-loop start", login="octocat")
    own = wait_for(lambda: (s := session_of(env, 7)) and s.get("tmuxTarget") and s, timeout=60)
    assert own["tmuxTarget"] == "loop-github-octo-demo-7"
    assert subprocess.run(["tmux", "has-session", "-t", "=loop-github-octo-demo-7"], env=env.env).returncode == 0
    doctor = env.run("doctor", "github")
    assert doctor.returncode == 0, doctor.stdout
    assert "[ok] the poller's last cycle" in doctor.stdout
    assert "[ok] the harness fake is installed and runs" in doctor.stdout
    assert env.run("stop").returncode == 0


def test_a_token_github_refuses_writes_nothing(env: LoopEnv, fake: FakeGitHub) -> None:
    result = init(env, fake, GH_TOKEN="not-a-token")
    assert result.returncode == 1
    assert "[!] GitHub refused the token from GH_TOKEN (401 Bad credentials)" in result.stdout
    assert "fix: replace it: export GH_TOKEN or GITHUB_TOKEN" in result.stdout
    assert "nothing written" in result.stdout and not env.config_path.exists()
    assert "not-a-token" not in result.stdout + result.stderr


def test_no_token_anywhere_writes_nothing_and_says_where_one_goes(env: LoopEnv, fake: FakeGitHub) -> None:
    env.env.pop("GH_TOKEN")
    result = init(env, fake)
    assert result.returncode == 1 and not env.config_path.exists()
    assert "[!] no GitHub token found" in result.stdout and "gh auth login" in result.stdout


def test_a_repository_the_token_cannot_read_writes_nothing(env: LoopEnv, fake: FakeGitHub) -> None:
    fake.add_repo("octo/secret", private=True, hidden_from=("octocat",))
    result = env.run("init", "--github", "octo/secret", "--api-url", fake.url, "--harness", "fake")
    assert result.returncode == 1
    assert "[!] octo/secret is not readable with octocat's token (404 Not Found)" in result.stdout
    assert not env.config_path.exists()


def test_a_token_without_the_scope_to_comment_is_a_finding(env: LoopEnv, fake: FakeGitHub) -> None:
    fake.scopes["octocat"] = "read:org"
    result = init(env, fake)
    assert result.returncode == 1
    assert "octocat's token cannot write comments on octo/demo (it has no repo or public_repo scope)" in result.stdout
    assert env.config_path.exists()  # the rest works: fix the token, then start


def test_a_missing_label_is_a_finding_and_created_when_asked(env: LoopEnv, fake: FakeGitHub) -> None:
    fake.add_repo("octo/bare")
    result = env.run("init", "--github", "octo/bare", "--api-url", fake.url, "--harness", "fake")
    assert result.returncode == 1
    assert "[!] the arming label 'the-loop: auto-execute' is not on octo/bare" in result.stdout
    assert "fix: create it: the-loop doctor github --create-label" in result.stdout
    assert written(env)["repositories"] == ["octo/bare"]  # written: the label can come later

    doctor = env.run("doctor", "github")
    assert doctor.returncode == 1 and "[!] the arming label" in doctor.stdout
    created = env.run("doctor", "github", "--create-label")
    assert "[ok] created the arming label 'the-loop: auto-execute' on octo/bare" in created.stdout
    assert LABEL in fake.defined_labels("octo/bare")
    again = env.run("doctor", "github")
    assert "[ok] the arming label 'the-loop: auto-execute' is on octo/bare" in again.stdout


def test_init_create_label_creates_it(env: LoopEnv, fake: FakeGitHub) -> None:
    fake.add_repo("octo/bare")
    result = env.run("init", "--github", "octo/bare", "--api-url", fake.url, "--harness", "fake", "--create-label")
    assert result.returncode == 0, result.stdout
    assert [call.body["name"] for call in fake.requests if call.method == "POST"] == [LABEL]


def test_the_interactive_form_asks_for_the_repository_and_the_label(env: LoopEnv, fake: FakeGitHub) -> None:
    fake.add_repo("octo/bare")
    result = env.run(
        "init", "--interactive", "--api-url", fake.url, "--harness", "fake",
        input="octo/bare\ny\n", THE_LOOP_LOAD_PLUGINS="github",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "GitHub repository to watch, as OWNER/REPO" in result.stdout
    assert "create the label 'the-loop: auto-execute' on octo/bare?" in result.stdout
    assert LABEL in fake.defined_labels("octo/bare") and written(env)["repositories"] == ["octo/bare"]


def test_a_missing_harness_is_a_finding(env: LoopEnv, fake: FakeGitHub) -> None:
    result = env.run("init", "--github", "octo/demo", "--api-url", fake.url)  # claude, which is not installed here
    assert result.returncode == 1
    assert "[!] Claude Code is not installed: 'claude' is not on PATH" in result.stdout
    assert "fix: npm install -g @anthropic-ai/claude-code" in result.stdout
    assert written(env)["routing"]["defaultHarness"] == "claude"
    doctor = env.run("doctor", "github")
    assert doctor.returncode == 1 and "[!] Claude Code is not installed: 'claude' is not on PATH" in doctor.stdout
    env.config_path.unlink()
    nosuch = init(env, fake, "--harness", "nosuch")
    assert nosuch.returncode == 1 and "'nosuch' is not an installed harness adapter" in nosuch.stdout


def test_an_existing_config_is_never_overwritten(env: LoopEnv, fake: FakeGitHub) -> None:
    env.write_config('version: "0.12.0"\n# mine\n')
    before = env.config_path.read_text()
    result = init(env, fake)
    assert result.returncode == 1
    assert "-# mine" in result.stdout and "+repositories:" in result.stdout  # the difference, as a diff
    assert f"not written: {env.config_path} exists" in result.stdout
    assert env.config_path.read_text() == before


def test_doctor_names_a_refused_token_and_an_unreadable_repository(env: LoopEnv, fake: FakeGitHub) -> None:
    assert init(env, fake).returncode == 0
    refused = env.run("doctor", "github", GH_TOKEN="not-a-token")
    assert refused.returncode == 1 and "[!] GitHub refused the token from GH_TOKEN" in refused.stdout
    hidden = env.run("doctor", "github", GH_TOKEN="tok-other")
    assert hidden.returncode == 1 and "octo/demo is readable" in hidden.stdout  # mallory can read a public repo
    fake.add_repo("octo/demo", private=True, hidden_from=("mallory",))
    hidden = env.run("doctor", "github", GH_TOKEN="tok-other")
    assert "[!] octo/demo is not readable with mallory's token (404 Not Found)" in hidden.stdout
    assert "[!] the poller has not finished a cycle yet" in hidden.stdout
