"""Model and effort choices (issue-358): the verdicts file ``local/model-verdicts.json`` that ``check`` writes, and
``resolve``'s re-validation of a work item's choice at spawn. The fake harness adapter answers from
``FAKE_HARNESS_MODELS`` / ``FAKE_HARNESS_EFFORTS``; only the clock is moved (pytest-mock)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.interfaces import Capabilities, HarnessAdapter, Launch
from the_loop.sessions import models
from the_loop.sessions.harness import HarnessError
from the_loop.sessions.models import Resolved, args_digest, check, emit_refusals, resolve
from the_loop.testing import fake_plugin
from the_loop.testing.fake_plugin import FakeAdapter

T0 = 1_789_000_000.0
DAY = 24 * 60 * 60

Load = Callable[..., LoadedConfig]


@pytest.fixture
def load(tmp_path: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch) -> Load:
    """``load(models=[…], effort=[…], harness_args=[…])`` → a config with the fake harness as the default, its event
    log pointed at its state; the fake accepts nothing yet (its verdicts are ``unknown``)."""
    plugin_host.register(fake_plugin, "fake")
    monkeypatch.delenv("FAKE_HARNESS_MODELS", raising=False)
    monkeypatch.delenv("FAKE_HARNESS_EFFORTS", raising=False)
    path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)

    def write(
        models: list[str] | None = None, effort: list[str] | None = None, harness_args: list[str] | None = None
    ) -> LoadedConfig:
        routing: dict[str, Any] = {"defaultHarness": "fake"}
        if harness_args is not None:
            routing["harnessArgs"] = {"fake": harness_args}
        document = {"version": "0.12.0", "models": models or [], "effort": effort or [], "routing": routing}
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        config = load_config(path, plugin_host)
        events.configure(config.state.events_path, "test")
        return config

    return write


@pytest.fixture
def clock(mocker: Any) -> Callable[[float], None]:
    """``clock(t)`` sets the time verdicts are dated and aged with."""
    now = mocker.patch("the_loop.sessions.models._now", return_value=T0)
    return lambda t: setattr(now, "return_value", t)


def stored(config: LoadedConfig) -> list[dict[str, Any]]:
    return json.loads(config.state.model_verdicts_path.read_text())["verdicts"]


def logged(config: LoadedConfig, name: str) -> list[dict[str, Any]]:
    path = config.state.events_path
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [event for event in found if event["event"] == name]


# ---------------------------------------------------------------------------------------------- the file


def test_check_records_one_verdict_per_harness_and_declared_name_in_the_seed_shape(
    load: Load, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_HARNESS_MODELS", "sonnet")
    config = load(models=["sonnet", "opus"], effort=["high"])

    rows = check(config)

    assert config.state.model_verdicts_path == config.state.root / "local" / "model-verdicts.json"
    assert stored(config) == [
        {
            "harness": "fake",
            "kind": "model",
            "name": "sonnet",
            "argsDigest": args_digest(["--model", "sonnet"]),
            "verdict": "ok",
            "checkedAt": T0,
        },
        {
            "harness": "fake",
            "kind": "model",
            "name": "opus",
            "argsDigest": args_digest(["--model", "opus"]),
            "verdict": "refused",
            "checkedAt": T0,
        },
        {  # FAKE_HARNESS_EFFORTS unset: the fake could not be asked
            "harness": "fake",
            "kind": "effort",
            "name": "high",
            "argsDigest": args_digest(["--effort", "high"]),
            "verdict": "unknown",
            "checkedAt": T0,
        },
    ]
    assert all(row.measured for row in rows)
    assert len(args_digest(["--model", "sonnet"])) == 16
    [event] = logged(config, "models.checked")
    assert (event["measured"], event["kept"], event["ok"], event["refused"], event["unknown"]) == (3, 0, 1, 1, 1)


def test_a_verdict_is_kept_for_a_day_and_measured_again_after_it(
    load: Load, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_HARNESS_MODELS", "sonnet")
    config = load(models=["sonnet"])
    check(config)
    monkeypatch.setenv("FAKE_HARNESS_MODELS", "opus")  # the harness stopped taking it

    clock(T0 + DAY - 1)
    [kept] = check(config)
    assert (kept.verdict, kept.measured, kept.checked_at) == ("ok", False, T0)
    assert stored(config)[0]["checkedAt"] == T0

    clock(T0 + DAY)
    [again] = check(config)
    assert (again.verdict, again.measured, again.checked_at) == ("refused", True, T0 + DAY)
    assert stored(config)[0]["verdict"] == "refused"


def test_force_measures_a_fresh_verdict_again(load: Load, clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load(models=["sonnet"])
    check(config)
    monkeypatch.setenv("FAKE_HARNESS_MODELS", "sonnet")
    assert [row.verdict for row in check(config)] == ["unknown"]
    assert [(row.verdict, row.measured) for row in check(config, force=True)] == [("ok", True)]


def test_a_changed_harness_argument_asks_again(load: Load, clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    check(load(models=["sonnet"]))
    monkeypatch.setenv("FAKE_HARNESS_MODELS", "sonnet")
    config = load(models=["sonnet"], harness_args=["--verbose"])

    [row] = check(config)

    assert (row.verdict, row.measured) == ("ok", True)
    assert row.args_digest == args_digest(["--verbose", "--model", "sonnet"])


def test_a_file_that_does_not_parse_is_moved_aside_and_reported_never_overwritten(
    load: Load, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load(models=["sonnet"])
    path = config.state.model_verdicts_path
    path.parent.mkdir(parents=True)
    path.write_text('{"verdicts": [', encoding="utf-8")

    check(config)

    [aside] = list(path.parent.glob("model-verdicts.json.corrupt-*"))
    assert aside.read_text() == '{"verdicts": ['
    assert [row["name"] for row in stored(config)] == ["sonnet"]
    [event] = logged(config, "state.quarantined")
    assert event["moved_to"] == str(aside)
    assert "did not parse" in capsys.readouterr().err


def test_other_harnesses_rows_are_kept_and_a_withdrawn_name_drops_out(load: Load, clock: Any) -> None:
    config = load(models=["sonnet"])
    path = config.state.model_verdicts_path
    path.parent.mkdir(parents=True)
    other = {"harness": "other", "kind": "model", "name": "opus", "argsDigest": "0" * 16, "verdict": "ok"}
    gone = {"harness": "fake", "kind": "model", "name": "gone", "argsDigest": "0" * 16, "verdict": "ok"}
    malformed = {"harness": "fake", "kind": "colour", "name": "x", "argsDigest": "0", "verdict": "ok", "checkedAt": 1}
    path.write_text(json.dumps({"verdicts": [{**other, "checkedAt": 1.0}, {**gone, "checkedAt": 1.0}, malformed]}))

    check(config)

    assert [(row["harness"], row["name"]) for row in stored(config)] == [("other", "opus"), ("fake", "sonnet")]


def test_harness_names_one_that_cannot_host_a_session(load: Load) -> None:
    config = load(models=["sonnet"])
    with pytest.raises(HarnessError, match="'nosuch' is not installed"):
        check(config, harness="nosuch")
    assert not config.state.model_verdicts_path.exists()
    assert list(models.harnesses(config)) == ["fake"]


def test_nothing_declared_writes_an_empty_list_and_no_verdict(load: Load) -> None:
    config = load()
    assert check(config) == []
    assert stored(config) == []


# ---------------------------------------------------------------------------------------------- at spawn


class NoEffort(FakeAdapter):
    """The fake harness without an effort option."""

    def effort_args(self, effort: str) -> list[str] | None:
        return None


def test_a_declared_choice_with_no_verdict_or_an_unknown_one_is_applied_after_the_harness_args(
    load: Load, clock: Any
) -> None:
    config = load(models=["opus"], effort=["high"], harness_args=["--verbose"])
    adapter = FakeAdapter(config)
    expected = Resolved(["--verbose", "--model", "opus", "--effort", "high"], "opus", "high", [])

    assert resolve(config, adapter, "opus", "high") == expected  # nothing recorded
    check(config)  # both unknown: offerable
    assert resolve(config, adapter, "opus", "high") == expected
    assert resolve(config, adapter, "", "") == Resolved(["--verbose"])


def test_an_undeclared_name_is_dropped_and_said(load: Load) -> None:
    config = load(models=["sonnet"], effort=["high"])

    resolved = resolve(config, FakeAdapter(config), "opus", "--dangerously-skip-permissions")

    assert resolved == Resolved(
        [], "", "", [("model", "opus", "undeclared"), ("effort", "--dangerously-skip-permissions", "undeclared")]
    )
    emit_refusals("fake:octo/repo#15", "fake", resolved)
    assert [
        (event["level"], event["work_item"], event["harness"], event["kind"], event["name"], event["reason"])
        for event in logged(config, "session.model_refused")
    ] == [
        ("warning", "fake:octo/repo#15", "fake", "model", "opus", "undeclared"),
        ("warning", "fake:octo/repo#15", "fake", "effort", "--dangerously-skip-permissions", "undeclared"),
    ]


def test_a_choice_the_harness_has_no_argument_for_is_unsupported(load: Load) -> None:
    config = load(models=["opus"], effort=["high"])

    resolved = resolve(config, NoEffort(config), "opus", "high")

    assert resolved == Resolved(["--model", "opus"], "opus", "", [("effort", "high", "unsupported")])


def test_a_refused_verdict_withholds_the_name_however_old_it_is(
    load: Load, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_HARNESS_MODELS", "sonnet")
    monkeypatch.setenv("FAKE_HARNESS_EFFORTS", "high")
    config = load(models=["sonnet", "opus"], effort=["high"])
    check(config)
    clock(T0 + 30 * DAY)  # stale by age: the next check asks again, but a spawn never measures

    resolved = resolve(config, FakeAdapter(config), "opus", "high")

    assert resolved == Resolved(["--effort", "high"], "", "high", [("model", "opus", "refused")])
    assert resolve(config, FakeAdapter(config), "sonnet", "high").args == ["--model", "sonnet", "--effort", "high"]


def test_a_refusal_taken_against_another_argv_withholds_nothing(load: Load, clock: Any) -> None:
    config = load(models=["opus"])
    check(config)
    path = config.state.model_verdicts_path
    [row] = stored(config)
    path.write_text(json.dumps({"verdicts": [{**row, "verdict": "refused"}]}))
    assert resolve(config, FakeAdapter(config), "opus", "").refused == [("model", "opus", "refused")]

    changed = load(models=["opus"], harness_args=["--verbose"])  # nobody tested opus with --verbose

    assert resolve(changed, FakeAdapter(changed), "opus", "") == Resolved(["--verbose", "--model", "opus"], "opus")


def test_resolve_reads_a_broken_file_as_no_verdicts(load: Load, capsys: pytest.CaptureFixture[str]) -> None:
    config = load(models=["opus"])
    path = config.state.model_verdicts_path
    path.parent.mkdir(parents=True)
    path.write_text("[1, 2")

    assert resolve(config, FakeAdapter(config), "opus", "").model == "opus"
    assert path.read_text() == "[1, 2"  # a spawn only reads
    assert "skipping unreadable state file" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ the adapter's default


class Plain(HarnessAdapter):
    name = "plain"
    capabilities = Capabilities(tmux_hostable=True, preassigned_session_id=True, can_resume=True)

    def fresh_argv(self, launch: Launch) -> list[str]:
        return ["plain"]

    def resume_argv(self, launch: Launch) -> list[str]:
        return ["plain"]


class PlainWithModel(Plain):
    def model_args(self, model: str) -> list[str] | None:
        return [f"--model={model}"]


def test_an_adapter_takes_no_choice_by_default_and_cannot_tell_about_one_it_maps() -> None:
    plain = Plain(None)  # type: ignore[arg-type]
    assert (plain.model_args("opus"), plain.effort_args("high")) == (None, None)
    assert (plain.check_choice("model", "opus"), plain.check_choice("effort", "high")) == ("refused", "refused")
    mapped = PlainWithModel(None)  # type: ignore[arg-type]
    assert (mapped.check_choice("model", "opus"), mapped.check_choice("effort", "high")) == ("unknown", "refused")


# ------------------------------------------------------------------------------------------------ the fakes


def test_the_fake_harness_records_the_model_and_effort_it_was_started_with(tmp_path: Path) -> None:
    import subprocess

    from the_loop.testing.harness import FakeHarness, fake_harness_argv

    log = tmp_path / "fake.jsonl"
    argv = fake_harness_argv(log, session_id="conv-1", extra=["--model", "opus", "--effort", "high"], prompt="hi")
    subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=True)
    bare = fake_harness_argv(log, session_id="conv-2", prompt="hi")
    subprocess.run(bare, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=True)

    starts = FakeHarness(log).records("start")
    assert [(start["model"], start["effort"]) for start in starts] == [("opus", "high"), (None, None)]


def test_the_fake_anthropic_api_lists_models_in_the_real_shape_and_only_with_a_credential(tmp_path: Path) -> None:
    import httpx

    from the_loop.testing.fake_anthropic import FakeAnthropic

    with FakeAnthropic(tmp_path / "api.jsonl", models=["claude-a-1", "claude-b-2", "claude-c-3"]) as api:
        refused = httpx.get(f"{api.url}/v1/models")
        first = httpx.get(f"{api.url}/v1/models?limit=2", headers={"x-api-key": "k"})
        rest = httpx.get(f"{api.url}/v1/models?limit=2&after_id=claude-b-2", headers={"authorization": "Bearer t"})

    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"
    page = first.json()
    assert [model["id"] for model in page["data"]] == ["claude-a-1", "claude-b-2"]
    assert set(page["data"][0]) == {"type", "id", "display_name", "created_at"} and page["data"][0]["type"] == "model"
    assert (page["has_more"], page["first_id"], page["last_id"]) == (True, "claude-a-1", "claude-b-2")
    assert rest.json() == {**rest.json(), "has_more": False, "first_id": "claude-c-3", "last_id": "claude-c-3"}
