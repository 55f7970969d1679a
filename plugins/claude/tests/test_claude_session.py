"""A session spawned with the Claude adapter in real tmux, against a fake ``claude`` on PATH.

The fake records what Claude Code's own files held at the moment it started, then becomes the fake harness TUI
(``python -m the_loop.testing.harness``), which logs its argv. So the test sees that trust and plugin keys were
written before the harness ran, and that a respawn resumes the recorded conversation with ``--resume <id>``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.models import WorkEvent
from the_loop.sessions.dispatcher import Dispatcher
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state.registry import Endpoint, SessionRegistry
from the_loop.testing import fake_plugin
from the_loop.testing.conformance import hermetic_path
from the_loop.testing.harness import FakeHarness
from the_loop_claude import plugin as claude_plugin

REF = "fake:octo/repo#15"
HARNESS_ARGS = ["--permission-mode", "bypassPermissions"]

FAKE_CLAUDE = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path

def read(path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return "unparsable"

# Where Claude Code looks: $CLAUDE_CONFIG_DIR, else ~/.claude for settings and ~/.claude.json for the config.
override = os.environ.get("CLAUDE_CONFIG_DIR", "")
base = Path(override or os.environ["HOME"])
settings = (base if override else base / ".claude") / "settings.json"
seen = {{"config": read(base / ".claude.json"), "settings": read(settings)}}
with open(os.environ["FAKE_CLAUDE_SEEN"], "a") as handle:
    handle.write(json.dumps(seen) + "\\n")
# The transcript entry Claude Code appends when it takes its prompt (what the adapter reads as "ready").
argv = sys.argv[1:]
flag = "--resume" if "--resume" in argv else "--session-id"
session = argv[argv.index(flag) + 1]
project = base / ".claude" / "projects" if not override else base / "projects"
name = "".join(c if c.isalnum() and c.isascii() else "-" for c in os.getcwd())
(project / name).mkdir(parents=True, exist_ok=True)
with open(project / name / (session + ".jsonl"), "a") as handle:
    handle.write(json.dumps({{"type": "user", "message": {{"role": "user", "content": argv[-1]}}}}) + "\\n")
os.execv(sys.executable, [sys.executable, "-m", "the_loop.testing.harness", *sys.argv[1:]])
"""


