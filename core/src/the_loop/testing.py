"""the-loop's test kit, a pytest plugin usable by every distribution's tests (``-p the_loop.testing``).

Fixtures:

- ``loop_env`` — a throw-away world: ``HOME``, a config file at ``<tmp>/cfg/.the-loop/cli-config.yaml``, a cwd
  elsewhere, ``THE_LOOP_*`` variables cleared; ``loop_env.run(...)`` runs the real CLI in a subprocess.
- ``plugin_host`` — a fresh :class:`~the_loop.plugins.PluginHost` without entry points, installed as the
  process-wide host for the test; ``plugin_host.register`` adds a test plugin.
- ``hold_lock`` — start a process that holds a pidfile lock the way a running service does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from the_loop.plugins import PluginHost, set_host


@dataclass
class LoopEnv:
    """A temporary operator machine: config file, state root, home, and a cwd outside all of them."""

    tmp: Path
    home: Path
    cwd: Path
    config_path: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        """The state root a config at ``config_path`` without ``state.root`` resolves to."""
        return self.config_path.parent

    def write_config(self, content: str | dict[str, Any]) -> Path:
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict):
            import yaml

            content = yaml.safe_dump(content, sort_keys=False)
        self.config_path.write_text(textwrap.dedent(content), encoding="utf-8")
        return self.config_path

    def run(
        self, *args: str, config: bool = True, input: str | None = None, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """Run ``the-loop ARGS`` as a subprocess (``-c <config>`` first unless ``config=False``)."""
        argv = [sys.executable, "-m", "the_loop"]
        if config:
            argv += ["-c", str(self.config_path)]
        return subprocess.run(
            [*argv, *args],
            cwd=self.cwd,
            env={**self.env, **env},
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def events(self) -> list[dict[str, Any]]:
        import json

        path = self.root / "logs" / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def loop_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LoopEnv:
    home = tmp_path / "home"
    cwd = tmp_path / "elsewhere"
    home.mkdir()
    cwd.mkdir()
    config_path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    config_path.parent.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("THE_LOOP_")}
    env.update(HOME=str(home), THE_LOOP_STOP_TIMEOUT="10")
    for key in [k for k in os.environ if k.startswith("THE_LOOP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    return LoopEnv(tmp=tmp_path, home=home, cwd=cwd, config_path=config_path, env=env)


class TestHost(PluginHost):
    """A host for one test: ``register(obj, name)`` adds a plugin and undoes on teardown."""

    __test__ = False

    def register(self, plugin: object, name: str) -> None:
        self._register(plugin, name, "(test)", "", builtin=False)


@pytest.fixture
def plugin_host() -> Iterator[TestHost]:
    host = TestHost.create(load_entrypoints=False)
    set_host(host)
    yield host  # type: ignore[misc]
    set_host(None)


_HOLDER = """
import fcntl, os, signal, sys, time
path, mode = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
if mode != "empty":
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\\n".encode())
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("locked", flush=True)
while True:
    time.sleep(0.1)
"""


@dataclass
class Holder:
    process: subprocess.Popen[str]

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


@pytest.fixture
def hold_lock() -> Iterator[Any]:
    """``hold_lock(path, mode="normal"|"ignore-term"|"empty")`` → a :class:`Holder` once the lock is held."""
    holders: list[Holder] = []

    def start(path: Path, mode: str = "normal") -> Holder:
        process = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), mode], stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "locked"
        holder = Holder(process)
        holders.append(holder)
        return holder

    yield start
    for holder in holders:
        if holder.alive():
            holder.process.send_signal(signal.SIGKILL)
            holder.process.wait(timeout=10)


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)
