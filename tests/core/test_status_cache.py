"""``status`` keeps what it read of the config and the plugins (:mod:`the_loop.cli.status`): a second run reads no
config model, and anything that could change its answer makes it read them again.

Every run is the real CLI in a subprocess, with the test plugin through ``THE_LOOP_EXTRA_PLUGINS`` and the cache in
the test's own ``THE_LOOP_CACHE_DIR``. ``PYTHONPROFILEIMPORTTIME`` shows whether a run imported pydantic (what
building the config models costs) without changing what it does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from the_loop.testing import LoopEnv, kill_lock_holders

TESTS_CORE = Path(__file__).parent
DISABLED = 'version: "0.12.0"\n'
POLLER = f"{DISABLED}polling: {{enabled: true, sources: [{{provider: fake}}]}}\n"


@pytest.fixture
def env(loop_env: LoopEnv, tmp_path: Path) -> Iterator[LoopEnv]:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    paths = [str(TESTS_CORE), str(plugins), os.environ.get("PYTHONPATH")]
    loop_env.env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    loop_env.env["THE_LOOP_EXTRA_PLUGINS"] = "plugins_for_tests.loop_test_plugin"
    loop_env.write_config(DISABLED)
    yield loop_env
    kill_lock_holders(loop_env.root)


def status(env: LoopEnv, *args: str, **extra: str) -> tuple[Any, bool]:
    """``status`` → (its result, whether it built the config models)."""
    result = env.run("status", *args, PYTHONPROFILEIMPORTTIME="1", **extra)
    built = any(line.split("|")[-1].strip() == "pydantic" for line in result.stderr.splitlines())
    return result, built


def rows(result: Any) -> dict[str, str]:
    return {
        line.split(" ", 1)[0]: line.split(" ", 1)[1].strip()
        for line in result.stdout.splitlines()
        if line.split(" ", 1)[0] in ("gh-webhook", "poller", "slack-listener", "cache-probe")
    }


def warnings(result: Any) -> list[str]:
    """Its ``warning:`` lines (the import times are on stderr too)."""
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


def test_a_second_status_reads_no_config_model_and_says_the_same(env: LoopEnv) -> None:
    env.write_config(f"{DISABLED}bogusTop: 1\n")
    first, built_first = status(env)
    second, built_second = status(env)
    assert built_first and not built_second
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    assert warnings(first) == warnings(second) == ["warning: config: unknown key bogusTop"]
    as_json, built = status(env, "--format", "json")
    assert not built and json.loads(as_json.stdout)["services"][0]["service"] == "gh-webhook"
    [kept] = (env.tmp / "cache").glob("status-*.json")
    assert str(env.root) in kept.read_text()


def test_an_edited_config_is_read_again(env: LoopEnv) -> None:
    status(env)
    env.write_config(f"{DISABLED}state: {{root: elsewhere}}\n")
    result, built = status(env)
    assert built and f"{env.config_path.parent.parent / 'elsewhere'}" in result.stdout


def test_a_config_that_no_longer_loads_is_refused_again(env: LoopEnv) -> None:
    status(env)
    env.write_config(f"{DISABLED}polling: {{intervalSeconds: 0}}\n")
    result, _ = status(env)
    assert result.returncode == 2 and "polling.intervalSeconds" in result.stderr


def test_an_enabled_service_that_is_not_running_has_its_problems_asked_every_time(
    env: LoopEnv, hold_lock: Callable[..., Any]
) -> None:
    """Problems come from the environment (a secret set or not), which the cache does not cover."""
    env.write_config(f"{DISABLED}webhooks: {{ghWebhook: {{enabled: true}}}}\n")
    without, _ = status(env)
    assert "THE_LOOP_GH_WEBHOOK_SECRET is not set" in without.stdout
    with_secret, built = status(env, THE_LOOP_GH_WEBHOOK_SECRET="x")
    assert built and "problem:" not in with_secret.stdout
    again, built = status(env)
    assert built and "THE_LOOP_GH_WEBHOOK_SECRET is not set" in again.stdout

    holder = hold_lock(env.root / "gh-webhook.pid")  # running: its problems were its own to pass at start
    status(env)
    running, built = status(env)
    assert not built and running.returncode == 0
    assert rows(running)["gh-webhook"] == f"running (pid {holder.pid}) [enabled]"


def test_a_pidfile_that_appears_or_goes_is_seen(env: LoopEnv) -> None:
    """Slack lists its listener while the listener's pidfile is there, even with no channels.slack section."""
    first, _ = status(env)
    assert "slack-listener" not in rows(first)
    (env.root / "slack-listener.pid").write_text("")
    listed, built = status(env)
    assert built and rows(listed)["slack-listener"] == "not running [disabled]"
    (env.root / "slack-listener.pid").unlink()
    gone, built = status(env)
    assert built and "slack-listener" not in rows(gone)


