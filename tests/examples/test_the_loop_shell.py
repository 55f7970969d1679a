"""The third-party harness adapter ``examples/the-loop-shell`` (installed as its own distribution by ``test.sh``),
found through its entry point and driven by unchanged core: a real tmux session is spawned, delivered into and
respawned resuming its conversation. The walk-through is docs/plugins/writing-a-harness-adapter.md."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.models import WorkEvent
from the_loop.plugins import PluginHost, set_host
from the_loop.sessions.dispatcher import Dispatcher
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state.registry import SessionRegistry
from the_loop.testing import LoopEnv

REF = "fake:octo/repo#15"


def test_the_example_is_a_separate_distribution_with_its_own_entry_point() -> None:
    dist = distribution("the-loop-shell")
    points = [ep for ep in dist.entry_points if ep.group == "the_loop.plugins"]
    assert [(ep.name, ep.value) for ep in points] == [("shell", "the_loop_shell.plugin")]
    assert not [req for req in dist.requires or [] if req.startswith("the-loop ")]  # needs core only


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginHost]:
    """The process-wide host as the CLI builds it: the example from its entry point, the fake ticket provider
    (refs ``fake:…``) by module path."""
    monkeypatch.setenv("THE_LOOP_LOAD_PLUGINS", "shell")
    monkeypatch.setenv("THE_LOOP_EXTRA_PLUGINS", "the_loop.testing.fake_plugin")
    host = PluginHost.create()
    set_host(host)
    yield host
    set_host(None)


def transcript(directory: Path, session_id: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The conversation's transcript once it holds ``count`` user messages."""
    path = directory / f"{session_id}.jsonl"
    deadline = time.monotonic() + timeout
    while True:
        entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        if sum(entry["role"] == "user" for entry in entries) >= count:
            return entries
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: fewer than {count} user messages after {timeout}s: {entries}")
        time.sleep(0.02)


def config_for(tmp_path: Path, host: PluginHost, runner: TmuxRunner) -> LoadedConfig:
    path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    document = {
        "version": "0.12.0",
        "routing": {
            "defaultHarness": "shell-agent",
            "spawnWorkdir": str(tmp_path / "work"),
            "harnessArgs": {"shell-agent": ["--name", "echo-bot"]},
            "tmux": {"socketName": runner.socket, "resumeProbeSeconds": 0.3},
        },
        "shellAgent": {"transcriptDir": "transcripts"},  # relative: beside the config file
    }
    path.write_text(yaml.safe_dump(document))
    return load_config(path, host)


def test_a_real_tmux_session_spawns_receives_and_resumes_through_the_example(
    tmp_path: Path, host: PluginHost, tmux_runner: TmuxRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TICKETS", str(tmp_path / "tickets.json"))
    (tmp_path / "work").mkdir()
    config = config_for(tmp_path, host, tmux_runner)
    events.configure(config.state.events_path, "test")
    transcripts = config.ref.path.parent / "transcripts"
    dispatcher = Dispatcher(config, runner=tmux_runner)

    spawned = dispatcher.dispatch(WorkEvent(delivery_id="d1", work_item=REF, text="start the work", spawn=True))

    assert spawned.status == "spawned", spawned
    own = SessionRegistry(config.state).load(REF).own
    assert own.harness == "shell-agent" and own.harness_args == ["--name", "echo-bot"]
    entries = transcript(transcripts, own.harness_session_id, 1)
    assert entries[0] == {**entries[0], "role": "system", "text": "started", "cwd": str(tmp_path / "work")}
    assert "start the work" in entries[1]["text"]
    logged = [json.loads(line) for line in config.state.events_path.read_text().splitlines()]
    assert [e["applied"] for e in logged if e["event"] == "workspace.trusted"] == [[str(transcripts)]]

    delivered = dispatcher.dispatch(WorkEvent(delivery_id="d2", work_item=REF, text="second message"))

    assert delivered.status == "delivered", delivered
    assert transcript(transcripts, own.harness_session_id, 2)[-1] == {
        **transcript(transcripts, own.harness_session_id, 2)[-1],
        "role": "agent",
        "text": "heard: second message",
    }
    assert "heard: second message" in tmux_runner.capture(own.tmux_target)

    tmux_runner.kill(own.tmux_target)
    respawned = dispatcher.dispatch(WorkEvent(delivery_id="d3", work_item=REF, text="after the restart"))

    assert respawned.status == "respawned", respawned
    entries = transcript(transcripts, own.harness_session_id, 3)
    assert [e["text"] for e in entries if e["role"] == "system"][-1] == "resumed"
    assert entries[-1]["text"] == "heard: after the restart"
    assert SessionRegistry(config.state).load(REF).own.harness_session_id == own.harness_session_id
    assert "resumed" in tmux_runner.capture(own.tmux_target) and "(2 earlier messages)" in tmux_runner.capture(
        own.tmux_target
    )


def test_plugins_lists_the_example_adapter_with_its_capabilities(loop_env: LoopEnv) -> None:
    result = loop_env.run("plugins", "--format", "json", THE_LOOP_LOAD_PLUGINS="shell")

    assert result.returncode == 0, result.stderr
    shell = {plugin["name"]: plugin for plugin in json.loads(result.stdout)}["shell"]
    assert shell["distribution"] == "the-loop-shell"
    assert shell["contributions"]["harnesses"] == ["shell-agent"]
    assert shell["capabilities"]["shell-agent"] == {
        "tmuxHostable": True,
        "preassignedSessionId": True,
        "canResume": True,
        "canInterrupt": False,
        "reportsUsage": False,
        "recognisesPrompts": False,
    }


def test_the_example_can_be_the_default_harness(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\nrouting: {enabled: true, defaultHarness: shell-agent}\n')

    result = loop_env.run("config", "validate", THE_LOOP_LOAD_PLUGINS="shell")

    assert result.returncode == 0, result.stderr


def test_the_guide_quotes_every_file_of_the_example_exactly() -> None:
    root = Path(__file__).resolve().parents[2]
    guide = (root / "docs" / "plugins" / "writing-a-harness-adapter.md").read_text(encoding="utf-8")
    quoted = dict(re.findall(r'^```\w+ title="([^"]+)"\n(.*?)^```$', guide, flags=re.MULTILINE | re.DOTALL))
    files = {
        str(path.relative_to(root))
        for path in (root / "examples" / "the-loop-shell").rglob("*")
        if path.suffix in (".py", ".toml") and path.name != "__init__.py" and "__pycache__" not in path.parts
    }
    assert set(quoted) == files
    assert [path for path, code in quoted.items() if (root / path).read_text(encoding="utf-8") != code] == []
