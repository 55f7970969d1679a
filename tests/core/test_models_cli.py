"""``the-loop models check`` and ``models list`` end to end, the ``models`` / ``effort`` keys' validation, and the
Model column of ``sessions list`` — the real CLI in a subprocess (``loop_env``) with the fake harness adapter as the
only installed harness (``THE_LOOP_LOAD_PLUGINS=""``, ``THE_LOOP_EXTRA_PLUGINS``)."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from the_loop.sessions.models import args_digest
from the_loop.testing import LoopEnv

FAKE_ONLY = {"THE_LOOP_LOAD_PLUGINS": "", "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin"}
ACCEPTS = {"FAKE_HARNESS_MODELS": "sonnet", "FAKE_HARNESS_EFFORTS": "low,high"}


def configure(loop_env: LoopEnv, **top: Any) -> None:
    loop_env.write_config(
        {
            "version": "0.12.0",
            "routing": {"defaultHarness": "fake", "tmux": {"socketName": f"models-{secrets.token_hex(4)}"}},
            **top,
        }
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_check_measures_records_and_prints_one_line_per_verdict_and_list_shows_them(loop_env: LoopEnv) -> None:
    configure(loop_env, models=["sonnet", "opus"], effort=["high", "max"])

    checked = loop_env.run("models", "check", **FAKE_ONLY, **ACCEPTS)

    assert checked.returncode == 0, checked.stderr
    assert [line.split() for line in checked.stdout.splitlines()] == [
        ["fake", "model", "sonnet", "ok", "measured"],
        ["fake", "model", "opus", "refused", "measured"],
        ["fake", "effort", "high", "ok", "measured"],
        ["fake", "effort", "max", "refused", "measured"],
    ]
    stored = json.loads((loop_env.root / "local" / "model-verdicts.json").read_text())
    assert [(row["harness"], row["kind"], row["name"], row["verdict"]) for row in stored["verdicts"]] == [
        ("fake", "model", "sonnet", "ok"),
        ("fake", "model", "opus", "refused"),
        ("fake", "effort", "high", "ok"),
        ("fake", "effort", "max", "refused"),
    ]
    assert stored["verdicts"][0]["argsDigest"] == args_digest(["--model", "sonnet"])
    assert all(
        set(row) == {"harness", "kind", "name", "argsDigest", "verdict", "checkedAt"} for row in stored["verdicts"]
    )

    again = loop_env.run("models", "check", "--format", "json", **FAKE_ONLY, **ACCEPTS)
    assert again.returncode == 0, again.stderr
    document = json.loads(again.stdout)
    assert document["harnesses"] == ["fake"]
    assert document["file"] == str(loop_env.root / "local" / "model-verdicts.json")
    assert [(row["name"], row["verdict"], row["measured"]) for row in document["verdicts"]] == [
        ("sonnet", "ok", False),
        ("opus", "refused", False),
        ("high", "ok", False),
        ("max", "refused", False),
    ]

    listed = loop_env.run("models", "list", **FAKE_ONLY)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == f"declared in {loop_env.config_path}: models: sonnet, opus; effort: high, max"
    assert lines[1].split()[:4] == ["fake", "model", "sonnet", "ok"] and "checked" in lines[1]
    assert "stale" not in listed.stdout and "stale" not in listed.stderr
    as_json = json.loads(loop_env.run("models", "list", "--format", "json", **FAKE_ONLY).stdout)
    assert (as_json["models"], as_json["effort"], as_json["harnesses"]) == (
        ["sonnet", "opus"],
        ["high", "max"],
        ["fake"],
    )
    opus = as_json["verdicts"][1]
    assert (opus["name"], opus["args"], opus["verdict"], opus["stale"]) == (
        "opus",
        ["--model", "opus"],
        "refused",
        False,
    )
    assert 0 <= opus["ageSeconds"] < 600


def test_list_before_any_check_says_never_checked_and_points_at_check(loop_env: LoopEnv) -> None:
    configure(loop_env, models=["opus"])

    listed = loop_env.run("models", "list", **FAKE_ONLY)

    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split() == ["fake", "model", "opus", "-", "never", "checked"]
    assert "the-loop models check" in listed.stderr
    assert not (loop_env.root / "local" / "model-verdicts.json").exists()


def test_a_harness_that_cannot_be_asked_is_unknown_and_force_asks_again(loop_env: LoopEnv) -> None:
    configure(loop_env, models=["sonnet"])
    assert loop_env.run("models", "check", **FAKE_ONLY).stdout.split()[3] == "unknown"

    kept = loop_env.run("models", "check", **FAKE_ONLY, **ACCEPTS)
    forced = loop_env.run("models", "check", "--force", "--harness", "fake", **FAKE_ONLY, **ACCEPTS)

    assert kept.stdout.split()[3:5] == ["unknown", "kept"]
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.split()[3:] == ["ok", "measured"]


def test_nothing_declared_says_so_and_exits_0(loop_env: LoopEnv) -> None:
    configure(loop_env)

    result = loop_env.run("models", "check", **FAKE_ONLY)

    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "no models or effort declared" in result.stderr


def test_no_harness_to_check_exits_1_and_an_unknown_one_exits_2(loop_env: LoopEnv) -> None:
    configure(loop_env, models=["sonnet"])

    none = loop_env.run("models", "check", THE_LOOP_LOAD_PLUGINS="")
    unknown = loop_env.run("models", "check", "--harness", "nosuch", **FAKE_ONLY)

    assert none.returncode == 1
    assert error_lines(none.stderr) == [
        "error: no installed harness adapter can host a session, so nothing was checked"
    ]
    assert unknown.returncode == 2
    [line] = error_lines(unknown.stderr)
    assert "'nosuch' is not installed" in line
    assert not (loop_env.root / "local" / "model-verdicts.json").exists()


@pytest.mark.parametrize(
    ("top", "key", "says"),
    [
        ({"models": ["sonnet", "-x"]}, "models", "'-x' is not a valid model name"),
        ({"models": ["sonnet", "sonnet"]}, "models", "'sonnet' is declared twice"),
        ({"models": ["has space"]}, "models", "'has space' is not a valid model name"),
        ({"effort": [""]}, "effort", "'' is not a valid effort level"),
        ({"effort": ["high", 3]}, "effort[1]", "valid string"),
        ({"models": "opus"}, "models", "valid list"),
    ],
)
def test_a_bad_declaration_is_one_error_line_naming_the_key_and_exits_2(
    loop_env: LoopEnv, top: dict[str, Any], key: str, says: str
) -> None:
    configure(loop_env, **top)

    for command in (["config", "validate"], ["models", "check"], ["models", "list"]):
        result = loop_env.run(*command, **FAKE_ONLY)
        assert result.returncode == 2, (command, result.stderr)
        [line] = error_lines(result.stderr)
        assert line.startswith(f"error: {loop_env.config_path}: {key}: "), line
        assert says in line
        assert "Traceback" not in result.stderr


def test_a_choice_may_carry_a_suffix_and_a_full_id(loop_env: LoopEnv) -> None:
    configure(loop_env, models=["sonnet[1m]", "claude-opus-4-1-20250805", "us.anthropic:claude.v2"], effort=["xhigh"])

    result = loop_env.run("config", "validate", **FAKE_ONLY)

    assert result.returncode == 0, result.stderr


def test_sessions_list_shows_the_model_with_the_effort_and_json_carries_the_launch_args(loop_env: LoopEnv) -> None:
    configure(loop_env)
    record = {
        "version": 2,
        "workItem": "fake:octo/repo#15",
        "sessions": {
            "fake:octo/repo#15": {
                "harness": "fake",
                "harnessSessionId": "conv-1",
                "cwd": str(loop_env.tmp),
                "status": "closed",
                "createdAt": "2026-09-15T10:00:00Z",
                "tmuxTarget": "loop-fake-octo-repo-15",
                "model": "opus",
                "effort": "high",
                "harnessArgs": ["--verbose", "--model", "opus", "--effort", "high"],
            }
        },
    }
    path = loop_env.root / "local" / "fake-octo-repo-15.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))

    table = loop_env.run("sessions", "list", **FAKE_ONLY)
    rows = json.loads(loop_env.run("sessions", "list", "--format", "json", **FAKE_ONLY).stdout)

    assert table.returncode == 0, table.stderr
    assert "opus (high)" in table.stdout.splitlines()[1]
    assert [(row["model"], row["effort"], row["harnessArgs"]) for row in rows] == [
        ("opus", "high", ["--verbose", "--model", "opus", "--effort", "high"])
    ]