def test_an_edited_plugin_module_is_asked_again(env: LoopEnv, tmp_path: Path) -> None:
    """The plugin's hook is in its package's ``__init__``; what it answers comes from a module beside it, which no
    entry point names: an edit to either counts."""
    package = tmp_path / "plugins" / "cache_probe"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from the_loop import hookimpl\n"
        "from the_loop.interfaces import ServiceSpec\n\n"
        "from cache_probe.answer import ENABLED\n\n\n"
        "@hookimpl\n"
        "def loop_register_services(config):\n"
        "    state = config.state\n"
        "    return [ServiceSpec('cache-probe', ENABLED, 'x', state.pidfile('p'), state.logfile('p'), 'm:f')]\n"
    )
    (package / "answer.py").write_text("ENABLED = False\n")
    plugins = f"{env.env['THE_LOOP_EXTRA_PLUGINS']},cache_probe"
    first, _ = status(env, THE_LOOP_EXTRA_PLUGINS=plugins)
    assert rows(first)["cache-probe"] == "not running [disabled]"
    assert not status(env, THE_LOOP_EXTRA_PLUGINS=plugins)[1]
    (package / "answer.py").write_text("ENABLED = True  # edited\n")
    edited, built = status(env, THE_LOOP_EXTRA_PLUGINS=plugins)
    assert built and rows(edited)["cache-probe"] == "not running [enabled]"
    without, built = status(env)  # the plugin switch is part of the key
    assert built and "cache-probe" not in rows(without)


def test_the_env_file_and_home_are_part_of_the_key(env: LoopEnv) -> None:
    secrets = env.config_path.parent / "secrets.env"
    secrets.write_text("A=1\n")
    secrets.chmod(0o600)
    env.write_config(f"{DISABLED}env: {{file: secrets.env}}\n")
    status(env)
    assert not status(env)[1]
    secrets.chmod(0o644)  # readable by others: refused again, not answered from the cache
    refused, _ = status(env)
    assert refused.returncode == 2 and "env.file" in refused.stderr

    env.write_config(f"{DISABLED}state: {{root: ~/loop-state}}\n")
    status(env)
    other_home = env.tmp / "other-home"
    moved, built = status(env, HOME=str(other_home))
    assert built and str(other_home / "loop-state") in moved.stdout


@pytest.mark.parametrize("garbage", ["{not json", '{"key": 1}', "[]", '{"key": "x", "payload": {}}'])
def test_a_broken_cache_file_is_computed_again(env: LoopEnv, garbage: str) -> None:
    first, _ = status(env)
    [kept] = (env.tmp / "cache").glob("status-*.json")
    kept.write_text(garbage)
    again, built = status(env)
    assert built and again.stdout == first.stdout
    assert json.loads(kept.read_text())["payload"]["inputs"]  # written again


def test_no_cache_when_turned_off(env: LoopEnv) -> None:
    status(env, THE_LOOP_CACHE_DIR="")
    assert status(env, THE_LOOP_CACHE_DIR="")[1]
    assert not (env.tmp / "cache").exists()
