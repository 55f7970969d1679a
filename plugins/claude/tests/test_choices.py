"""Claude Code's model and effort arguments, and how a verdict on each is measured without spending a token: the
effort levels the real ``claude --help`` lists, and the model ids the fake Anthropic API's ``GET /v1/models`` lists
on loopback for the credential the session's pane would get."""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop.config import LoadedConfig, load_config
from the_loop.sessions import models
from the_loop.testing import LoopEnv
from the_loop.testing.fake_anthropic import FakeAnthropic
from the_loop_claude import choices
from the_loop_claude import plugin as claude_plugin
from the_loop_claude.adapter import ClaudeAdapter

Load = Callable[..., LoadedConfig]
KEY = "sk-ant-api03-choices-0123456789-abcdefghijklmnopqrstuvwxyz-BBBB"
IDS = ("claude-opus-4-1-20250805", "claude-sonnet-4-5-20250929", "claude-3-5-haiku-20241022")
CREDENTIALS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN")


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    """The fake API on loopback listing :data:`IDS`; the environment points at it and holds no credential yet."""
    for name in (*CREDENTIALS, "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "")  # recorded, so what a test (or env.file) sets here is undone after it
        monkeypatch.delenv(name)
    with FakeAnthropic(tmp_path / "anthropic-api.jsonl", models=IDS) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        yield fake


def listings(api: FakeAnthropic) -> list[dict[str, Any]]:
    return [request for request in api.requests() if request["path"] == "/v1/models"]


def test_the_mapping_is_claude_codes_own_model_and_effort_options(claude_config: Load, home: Path) -> None:
    adapter = ClaudeAdapter(claude_config())
    assert adapter.model_args("opus") == ["--model", "opus"]
    assert adapter.effort_args("high") == ["--effort", "high"]


# ------------------------------------------------------------------------------------------------- effort


def test_effort_levels_are_read_from_the_real_claude_help(claude_config: Load, claude_binary: Path, home: Path) -> None:
    adapter = ClaudeAdapter(claude_config(claude={"binary": str(claude_binary)}))

    assert [adapter.check_choice("effort", level) for level in ("low", "medium", "high", "xhigh", "max")] == ["ok"] * 5
    assert adapter.check_choice("effort", "turbo") == "refused"
    assert adapter.check_choice("effort", "HIGH") == "refused"
    assert not list(home.iterdir())  # --help wrote nothing: no login, no first-run files


def test_an_effort_is_unknown_when_the_help_cannot_be_read(claude_config: Load, home: Path, tmp_path: Path) -> None:
    failing = tmp_path / "claude"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(failing.stat().st_mode | stat.S_IXUSR)

    for binary in (tmp_path / "missing", failing):
        adapter = ClaudeAdapter(claude_config(claude={"binary": str(binary)}))
        assert adapter.check_choice("effort", "high") == "unknown"


@pytest.mark.parametrize(
    ("text", "levels"),
    [
        ("  --effort <level>   Effort level (low, high)\n  --model <m>   Model (a, b)\n", ["low", "high"]),
        (
            "  --effort <level>  Effort level for the\n                    session (low,\n                    max)\n",
            ["low", "max"],
        ),
        ("  --model <model>   Model (e.g. 'opus', or 'sonnet')\n", None),
        ("  --effort <level>   Effort level for the session\n  --fork   Fork (a, b)\n", None),
    ],
    ids=["one-line", "wrapped", "no-effort-option", "no-list"],
)
def test_the_effort_list_is_the_options_own_parenthesized_list(text: str, levels: list[str] | None) -> None:
    assert choices.effort_levels(text) == levels


# -------------------------------------------------------------------------------------------------- model


def test_a_model_is_ok_when_listed_or_an_alias_of_a_listed_id_and_refused_otherwise(
    claude_config: Load, home: Path, api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    adapter = ClaudeAdapter(claude_config())

    verdicts = {
        name: adapter.check_choice("model", name)
        for name in ("opus", "sonnet", "haiku", "sonnet[1m]", IDS[1], f"{IDS[1]}[1m]", "fable", "son", "claude-opus")
    }

    assert verdicts == {
        "opus": "ok",
        "sonnet": "ok",
        "haiku": "ok",
        "sonnet[1m]": "ok",
        IDS[1]: "ok",
        f"{IDS[1]}[1m]": "ok",
        "fable": "refused",
        "son": "refused",  # a word of an id, not part of one
        "claude-opus": "refused",  # a name with a dash is a full id, and no id is that
    }
    [request] = listings(api)  # one listing answers every name
    assert request["method"] == "GET" and request["credentials"] == ["x-api-key"]
    assert KEY not in json.dumps(api.requests())


def test_the_listing_follows_every_page(tmp_path: Path) -> None:
    ids = [f"claude-m{i}-2025" for i in range(1500)]
    with FakeAnthropic(tmp_path / "paged.jsonl", models=ids) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": KEY}
        assert choices.list_models(env) == ids
        assert len(listings(fake)) == 2


def test_a_bearer_token_is_used_when_there_is_no_api_key(
    claude_config: Load, home: Path, api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "bearer-for-choices")

    assert ClaudeAdapter(claude_config()).check_choice("model", "opus") == "ok"
    assert [request["credentials"] for request in listings(api)] == [["authorization"]]


def test_without_a_credential_the_api_is_not_asked_and_the_verdict_is_unknown(
    claude_config: Load, home: Path, api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "a-subscription-login")  # not something /v1/models lists for

    assert ClaudeAdapter(claude_config()).check_choice("model", "opus") == "unknown"
    assert listings(api) == []


def test_a_refusing_api_is_unknown(claude_config: Load, home: Path, api: FakeAnthropic, monkeypatch: Any) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"{api.url}/elsewhere")  # a 404 route, as a wrong base URL answers

    assert ClaudeAdapter(claude_config()).check_choice("model", "opus") == "unknown"


def test_an_unreachable_api_is_unknown(claude_config: Load, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)

    assert ClaudeAdapter(claude_config()).check_choice("model", "opus") == "unknown"


def test_the_api_is_asked_with_what_the_pane_would_get_so_a_key_withheld_from_sessions_is_not_used(
    tmp_path: Path, plugin_host: Any, home: Path, api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_host.register(claude_plugin, "claude")
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"ANTHROPIC_API_KEY={KEY}\n")
    secrets.chmod(0o600)
    path = tmp_path / "cfg" / "cli-config.yaml"
    path.parent.mkdir()

    def adapter(passthrough: list[str]) -> ClaudeAdapter:
        env = {"file": str(secrets), "sessionPassthrough": passthrough}
        path.write_text(yaml.safe_dump({"version": "0.12.0", "env": env}))
        return ClaudeAdapter(load_config(path, plugin_host))

    assert adapter([]).check_choice("model", "opus") == "unknown"  # env.file's names never reach a session
    assert listings(api) == []
    assert os.environ["ANTHROPIC_API_KEY"] == KEY  # loaded into this process all the same
    assert adapter(["ANTHROPIC_API_KEY"]).check_choice("model", "opus") == "ok"


# ------------------------------------------------------------------------------------------- end to end


def test_models_check_measures_claude_against_its_help_and_the_api_and_list_shows_it(
    loop_env: LoopEnv, claude_binary: Path, api: FakeAnthropic
) -> None:
    loop_env.write_config(
        {
            "version": "0.12.0",
            "models": ["opus", "fable"],
            "effort": ["high", "turbo"],
            "routing": {"harnessArgs": {"claude": ["--permission-mode", "acceptEdits"]}},
            "integrations": {"claude": {"binary": str(claude_binary)}},
        }
    )
    env = {"THE_LOOP_LOAD_PLUGINS": "claude", "ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": KEY}

    checked = loop_env.run("models", "check", **env)

    assert checked.returncode == 0, checked.stderr
    assert [line.split()[:4] for line in checked.stdout.splitlines()] == [
        ["claude", "model", "opus", "ok"],
        ["claude", "model", "fable", "refused"],
        ["claude", "effort", "high", "ok"],
        ["claude", "effort", "turbo", "refused"],
    ]
    assert KEY not in checked.stdout + checked.stderr
    stored = (loop_env.root / "local" / "model-verdicts.json").read_text()
    assert KEY not in stored
    assert json.loads(stored)["verdicts"][0]["argsDigest"] == models.args_digest(
        ["--permission-mode", "acceptEdits", "--model", "opus"]
    )
    assert len(listings(api)) == 1
    listed = loop_env.run("models", "list", "--format", "json", **env)
    assert [(row["name"], row["verdict"]) for row in json.loads(listed.stdout)["verdicts"]] == [
        ("opus", "ok"),
        ("fable", "refused"),
        ("high", "ok"),
        ("turbo", "refused"),
    ]
