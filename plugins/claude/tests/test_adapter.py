"""The Claude adapter's argv: fresh and resumed conversations, harnessArgs, unattended arguments, the binary, and
the id check that keeps a ``--flag`` out of any argv. Scenario ids are from sessions-runner-harness.md."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from the_loop.config import ConfigError, LoadedConfig
from the_loop.interfaces import Launch
from the_loop.sessions.harness import HarnessError, adapter_for, launch_argv
from the_loop.testing import LoopEnv
from the_loop_claude.adapter import ClaudeAdapter

SESSION = "0b3e3f52-8a4c-4c1e-9d0f-2f4a1f7d9b10"
PROMPT = "- work on fake:octo/repo#15\n\nsecond line; $(rm -rf ~) `x` 'quoted'"
Load = Callable[..., LoadedConfig]


@pytest.fixture
def claude_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable named ``claude`` first on PATH."""
    directory = tmp_path / "bin"
    directory.mkdir()
    binary = directory / "claude"
    binary.write_text("#!/bin/sh\nexit 0\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")
    return binary


def launch(session_id: str = SESSION, prompt: str = PROMPT) -> Launch:
    return Launch(prompt=prompt, session_id=session_id, cwd=Path("/srv/work"), args=())


def with_args(config: LoadedConfig, session_id: str = SESSION) -> Launch:
    from the_loop.config import harness_args

    return Launch(prompt=PROMPT, session_id=session_id, cwd=Path("/srv/work"), args=harness_args(config, "claude"))


def test_r7_fresh_argv_is_flags_first_and_the_prompt_last_as_one_word(claude_config: Load, claude_bin: Path) -> None:
    config = claude_config(routing={"harnessArgs": {"claude": ["--permission-mode", "acceptEdits"]}})
    adapter = adapter_for("claude", config)

    argv = launch_argv(adapter, with_args(config), resume=False)

    assert argv == [
        str(claude_bin),
        "--session-id",
        SESSION,
        "--permission-mode",
        "acceptEdits",
        "--disallowedTools=AskUserQuestion",
        "--",
        PROMPT,
    ]


def test_r19_resume_argv_names_the_recorded_id(claude_config: Load, claude_bin: Path) -> None:
    config = claude_config(routing={"harnessArgs": {"claude": ["--verbose"]}})
    argv = launch_argv(adapter_for("claude", config), with_args(config), resume=True)

    assert argv[:4] == [str(claude_bin), "--resume", SESSION, "--verbose"]
    assert argv[-2:] == ["--", PROMPT]
    assert "--session-id" not in argv


def test_r24_unattended_args_follow_harness_args_and_cli_mode_has_none(claude_config: Load, claude_bin: Path) -> None:
    args = {"harnessArgs": {"claude": ["--model", "opus"]}}
    config = claude_config(routing=args)
    unattended = ClaudeAdapter(config).fresh_argv(with_args(config))
    config = claude_config(routing={**args, "interaction": {"mode": "cli"}})
    attended = ClaudeAdapter(config).fresh_argv(with_args(config))

    assert unattended[3:7] == ["--model", "opus", "--disallowedTools=AskUserQuestion", "--"]
    assert "--disallowedTools=AskUserQuestion" not in attended
    assert attended[3:6] == ["--model", "opus", "--"]
    # An unknown mode reads as work-item, which is unattended.
    odd = ClaudeAdapter(claude_config(routing={"interaction": {"mode": "slack"}}))
    assert odd.config.core.routing.interaction.mode == "work-item"
    assert "--disallowedTools=AskUserQuestion" in odd.fresh_argv(launch())


def test_a_prompt_that_looks_like_a_flag_stays_the_prompt(claude_config: Load, claude_bin: Path) -> None:
    argv = ClaudeAdapter(claude_config()).fresh_argv(launch(prompt="--dangerously-skip-permissions"))

    assert argv[-2:] == ["--", "--dangerously-skip-permissions"]
    assert argv.count("--dangerously-skip-permissions") == 1


@pytest.mark.parametrize(
    "bad", ["--help", "-x", "", "a b", "../etc", "x" * 129, "my-conv", "0a4d1f0e-2c5b-4d8e-9f61-3b7c2a9e5d1", "0" * 32]
)
def test_a_flag_junk_or_any_non_uuid_never_reaches_an_argv_as_a_conversation_id(
    claude_config: Load, claude_bin: Path, bad: str
) -> None:
    """Claude Code's ``--session-id`` takes only a UUID, and ``--resume <other word>`` opens an interactive picker
    that a probe would read as a live session."""
    adapter = adapter_for("claude", claude_config())

    assert not adapter.accepts_session_id(bad)
    for resume in (True, False):
        with pytest.raises(HarnessError, match="is not a conversation id claude accepts"):
            launch_argv(adapter, launch(session_id=bad), resume=resume)
    with pytest.raises(HarnessError, match=r"is not a Claude Code conversation id \(a UUID\)"):
        adapter.fresh_argv(launch(session_id=bad))


