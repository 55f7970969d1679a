"""ConfigWatcher: the config a running service acts on (issue-222). A content change loads the file again; a touch
does not; a text that does not load is reported once and the last good config stays in force."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from the_loop import events
from the_loop.config import load_config
from the_loop.daemon.config_watch import ConfigWatcher
from the_loop.plugins import get_host
from the_loop.testing import LoopEnv

BASE = {"version": "0.12.0", "routing": {"authorizedUsers": ["octocat"]}}


@pytest.fixture
def watched(loop_env: LoopEnv) -> tuple[LoopEnv, ConfigWatcher]:
    loop_env.write_config(BASE)
    config = load_config(loop_env.config_path, get_host())
    events.configure(config.state.events_path, "test")
    return loop_env, ConfigWatcher(config)


def _bump(path: Path) -> None:
    """Move the mtime on, so a rewrite within the same clock tick is still seen as a change."""
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))


def _events(env: LoopEnv, name: str) -> list[dict[str, Any]]:
    return [record for record in env.events() if record["event"] == name]


def test_an_unchanged_or_touched_file_keeps_the_same_config(watched: tuple[LoopEnv, ConfigWatcher]) -> None:
    env, watcher = watched
    first = watcher.current()
    assert watcher.current() is first
    _bump(env.config_path)  # touched: the same text
    assert watcher.current() is first
    assert not _events(env, "config.reloaded") and not _events(env, "config.reload-failed")


def test_an_edit_is_loaded_and_names_the_changed_top_level_keys(watched: tuple[LoopEnv, ConfigWatcher]) -> None:
    env, watcher = watched
    first = watcher.current()
    env.write_config({**BASE, "routing": {"authorizedUsers": ["hubot"]}, "repositories": ["octo/repo"]})
    _bump(env.config_path)
    current = watcher.current()
    assert current is not first and current.core.routing.authorized_users == ["hubot"]
    assert watcher.current() is current
    assert [e["changed"] for e in _events(env, "config.reloaded")] == [["repositories", "routing"]]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("routing: [unclosed\n", "cli-config.yaml"),
        ("version: '0.12.0'\nrouting: {maxConcurrentDispatches: lots}\n", "routing.maxConcurrentDispatches"),
        ("version: '0.12.0'\nstate: {root: /elsewhere}\n", "restart the services"),
        ("version: '0.12.0'\nrouting: {registryDir: other}\n", "routing.registryDir"),
        ("version: '0.12.0'\nhooks: [{name: gone, module: no_such_module_anywhere}]\n", "gone"),
    ],
)
def test_a_text_that_does_not_load_keeps_the_last_good_config_and_is_reported_once(
    watched: tuple[LoopEnv, ConfigWatcher], text: str, named: str
) -> None:
    env, watcher = watched
    first = watcher.current()
    env.config_path.write_text(text)
    _bump(env.config_path)
    assert watcher.current() is first
    assert watcher.current() is first  # asked again: not loaded (nor reported) again
    failed = _events(env, "config.reload-failed")
    assert len(failed) == 1 and named in failed[0]["error"]

    env.write_config({**BASE, "routing": {"authorizedUsers": ["dana"]}})  # fixed: the next edit applies
    _bump(env.config_path)
    assert watcher.current().core.routing.authorized_users == ["dana"]


def test_a_file_missing_mid_save_keeps_the_config(watched: tuple[LoopEnv, ConfigWatcher]) -> None:
    env, watcher = watched
    first = watcher.current()
    env.config_path.unlink()
    assert watcher.current() is first
    env.write_config(BASE)  # saved back with the same text
    assert watcher.current() is first
    assert not _events(env, "config.reload-failed")