def seen(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass
class Claude:
    """A config routing to the claude adapter, a dispatcher on a private tmux server, and the fake's logs."""

    config: LoadedConfig
    dispatcher: Dispatcher
    runner: TmuxRunner
    work: Path
    binary: Path
    harness: FakeHarness
    snapshots: Path

    def own(self) -> Endpoint:
        record = SessionRegistry(self.config.state).load(REF)
        assert record is not None and record.own is not None
        return record.own

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = self.config.state.events_path.read_text().splitlines()
        return [event for event in map(json.loads, lines) if event["event"] == name]


@pytest.fixture
def claude(
    tmp_path: Path, home: Path, plugin_host: Any, tmux_runner: TmuxRunner, monkeypatch: pytest.MonkeyPatch
) -> Claude:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").write_text(FAKE_CLAUDE)
    (bin_dir / "claude").chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    log, snapshots = tmp_path / "claude.jsonl", tmp_path / "seen.jsonl"
    # Set before the private tmux server starts: the panes inherit this environment (PATH, HOME, the logs).
    # Only the fake and a few system tools: a real `claude` installed on this machine is never found (hermetic).
    monkeypatch.setenv("PATH", hermetic_path(tmp_path / "sysbin", bin_dir))
    monkeypatch.setenv("FAKE_HARNESS_LOG", str(log))
    monkeypatch.setenv("FAKE_CLAUDE_SEEN", str(snapshots))
    monkeypatch.setenv("FAKE_TICKETS", str(tmp_path / "tickets.json"))
    plugin_host.register(fake_plugin, "fake")  # the fake: ticket provider
    plugin_host.register(claude_plugin, "claude")
    path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    routing = {
        "defaultHarness": "claude",
        "spawnWorkdir": str(work),
        "harnessArgs": {"claude": HARNESS_ARGS},
        "tmux": {"socketName": tmux_runner.socket, "resumeProbeSeconds": 0.3},
    }
    document = {"version": "0.12.0", "routing": routing, "integrations": {"claude": {"sandbox": True}}}
    path.write_text(yaml.safe_dump(document))
    config = load_config(path, plugin_host)
    events.configure(config.state.events_path, "test")
    dispatcher = Dispatcher(config, runner=tmux_runner)
    return Claude(config, dispatcher, tmux_runner, work, bin_dir / "claude", FakeHarness(log), snapshots)


def test_a_claude_session_finds_its_trust_written_before_it_started_and_resumes_by_id(claude: Claude) -> None:
    outcome = claude.dispatcher.dispatch(WorkEvent(delivery_id="d1", work_item=REF, text="start the work", spawn=True))

    assert outcome.status == "spawned", outcome
    own = claude.own()
    claude.harness.wait_ready(screen=lambda: claude.runner.capture(own.tmux_target))
    [first] = seen(claude.snapshots)  # Claude Code's files as the harness found them when it started
    assert first["config"]["projects"][str(claude.work)] == {
        "hasTrustDialogAccepted": True,
        "hasCompletedProjectOnboarding": True,
    }
    assert first["config"]["bypassPermissionsModeAccepted"] is True
    assert first["settings"]["enabledPlugins"] == {"the-loop@the-loop": True}
    assert first["settings"]["skipDangerousModePermissionPrompt"] is True
    start = claude.harness.records("start")[0]
    assert start["mode"] == "fresh" and start["session_id"] == own.harness_session_id
    argv = start["argv"]
    assert argv[:5] == ["--session-id", own.harness_session_id, *HARNESS_ARGS, "--disallowedTools=AskUserQuestion"]
    assert argv[-2] == "--" and "start the work" in argv[-1]
    assert own.harness_args == HARNESS_ARGS  # the unattended argument is not recorded as a harness argument
    [trusted] = claude.events("workspace.trusted")
    assert trusted["harness"] == "claude" and str(claude.work) in trusted["applied"]

    claude.runner.kill(own.tmux_target)
    outcome = claude.dispatcher.dispatch(WorkEvent(delivery_id="d2", work_item=REF, text="are you there"))

    assert outcome.status == "respawned", outcome
    starts = claude.harness.wait_for("start", 2)
    assert starts[1]["mode"] == "resume" and starts[1]["argv"][:2] == ["--resume", own.harness_session_id]
    assert claude.harness.wait_for_submitted(2)[-1] == "are you there"
    assert claude.own().harness_session_id == own.harness_session_id
    assert seen(claude.snapshots)[1]["config"] == first["config"]  # prepared again before the resume: no change
    assert len(claude.events("workspace.trusted")) == 1
    assert [e["resumed"] for e in claude.events("session.respawned")] == [True]


def test_c18_without_claude_on_path_no_tmux_session_is_created(claude: Claude) -> None:
    assert claude.dispatcher.dispatch(WorkEvent(delivery_id="d1", work_item=REF, text="go", spawn=True)).status == (
        "spawned"
    )
    claude.harness.wait_for("ready")
    claude.binary.unlink()  # claude uninstalled while the session ran
    claude.runner.kill(claude.own().tmux_target)

    outcome = claude.dispatcher.dispatch(WorkEvent(delivery_id="d2", work_item=REF, text="still there?"))

    assert outcome.status == "failed" and outcome.will_retry
    assert outcome.error.startswith("respawn: ") and "not found on PATH" in outcome.error
    assert claude.runner.list_sessions() == []
    assert len(claude.harness.records("start")) == 1
    assert claude.events("dispatch.failed")[-1]["error"] == outcome.error
    assert "d2" not in claude.own().recent_deliveries  # released, so a retry delivers it


def test_c27_an_unparsable_claude_config_is_left_byte_identical_and_the_spawn_goes_ahead(
    claude: Claude, home: Path
) -> None:
    broken = b'{"projects": {"/somewhere": '
    (home / ".claude.json").write_bytes(broken)

    outcome = claude.dispatcher.dispatch(WorkEvent(delivery_id="d1", work_item=REF, text="go", spawn=True))

    assert outcome.status == "spawned", outcome
    claude.harness.wait_ready(screen=lambda: claude.runner.capture(claude.own().tmux_target))
    assert (home / ".claude.json").read_bytes() == broken
    [first] = seen(claude.snapshots)
    assert first["config"] == "unparsable"
    assert first["settings"]["enabledPlugins"] == {"the-loop@the-loop": True}  # the other file was still prepared
    [failed] = claude.events("workspace.trust_failed")
    assert failed["level"] == "warning" and failed["harness"] == "claude" and ".claude.json" in failed["error"]
    assert not claude.events("workspace.trusted")


def test_c27_claude_config_dir_redirects_the_writes_the_harness_reads(
    claude: Claude, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_dir = tmp_path / "claude-config"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config_dir))  # before the first tmux command: panes inherit it

    outcome = claude.dispatcher.dispatch(WorkEvent(delivery_id="d1", work_item=REF, text="go", spawn=True))

    assert outcome.status == "spawned", outcome
    claude.harness.wait_ready(screen=lambda: claude.runner.capture(claude.own().tmux_target))
    [first] = seen(claude.snapshots)
    assert first["config"]["projects"][str(claude.work)]["hasTrustDialogAccepted"] is True
    assert first["settings"]["skipDangerousModePermissionPrompt"] is True
    assert (config_dir / ".claude.json").stat().st_mode & 0o777 == 0o600
    assert list(home.iterdir()) == []  # nothing written under the home directory