def test_the_binary_is_configurable_and_resolved_on_path(claude_config: Load, claude_bin: Path, tmp_path: Path) -> None:
    other = tmp_path / "opt" / "claude-code"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)

    assert ClaudeAdapter(claude_config()).fresh_argv(launch())[0] == str(claude_bin)
    assert ClaudeAdapter(claude_config(claude={"binary": str(other)})).fresh_argv(launch())[0] == str(other)


def test_c18_a_binary_not_on_path_is_refused_before_any_spawn(claude_config: Load, claude_bin: Path) -> None:
    adapter = adapter_for("claude", claude_config(claude={"binary": "claude-not-installed"}))

    with pytest.raises(HarnessError, match="'claude-not-installed' not found on PATH"):
        launch_argv(adapter, launch(), resume=False)


@pytest.mark.parametrize("bad", ["", "--version", "-p"])
def test_a_binary_that_would_read_as_an_option_is_a_config_error(claude_config: Load, bad: str) -> None:
    with pytest.raises(ConfigError, match=r"integrations\.claude\.binary"):
        claude_config(claude={"binary": bad})


def test_the_adapter_declares_what_core_needs_to_host_it() -> None:
    capabilities = ClaudeAdapter.capabilities
    assert ClaudeAdapter.name == "claude"
    assert capabilities.tmux_hostable and capabilities.preassigned_session_id and capabilities.can_resume


def test_plugins_lists_the_claude_adapter_with_its_capabilities(loop_env: LoopEnv) -> None:
    listed = loop_env.run("plugins", "--format", "json", THE_LOOP_LOAD_PLUGINS="claude")
    text = loop_env.run("plugins", THE_LOOP_LOAD_PLUGINS="claude")

    assert listed.returncode == 0, listed.stderr
    claude = {plugin["name"]: plugin for plugin in json.loads(listed.stdout)}["claude"]
    assert claude["distribution"] == "the-loop-claude"
    assert claude["contributions"]["harnesses"] == ["claude"]
    assert claude["capabilities"] == {
        "claude": {
            "tmuxHostable": True,
            "preassignedSessionId": True,
            "canResume": True,
            "canInterrupt": True,
            "reportsUsage": True,
            "recognisesPrompts": True,
        }
    }
    listed_line = "  harnesses: claude (tmux-hostable, pre-assigned session id, can resume, "
    assert any(line.startswith(listed_line) for line in text.stdout.splitlines()), text.stdout


def test_claude_alone_is_a_valid_default_harness(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\nrouting: {enabled: true, defaultHarness: claude}\n')

    result = loop_env.run("config", "validate", THE_LOOP_LOAD_PLUGINS="claude")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("config OK:")


def test_the_conformance_kit_reads_a_paste_claude_code_wrapped_as_the_text_that_was_pasted() -> None:
    """Observed on a loaded machine: Claude Code hands a paste to the model between ``<pasted_content>`` tags."""
    from the_loop.sessions.tmux import unframed
    from the_loop_claude.conformance import unwrapped

    multi = "A review from hubot:\n\n- first point\n\n```\ncode block\n```\nend of review"
    seen = f'\n\n<pasted_content id="6f02">\n\n{multi}\n</pasted_content id="6f02">\n'
    assert unframed(unwrapped(seen)) == multi
    drafted = 'my half typed note\n\n<pasted_content id="a1">\n\nEvent: octocat commented.\n</pasted_content id="a1">'
    assert unframed(unwrapped(drafted)) == "my half typed note\nEvent: octocat commented."
    assert unwrapped("\nno wrapper here") == "\nno wrapper here"


# --------------------------------------------------------------------------------- problems (the-loop init)


def test_problems_name_a_missing_or_failing_claude_and_none_for_the_real_one(
    claude_config: Load, claude_bin: Path, claude_binary: Path, tmp_path: Path
) -> None:
    """``init`` asks the default harness whether it runs here: not on PATH, ``--version`` failing, and the pinned
    real Claude Code (offline: ``--version`` needs no login)."""
    [missing] = ClaudeAdapter(claude_config(claude={"binary": "claude-not-installed"})).problems()
    assert missing.problem == "Claude Code is not installed: 'claude-not-installed' is not on PATH"
    assert "npm install -g @anthropic-ai/claude-code" in missing.remedy

    claude_bin.write_text("#!/bin/sh\necho 'node: not found' >&2\nexit 127\n")
    [failing] = ClaudeAdapter(claude_config()).problems()
    assert failing.problem == f"Claude Code does not start: {claude_bin} --version exited 127 (node: not found)"

    assert ClaudeAdapter(claude_config(claude={"binary": str(claude_binary)})).problems() == []
