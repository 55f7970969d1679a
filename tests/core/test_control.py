"""Control keyword parsing (A §2.6 C1 to C3; regressions issue-135, issue-498)."""

from __future__ import annotations

import pytest

from the_loop.control import ControlParse, keywords, parse


@pytest.mark.parametrize(
    ("body", "command"),
    [
        ("the-loop start", "start"),
        ("  The-Loop   STOP\nplease", "stop"),
        ("the-loop pause\n\nback later", "pause"),
        ("the-loop resume.", "resume"),
        ("the-loop cleanup", "cleanup"),
        ("\n\tthe-loop start", "start"),
        ("the-loop start\nthe-loop start", "start"),
    ],
)
def test_a_comment_that_opens_with_a_keyword_is_that_command(body: str, command: str) -> None:
    assert parse(body) == ControlParse(command=command, commands=(command,))


@pytest.mark.parametrize(
    "body",
    [
        "I will say the-loop start later",  # prose (A10)
        "> the-loop stop",  # a quote
        "`the-loop start`",  # inline code
        "- the-loop start",  # a list item
        "the-loop started",  # runs on into a word
        "the-loop start:now",
        "the-loop start-execution",  # the pre-issue-135 form
        "please\nthe-loop start",  # must open with it
        "",
        None,
    ],
)
def test_anything_else_is_no_command(body: str | None) -> None:
    assert parse(body) == ControlParse()


def test_two_different_commands_execute_nothing() -> None:
    result = parse("the-loop start\nthe-loop stop")
    assert result.command is None and result.ambiguous and result.commands == ("start", "stop")


def test_keywords_are_configurable_and_can_be_turned_off() -> None:
    configured = {"start": "go  loop", "stop": ""}
    assert keywords(configured)["start"] == "go loop" and "stop" not in keywords(configured)
    assert parse("go loop", configured).command == "start"
    assert parse("the-loop stop", configured) == ControlParse()
    assert parse("the-loop pause", configured).command == "pause"


def test_j14_a_github_login_matches_in_any_case_other_providers_ids_only_exactly() -> None:
    from the_loop.control import Principal

    octocat = Principal({"github": "OctoCat", "jira": "5b10ac8d82e05b22cc7d4ef5", "slack": "U0DANA"})
    assert octocat.matches("github", "octocat")
    assert octocat.matches("jira", "5b10ac8d82e05b22cc7d4ef5")
    assert not octocat.matches("jira", "5B10AC8D82E05B22CC7D4EF5")  # J14: exact
    assert not octocat.matches("slack", "u0dana")
    assert not octocat.matches("jira", "") and not Principal({}).matches("github", "")
