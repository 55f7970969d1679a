"""``the-loop comment`` and ``the-loop ask`` as an agent runs them in its session: the real CLI in a subprocess,
the GitHub plugin installed, PyGithub against the fake GitHub API."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fake_github import BOT, FakeGitHub

from the_loop.testing import LoopEnv
from the_loop_github.ticketing import MARKER, SIGNATURE

HERE = Path(__file__).parent


@pytest.fixture
def agent(gh_env: LoopEnv, fake_github: FakeGitHub) -> LoopEnv:
    """The environment of a session: config and work item from the environment, as the spawn sets them."""
    gh_env.write_config({"version": "0.12.0", **fake_github.config()})
    gh_env.env.update(THE_LOOP_CLI_CONFIG=str(gh_env.config_path), THE_LOOP_WORK_ITEM="github:octo/repo#15")
    gh_env.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return gh_env


def test_comment_posts_a_marked_comment_and_prints_its_id(agent: LoopEnv, fake_github: FakeGitHub) -> None:
    result = agent.run("comment", "--body", "Tests added in 3f2a1c.", config=False)
    assert result.returncode == 0, result.stderr
    [posted] = fake_github.comments_on("octo/repo", 15)
    assert json.loads(result.stdout) == {"workItem": "github:octo/repo#15", "commentId": str(posted["id"])}
    assert posted["body"] == f"Tests added in 3f2a1c.\n\n{SIGNATURE}\n{MARKER}"
    assert posted["user"]["login"] == BOT


def test_comment_reads_a_file_or_stdin_and_takes_an_explicit_work_item(
    agent: LoopEnv, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    body = tmp_path / "reply.md"
    body.write_text("## Plan\n\n- one\n- two\n", encoding="utf-8")
    assert agent.run("comment", "--body-file", str(body), config=False).returncode == 0
    piped = agent.run("comment", "--work-item", "github:octo/repo#20", "--body-file", "-", config=False, input="LGTM")
    assert piped.returncode == 0, piped.stderr
    assert fake_github.comments_on("octo/repo", 15)[0]["body"].startswith("## Plan\n\n- one\n- two\n\n🤖")
    assert fake_github.comments_on("octo/repo", 20)[0]["body"].startswith("LGTM\n\n")


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--body", "x", "--body-file", "-"], {}, "give exactly one of --body and --body-file"),
        ([], {}, "give exactly one of --body and --body-file"),
        (["--body", "   "], {}, "the comment is empty"),
        (["--body-file", "/nonexistent/reply.md"], {}, "cannot read /nonexistent/reply.md"),
        (["--body", "x"], {"THE_LOOP_WORK_ITEM": "octo/repo#15"}, "not a work-item ref"),
        (["--body", "x"], {"THE_LOOP_WORK_ITEM": ""}, "Missing option '--work-item'"),
        (["--body", "x"], {"THE_LOOP_WORK_ITEM": "nope:octo/repo#15"}, "no ticket provider for nope: refs"),
        (["--body", "x"], {"GH_TOKEN": ""}, "error: no GitHub token: set GH_TOKEN or GITHUB_TOKEN"),
    ],
)
def test_comment_refuses_bad_input_with_exit_2(
    agent: LoopEnv, fake_github: FakeGitHub, args: list[str], env: dict[str, str], message: str
) -> None:
    result = agent.run("comment", *args, config=False, **env)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert fake_github.calls("POST") == []


def test_comment_on_a_missing_item_is_exit_1(agent: LoopEnv, fake_github: FakeGitHub) -> None:
    result = agent.run("comment", "--work-item", "github:octo/repo#99", "--body", "x", config=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: could not comment on github:octo/repo#99: "
        "GitHub API POST /repos/octo/repo/issues/99/comments: 404 Not Found"
    )


def test_ask_posts_the_question_records_the_wait_and_asks_the_hook(
    agent: LoopEnv, fake_github: FakeGitHub, tmp_path: Path
) -> None:
    hook_log = tmp_path / "hooks.jsonl"
    result = agent.run(
        "ask",
        "--question",
        "Should the widget be blue or green?",
        config=False,
        THE_LOOP_EXTRA_PLUGINS="gh_test_hooks",
        GH_TEST_HOOK_LOG=str(hook_log),
    )
    assert result.returncode == 0, result.stderr
    [posted] = fake_github.comments_on("octo/repo", 15)
    assert json.loads(result.stdout) == {"workItem": "github:octo/repo#15", "commentId": str(posted["id"])}
    assert posted["body"].startswith("Should the widget be blue or green?\n\n") and posted["body"].endswith(MARKER)
    assert [json.loads(line) for line in hook_log.read_text().splitlines()] == [
        {"work_item": "github:octo/repo#15", "kind": "question", "question": "Should the widget be blue or green?"}
    ]
    [waiting] = [e for e in agent.events() if e["event"] == "session.awaiting_input"]
    assert (waiting["work_item"], waiting["comment_id"]) == ("github:octo/repo#15", str(posted["id"]))
    assert "blue or green" not in json.dumps(agent.events())  # ids only, never the text


def test_a_hook_may_reword_the_question(agent: LoopEnv, fake_github: FakeGitHub, tmp_path: Path) -> None:
    result = agent.run(
        "ask",
        "--question",
        "raw question",
        config=False,
        THE_LOOP_EXTRA_PLUGINS="gh_test_hooks",
        GH_TEST_HOOK_LOG=str(tmp_path / "hooks.jsonl"),
        GH_TEST_REWORD="Which colour? (asked by the agent)",
    )
    assert result.returncode == 0, result.stderr
    assert fake_github.comments_on("octo/repo", 15)[0]["body"].startswith("Which colour? (asked by the agent)\n\n")


def test_ask_refuses_an_empty_question(agent: LoopEnv, fake_github: FakeGitHub) -> None:
    result = agent.run("ask", "--question", " ", config=False)
    assert result.returncode == 2
    assert "the question is empty" in result.stderr
    assert fake_github.requests == []
