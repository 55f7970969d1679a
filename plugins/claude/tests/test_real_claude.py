"""What only the real Claude Code shows: credentials, its environment, running as root, and ids it cannot take.

Each runs the pinned Claude Code CLI offline against the fake Anthropic API, through the conformance kit's rig.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop.state.registry import Endpoint
from the_loop.testing import LoopEnv
from the_loop.testing.conformance import REF, Rig, hermetic_path, rig_for
from the_loop_claude.conformance import BYPASS_ARGS, TEST_API_KEY, ClaudeKit


@pytest.fixture
def keyless(
    tmp_path: Path, claude_binary: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any
) -> Iterator[Rig]:
    """ANTHROPIC_API_KEY unset; the credential comes as ANTHROPIC_AUTH_TOKEN."""
    yield from rig_for(ClaudeKit(tmp_path, claude_binary, api_key=None), tmp_path, plugin_host, monkeypatch, request)


@pytest.fixture
def keyed(
    tmp_path: Path, claude_binary: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any
) -> Iterator[Rig]:
    yield from rig_for(ClaudeKit(tmp_path, claude_binary), tmp_path, plugin_host, monkeypatch, request)


def user_config(rig: Rig) -> dict[str, Any]:
    return json.loads((rig.kit.home / ".claude.json").read_text())


def test_an_exported_api_key_is_approved_beforehand_so_no_dialog_eats_the_first_delivery(keyed: Rig) -> None:
    assert keyed.dispatch("Start here.", spawn=True).status == "spawned"
    keyed.wait_received("Start here.")
    assert keyed.dispatch("The first delivery.").status == "delivered"
    keyed.wait_received("The first delivery.")
    config = user_config(keyed)
    assert config["hasCompletedOnboarding"] is True
    assert config["customApiKeyResponses"]["approved"] == [TEST_API_KEY[-20:]]
    assert TEST_API_KEY[-20:] not in config["customApiKeyResponses"].get("rejected", [])
    conversation = [r for r in keyed.kit.api.requests() if r["path"] == "/v1/messages" and r["body"].get("tools")]
    assert conversation and all(r["credentials"] == ["x-api-key"] for r in conversation)


def test_without_an_api_key_nothing_is_approved_and_another_credential_still_works(keyless: Rig) -> None:
    assert keyless.dispatch("Start here.", spawn=True).status == "spawned"
    keyless.wait_received("Start here.")
    assert "customApiKeyResponses" not in user_config(keyless)
    conversation = [r for r in keyless.kit.api.requests() if r["path"] == "/v1/messages" and r["body"].get("tools")]
    assert conversation and all(r["credentials"] == ["authorization"] for r in conversation)


def test_sessions_run_without_the_auto_updater_and_as_root_in_the_sandbox_they_were_declared(keyed: Rig) -> None:
    assert keyed.dispatch("Start here.", spawn=True).ok
    keyed.wait_received("Start here.")
    pane = subprocess.run(
        [*keyed.runner.command_prefix, "list-panes", "-t", f"={keyed.own().tmux_target}:", "-F", "#{pane_pid}"],
        capture_output=True,
        text=True,
        check=True,
    )
    environ = Path(f"/proc/{pane.stdout.split()[0]}/environ").read_bytes().split(b"\0")
    assert b"DISABLE_AUTOUPDATER=1" in environ
    assert (b"IS_SANDBOX=1" in environ) is (os.geteuid() == 0)  # the kit declares the sandbox only as root
    assert not [v for v in environ if v.startswith((b"GH_TOKEN=", b"THE_LOOP_GH_WEBHOOK_SECRET="))]


@pytest.mark.skipif(os.geteuid() != 0, reason="Claude Code's root check applies only to root")
def test_as_root_claude_in_a_bypass_mode_exits_at_once_without_is_sandbox(claude_binary: Path, tmp_path: Path) -> None:
    """Why the config refuses it: the real CLI's own answer, held to what the adapter assumes."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": hermetic_path(tmp_path / "sysbin"), "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    result = subprocess.run(
        [str(claude_binary), *BYPASS_ARGS, "-p", "hello"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "root" in (result.stdout + result.stderr).lower()


def test_config_validate_refuses_a_bypass_mode_as_root_unless_the_box_is_declared_a_sandbox(loop_env: LoopEnv) -> None:
    routing = {"defaultHarness": "claude", "harnessArgs": {"claude": BYPASS_ARGS}}
    loop_env.write_config(yaml.safe_dump({"version": "0.12.0", "routing": routing}))
    refused = loop_env.run("config", "validate")
    if os.geteuid() == 0:
        assert refused.returncode == 2
        [line] = refused.stderr.strip().splitlines()
        assert line.startswith("error:") and "integrations.claude" in line and "sandbox: true" in line
        assert "Traceback" not in refused.stderr
    else:
        assert refused.returncode == 0, refused.stderr
    document = {"version": "0.12.0", "routing": routing, "integrations": {"claude": {"sandbox": True}}}
    loop_env.write_config(yaml.safe_dump(document))
    assert loop_env.run("config", "validate").returncode == 0


@pytest.mark.parametrize("bad", ["my-conv", "0a4d1f0e2c5b4d8e9f613b7c2a9e5d10"])
def test_sessions_register_refuses_an_id_claude_cannot_resume(loop_env: LoopEnv, bad: str) -> None:
    loop_env.write_config(yaml.safe_dump({"version": "0.12.0", "integrations": {"claude": {"sandbox": True}}}))
    result = loop_env.run(
        "sessions", "register", "--work-item", "github:octo/repo#1", "--harness", "claude", "--harness-session-id", bad
    )
    assert result.returncode == 2
    assert "is not a conversation id claude can resume" in result.stderr
    assert not (loop_env.root / "local" / "github-octo-repo-1.json").exists()


def test_a_recorded_id_claude_cannot_take_is_never_resumed_and_the_event_starts_a_fresh_conversation(
    keyed: Rig,
) -> None:
    """A record written by hand or by an older version holds ``my-conv``: ``claude --resume my-conv`` would open
    the interactive picker, so it is never run."""
    keyed.dispatcher.registry.update(
        REF, lambda r: r.sessions.update({REF: Endpoint("claude", "my-conv", str(keyed.work), status="active")})
    )
    outcome = keyed.dispatch("A comment for the registered conversation.")
    assert outcome.status == "respawned", outcome
    keyed.wait_received("A comment for the registered conversation.")
    [failed] = keyed.events("session.resume_failed")
    assert failed["error"] == "no valid recorded session id"
    assert keyed.own().harness_session_id != "my-conv"
