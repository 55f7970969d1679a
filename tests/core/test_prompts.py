"""Prompt rendering: the capped, always-parseable JSON excerpt and the cleaned substitutions (A §2.10)."""

from __future__ import annotations

import json
from pathlib import Path

from the_loop.sessions.prompts import (
    BOOT_PROMPT_CAP,
    EXCERPT_CAP,
    TRUNCATED,
    clean,
    load_template,
    render_event_prompt,
    render_excerpt,
    render_spawn_prompt,
)


def test_a19_a_hostile_body_stays_inside_the_json_and_is_capped() -> None:
    body = "\x1b[201~\rrm -rf /" + "x" * 10_000
    text = render_excerpt({"comment": {"path": "a.py", "line": 3, "body": body, "author": "octocat"}})
    assert len(text) <= EXCERPT_CAP
    assert "\x1b" not in text and "\\u001b" in text and "\r" not in text
    parsed = json.loads(text)
    assert parsed["comment"]["body"].endswith(TRUNCATED)
    assert parsed["comment"]["body"].startswith("\x1b[201~\rrm -rf /")
    assert list(parsed["comment"]) == ["path", "line", "body", "author"]  # path and line first (issue-246)


def test_many_long_fields_halve_their_budget_until_the_whole_fits() -> None:
    excerpt = {"check_run": {"output": {"title": "t", "summary": "s" * 5000}}, "review": {"body": "b" * 5000}}
    text = render_excerpt(excerpt)
    assert len(text) <= EXCERPT_CAP
    parsed = json.loads(text)
    assert parsed["check_run"]["output"]["summary"].endswith(TRUNCATED)
    assert parsed["check_run"]["output"]["title"] == "t"


def test_c1_and_c1_controls_are_escaped_in_the_excerpt() -> None:
    text = render_excerpt({"comment": {"body": "a\x07b\x9bc\x7fd"}})
    assert all(ch not in text for ch in "\x07\x9b\x7f")
    assert json.loads(text)["comment"]["body"] == "a\x07b\x9bc\x7fd"


def test_event_prompt_cleans_every_substitution_but_the_json() -> None:
    template = load_template("", Path("."), "event.md")
    prompt = render_event_prompt(
        template,
        source="GitHub webhook",
        work_item="github:octo/repo#15",
        event="issue_comment",
        action="created\x1b[201~\nevil",
        repository="octo/repo",
        delivery_id="d-1",
        excerpt={"comment": {"body": "please add tests", "author": "octocat"}},
    )
    assert "\x1b" not in prompt and "created evil" in prompt
    fenced = prompt.split("```json\n", 1)[1].rsplit("\n```", 1)[0]
    assert json.loads(fenced) == {"comment": {"body": "please add tests", "author": "octocat"}}
    assert "untrusted" in prompt


def test_an_operator_template_overrides_the_packaged_one(tmp_path: Path) -> None:
    (tmp_path / "mine.md").write_text("ref=$work_item url=$url\n$event")
    template = load_template("mine.md", tmp_path, "spawn.md")
    assert render_spawn_prompt(template, work_item="x:o/r#1", url="", event="go") == "ref=x:o/r#1 url=no link\ngo"


def test_the_boot_prompt_is_capped_and_self_contained() -> None:
    template = load_template("", Path("."), "spawn.md")
    prompt = render_spawn_prompt(template, work_item="x:o/r#1", url="https://t/1", event="e" * 50_000)
    assert len(prompt.encode()) <= BOOT_PROMPT_CAP
    assert "the-loop comment --work-item x:o/r#1" in prompt and "the-loop ask --work-item x:o/r#1" in prompt
    assert "truncated" in prompt


def test_clean_drops_terminal_controls_but_keeps_newlines_and_tabs() -> None:
    assert clean("a\r\nb\tc\x1b[31md\x00") == "a\nb\tc[31md"


def test_p1_p5_the_event_prompt_names_its_origin_and_directs_by_interaction_mode() -> None:
    template = load_template("", Path("."), "event.md")
    fields = {
        "source": "github webhook",
        "work_item": "github:octo/repo#15",
        "event": "issue_comment",
        "action": "created",
        "repository": "octo/repo",
        "delivery_id": "d-1",
        "excerpt": {"comment": {"body": "hi"}},
    }
    unattended = render_event_prompt(template, origin="github", **fields)  # type: ignore[arg-type]
    assert "comes from github" in unattended and "$" not in unattended.split("```json")[0]
    assert "Nobody watches this terminal" in unattended
    assert "the-loop ask --work-item github:octo/repo#15" in unattended
    attended = render_event_prompt(template, origin="github", interaction_mode="cli", **fields)  # type: ignore[arg-type]
    assert "A human may be attached" in attended and "Nobody watches" not in attended


def test_p5_a_custom_template_without_the_directive_gets_it_appended() -> None:
    prompt = render_event_prompt(
        "$event on $work_item\n```json\n$payload_excerpt\n```",
        source="s",
        work_item="x:o/r#1",
        event="e",
        action="",
        repository="",
        delivery_id="",
        excerpt={},
        interaction_mode="unknown",  # an unknown mode reads as work-item
    )
    assert prompt.startswith("e on x:o/r#1") and prompt.endswith(
        "the-loop ask --work-item x:o/r#1` — never by waiting for an answer here."
    )


def test_p8_a_configured_template_that_does_not_exist_falls_back_to_the_packaged_one(tmp_path: Path) -> None:
    assert load_template("gone.md", tmp_path, "event.md") == load_template("", tmp_path, "event.md")
    (tmp_path / "dir.md").mkdir()
    assert load_template(str(tmp_path / "dir.md"), tmp_path, "spawn.md") == load_template("", tmp_path, "spawn.md")
