"""Issue 16 (7): what a session's environment never holds, seen in the harness process itself (real tmux)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from the_loop.testing.conformance import FakeHarnessKit, Rig, rig_for

SECRETS = {
    "OPENAI_API_KEY": "sk-openai-from-env-file",
    "DATABASE_URL": "postgres://app:db-password@db/app",
    "JIRA_API_TOKEN": "jira-token-from-env-file",
}


@pytest.fixture
def rig(tmp_path: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any) -> Iterator[Rig]:
    env_file = tmp_path / "secrets.env"
    env_file.write_text("".join(f"{name}={value}\n" for name, value in SECRETS.items()) + "SAFE_VAR=visible\n")
    env_file.chmod(0o600)
    for name in [*SECRETS, "SAFE_VAR"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOOK_TOKEN", "hook-bearer-token")
    extra = {
        "env": {"file": str(env_file), "sessionPassthrough": ["SAFE_VAR"]},
        # A remote hook's bearer token is a secret the config names; disabled, so nothing is called.
        "hooks": [{"name": "roster", "url": "https://hooks.example/", "tokenEnv": "HOOK_TOKEN", "enabled": False}],
    }
    yield from rig_for(FakeHarnessKit(tmp_path), tmp_path, plugin_host, monkeypatch, request, extra)
    for name in [*SECRETS, "SAFE_VAR"]:  # env.file wrote them into this process's environment
        monkeypatch.delenv(name, raising=False)


def pane_environ(rig: Rig) -> dict[str, str]:
    target = rig.own().tmux_target
    listing = subprocess.run(
        [*rig.runner.command_prefix, "list-panes", "-t", f"={target}:", "-F", "#{pane_pid}"],
        capture_output=True,
        text=True,
        check=True,
    )
    raw = Path(f"/proc/{listing.stdout.split()[0]}/environ").read_bytes()
    return dict(item.decode().split("=", 1) for item in raw.split(b"\0") if b"=" in item)


def test_env_file_variables_and_hook_tokens_never_reach_a_session_unless_passed_through(rig: Rig) -> None:
    assert rig.dispatch("Start here.", spawn=True).status == "spawned"
    environ = pane_environ(rig)
    assert not {*SECRETS, "HOOK_TOKEN"} & set(environ), sorted(environ)
    assert environ["SAFE_VAR"] == "visible"  # listed in env.sessionPassthrough
    assert not [v for v in environ.values() if any(s in v for s in [*SECRETS.values(), "hook-bearer-token"])]
