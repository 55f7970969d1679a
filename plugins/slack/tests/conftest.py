"""Fixtures of the Slack plugin's tests: the fake Slack (Web API + Socket Mode) and the loop of
:mod:`slack_world`. Tests import ``fake_slack`` and ``slack_world`` by name (the folder is on pytest's
``pythonpath``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack, Server
from slack_world import APP_TOKEN, BOT_TOKEN, Loop, write_config

from the_loop.sessions.tmux import TmuxRunner
from the_loop.testing import fake_plugin


@pytest.fixture
def fake_slack() -> Iterator[Server]:
    server = Server(FakeSlack())
    yield server
    server.close()


@pytest.fixture
def loop(
    tmp_path: Path, plugin_host: Any, tmux_runner: TmuxRunner, fake_slack: Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Loop]:
    import the_loop_slack.plugin

    plugin_host.register(fake_plugin, "fake")
    plugin_host.register(the_loop_slack.plugin, "slack")
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("FAKE_HARNESS_LOG", str(logs / "{session}.jsonl"))
    monkeypatch.setenv("FAKE_TICKETS", str(tmp_path / "tickets.json"))
    monkeypatch.setenv("THE_LOOP_SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("THE_LOOP_SLACK_APP_TOKEN", APP_TOKEN)
    settings = {
        "subscribe": ["session.awaiting_input", "comment.agent", "comment.human", "work-item.closed"],
        "read": {"mode": "poll"},
    }
    config = write_config(tmp_path, tmux_runner, fake_slack, settings)
    world = Loop(tmp_path, config, tmux_runner, fake_slack.fake, fake_slack, logs, tmp_path / "tickets.json", settings)
    yield world
    # D25 after every scenario: no byte of either token under the state root (event log included) or the tickets.
    for path in [*Path(world.config.state.root).rglob("*"), world.tickets]:
        if path.is_file():
            data = path.read_bytes()
            assert BOT_TOKEN.encode() not in data and APP_TOKEN.encode() not in data, path
