"""The cursor-agent adapter is installed and listed but never hosted in tmux (C19, R10): it is refused as
``routing.defaultHarness`` by ``config validate`` and a spawn that resolves to it fails by name. "Only
``the-loop[cursor]`` installed" is simulated with ``THE_LOOP_LOAD_PLUGINS=cursor``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop import events
from the_loop.config import load_config
from the_loop.interfaces import Launch
from the_loop.models import WorkEvent
from the_loop.sessions.dispatcher import Dispatcher
from the_loop.sessions.harness import HarnessError, adapter_for
from the_loop.sessions.tmux import TmuxRunner
from the_loop.testing import LoopEnv, fake_plugin
from the_loop_cursor import plugin as cursor_plugin
from the_loop_cursor.adapter import CursorAdapter

ONLY_CURSOR = {"THE_LOOP_LOAD_PLUGINS": "cursor"}


def test_the_adapter_says_it_cannot_be_hosted_and_why() -> None:
    capabilities = CursorAdapter.capabilities
    assert CursorAdapter.name == "cursor"
    assert not capabilities.tmux_hostable and not capabilities.preassigned_session_id and not capabilities.can_resume
    launch = Launch(prompt="hi", session_id="abc", cwd=Path("/srv"))
    adapter = CursorAdapter(None)  # type: ignore[arg-type]
    with pytest.raises(HarnessError, match="no pre-assignable session id"):
        adapter.fresh_argv(launch)
    with pytest.raises(HarnessError, match="cannot be resumed"):
        adapter.resume_argv(launch)
    assert adapter.prepare(Path("/srv")) == []  # no config surface: a silent no-op


def test_c19_core_refuses_the_adapter_by_name(plugin_host: Any, tmp_path: Path) -> None:
    plugin_host.register(cursor_plugin, "cursor")
    (tmp_path / "cli-config.yaml").write_text("routing: {defaultHarness: cursor}\n")
    config = load_config(tmp_path / "cli-config.yaml", plugin_host)

    with pytest.raises(HarnessError, match=r"'cursor' cannot be hosted in tmux: it has no pre-assignable session id"):
        adapter_for("cursor", config)


def test_c19_a_spawn_that_resolves_to_cursor_fails_naming_it_and_creates_no_session(
    plugin_host: Any, tmux_runner: TmuxRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_host.register(fake_plugin, "fake")  # the fake: ticket provider
    plugin_host.register(cursor_plugin, "cursor")
    monkeypatch.setenv("FAKE_TICKETS", str(tmp_path / "tickets.json"))
    path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    routing = {"defaultHarness": "cursor", "spawnWorkdir": str(tmp_path), "tmux": {"socketName": tmux_runner.socket}}
    path.write_text(yaml.safe_dump({"routing": routing}))
    config = load_config(path, plugin_host)
    events.configure(config.state.events_path, "test")

    outcome = Dispatcher(config, runner=tmux_runner).dispatch(
        WorkEvent(delivery_id="d1", work_item="fake:octo/repo#15", text="go", spawn=True)
    )

    assert outcome.status == "failed" and not outcome.will_retry
    assert "'cursor'" in outcome.error and "pre-assignable session id" in outcome.error
    assert tmux_runner.list_sessions() == []
    logged = [json.loads(line) for line in config.state.events_path.read_text().splitlines()]
    [failed] = [e for e in logged if e["event"] == "session.spawn_failed"]
    assert "'cursor'" in failed["error"] and "pre-assignable session id" in failed["error"]
    assert not [e for e in logged if e["event"].startswith("workspace.trust")]


@pytest.mark.parametrize(
    ("routing", "expected"),
    [
        (
            "routing: {enabled: true, defaultHarness: cursor}",
            "'cursor' cannot be hosted in tmux (it has no pre-assignable session id); "
            "sessions need a tmux-hostable one (none installed",
        ),
        (
            "routing: {enabled: true}",
            "'claude' is not an installed harness adapter (installed: cursor); "
            "sessions need a tmux-hostable one (none installed",
        ),
    ],
    ids=["cursor-as-default", "default-claude-missing"],
)
def test_c19_with_only_cursor_installed_validate_asks_for_a_tmux_hosted_default_harness(
    loop_env: LoopEnv, routing: str, expected: str
) -> None:
    loop_env.write_config(f'version: "0.12.0"\n{routing}\n')

    result = loop_env.run("config", "validate", **ONLY_CURSOR)

    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "routing.defaultHarness" in errors[0] and expected in errors[0]
    assert "Traceback" not in result.stderr


def test_with_only_cursor_installed_plugins_lists_it_with_its_capabilities(loop_env: LoopEnv) -> None:
    listed = loop_env.run("plugins", "--format", "json", **ONLY_CURSOR)
    text = loop_env.run("plugins", **ONLY_CURSOR)

    assert listed.returncode == 0, listed.stderr
    found = {plugin["name"]: plugin for plugin in json.loads(listed.stdout)}
    assert set(found) == {"core", "cursor"}
    assert found["cursor"]["contributions"]["harnesses"] == ["cursor"]
    assert found["cursor"]["capabilities"] == {
        "cursor": {
            "tmuxHostable": False,
            "preassignedSessionId": False,
            "canResume": False,
            "canInterrupt": False,
            "reportsUsage": False,
            "recognisesPrompts": False,
        }
    }
    words = "not tmux-hostable, no pre-assignable session id, cannot resume, no interrupt, no usage, no prompts"
    assert f"  harnesses: cursor ({words})" in text.stdout


def test_r10_a_routing_service_refuses_to_start_with_cursor_as_the_default_harness(loop_env: LoopEnv) -> None:
    tests_core = Path(__file__).resolve().parents[3] / "tests" / "core"
    loop_env.write_config(
        'version: "0.12.0"\nrouting: {enabled: true, defaultHarness: cursor}\n'
        "polling: {enabled: true, intervalSeconds: 60, sources: [{provider: fake}]}\n"
    )

    result = loop_env.run(
        "daemon",
        "run",
        "poller",
        "--once",
        THE_LOOP_EXTRA_PLUGINS="plugins_for_tests.loop_test_plugin",  # a poll source named fake
        PYTHONPATH=os.pathsep.join(filter(None, [str(tests_core), os.environ.get("PYTHONPATH")])),
        **ONLY_CURSOR,
    )

    assert result.returncode == 1, result.stdout + result.stderr
    assert "error: poller cannot start: routing.defaultHarness: 'cursor' cannot be hosted in tmux" in result.stderr
    assert "Traceback" not in result.stderr
    [failed] = [e for e in loop_env.events() if e["event"] == "daemon.failed"]
    assert failed["service"] == "poller" and "'cursor'" in failed["problems"][0]


def test_a_model_is_passed_as_cursor_agents_model_option_and_no_effort_is_taken() -> None:
    adapter = CursorAdapter(None)  # type: ignore[arg-type]
    assert adapter.model_args("gpt-5") == ["--model", "gpt-5"]
    assert adapter.effort_args("high") is None
    # Nothing offline lists cursor's models: an unmeasured model is offerable, an effort it has no option for is not.
    assert (adapter.check_choice("model", "gpt-5"), adapter.check_choice("effort", "high")) == ("unknown", "refused")
