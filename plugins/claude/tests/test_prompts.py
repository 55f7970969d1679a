"""Claude Code's pane read: its decision prompts (the permission prompt, the folder trust dialog and the rewind menu
as the pinned Claude Code (2.1.332) drew them, captured with ``tmux capture-pane -p`` into ``screens/``), ordinary
screens (idle, a running turn, a queued message, a dialog that decides nothing, a prompt's words quoted in the
conversation) that are no prompt, and which of them read input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from the_loop.config import LoadedConfig
from the_loop.interfaces import PromptOption
from the_loop_claude.adapter import ClaudeAdapter
from the_loop_claude.pane import reads_input
from the_loop_claude.prompts import CANCEL, blocked_prompt

SCREENS = Path(__file__).parent / "screens"
POINTER = "\u276f"  # the cursor Claude Code's menus draw
PERMISSIONS = [
    "permission-bash-long-command.txt",
    "permission-bash-wide.txt",
    "permission-bash-wrapped-option.txt",
    "permission-bash-word-wrapped-option.txt",
]


def screen(name: str) -> str:
    return (SCREENS / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", PERMISSIONS)
def test_the_bash_permission_prompt_reads_as_its_question_and_four_numbered_answers(name: str) -> None:
    prompt = blocked_prompt(screen(name))

    assert prompt is not None
    assert prompt.text.startswith("Bash command\n") and prompt.text.endswith("\nDo you want to proceed?")
    assert "\nRun the command the test asked for\n" in prompt.text
    assert [(o.key, o.keys) for o in prompt.options] == [(k, (k,)) for k in "1234"] + [("esc", ("Escape",))]
    labels = [o.label for o in prompt.options]
    assert labels[0] == "Yes" and labels[3] == "No"
    assert labels[1].startswith("Yes, and always allow access to /tmp/wtc-exp/a/w") and labels[1].endswith(
        " from this project"
    )
    assert labels[2] == "Yes, and switch to auto mode · auto mode handles these prompts for you"
    assert prompt.option("yes") == prompt.options[0] and prompt.option("no") == prompt.options[3]
    assert prompt.option("2") == prompt.options[1] and prompt.option("esc") == CANCEL


def test_a_commands_wrapped_lines_lose_their_gutter_and_a_wrapped_label_is_joined_whole() -> None:
    long = blocked_prompt(screen("permission-bash-long-command.txt"))
    wrapped = blocked_prompt(screen("permission-bash-wrapped-option.txt"))

    assert long is not None and wrapped is not None
    assert "\ntouch x-four && echo\na-rather-long-argument-that-wraps-the-line-of-an-eighty-column-pane\n" in long.text
    word_wrapped = blocked_prompt(screen("permission-bash-word-wrapped-option.txt"))
    assert word_wrapped is not None and "\necho yes > approved\n" in word_wrapped.text
    assert word_wrapped.options[1].label == (
        "Yes, and always allow access to /tmp/wtc-exp/a/w/test_the_permission_prompt_is_0/work from this project"
    )
    assert wrapped.options[1].label == (
        "Yes, and always allow access to "
        "/tmp/wtc-exp/a/work/a-very-long-directory-name/that-makes/the-second-option-wrap from this project"
    )


def test_a_menu_without_numbers_is_answered_by_moving_from_where_the_cursor_is_then_enter() -> None:
    trust = screen("trust-folder.txt")
    prompt = blocked_prompt(trust)

    assert prompt is not None
    assert prompt.text.startswith("Accessing workspace:\n/tmp/wtc-exp/a/untrusted\nQuick safety check:")
    assert prompt.options == (
        PromptOption("1", "No, exit", ("Enter",)),
        PromptOption("2", "Yes, I trust this folder", ("Down", "Enter")),
        CANCEL,
    )
    moved = trust.replace(f" {POINTER} No, exit", "   No, exit").replace("   Yes, I", f" {POINTER} Yes, I")
    again = blocked_prompt(moved)
    assert again is not None and [o.keys for o in again.options] == [("Up", "Enter"), ("Enter",), ("Escape",)]


def test_the_rewind_menu_is_a_prompt_that_is_only_cancelled() -> None:
    prompt = blocked_prompt(screen("rewind.txt"))

    assert prompt is not None
    assert prompt.text.startswith("Rewind\nRestore the code and/or conversation to the point before…")
    assert prompt.options == (CANCEL,)


@pytest.mark.parametrize("name", ["idle.txt", "running.txt", "queued.txt", "quoted-prompt.txt", "cost-dialog.txt"])
def test_an_ordinary_screen_is_no_prompt(name: str) -> None:
    assert blocked_prompt(screen(name)) is None


def test_a_prompt_drawn_above_the_input_box_is_history_not_a_prompt() -> None:
    """The permission prompt's own lines, left above the input box (as a scrolled pane or a quote could show them)."""
    idle = screen("idle.txt").rstrip("\n").splitlines()
    assert blocked_prompt("\n".join([*screen("permission-bash-wide.txt").splitlines(), *idle[-4:]])) is None


def test_an_empty_screen_is_no_prompt_and_a_bare_list_over_the_footer_is_one() -> None:
    assert blocked_prompt("") is None and blocked_prompt("\n\n\n") is None
    prompt = blocked_prompt("Pick one\n 1. Red\n 2. Blue\n\n Esc to cancel\n\n")
    assert prompt is not None and prompt.text == "Pick one"
    assert [(o.key, o.label) for o in prompt.options] == [("1", "Red"), ("2", "Blue"), ("esc", "Esc to cancel")]


def test_the_adapter_recognises_the_prompt_its_pane_shows(claude_config: Callable[..., LoadedConfig]) -> None:
    adapter = ClaudeAdapter(claude_config())
    wide = screen("permission-bash-wide.txt")
    assert adapter.blocked_prompt(wide) == blocked_prompt(wide)
    assert adapter.blocked_prompt(screen("idle.txt")) is None


@pytest.mark.parametrize(
    ("name", "reading"),
    [
        ("idle.txt", True),
        ("quoted-prompt.txt", True),
        ("escaped-before-the-answer.txt", True),  # the prompt put back as a draft
        ("running.txt", False),
        ("queued.txt", False),
        ("cost-dialog.txt", False),
        ("rewind.txt", False),
        ("trust-folder.txt", False),
        *((name, False) for name in PERMISSIONS),
    ],
)
def test_the_pane_reads_input_with_the_input_box_at_its_foot_and_no_turn_running(name: str, reading: bool) -> None:
    assert reads_input(screen(name)) is reading
