"""The Slack tests' world: a loop on real tmux with the fake harness and the fake ticket provider (refs
``fake:octo/repo#N``), Slack enabled and pointed at the fake Slack. A uniquely named module (not ``conftest``) so
test modules can import it beside other plugins' test folders."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from fake_slack import FakeSlack, Server

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.models import Actor, InboundEvent, WorkEvent
from the_loop.sessions.dispatcher import Dispatcher
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state.registry import SessionRegistry
from the_loop.testing.harness import FakeHarness

BOT_TOKEN = "xoxb-test-0123456789-secretbot"
APP_TOKEN = "xapp-test-0123456789-secretapp"
REF = "fake:octo/repo#15"
DANA = "U0DANA"
CHANNEL = "C0CENTRAL"


@dataclass
class Loop:
    tmp: Path
    config: LoadedConfig
    runner: TmuxRunner
    slack: FakeSlack
    server: Server
    logs: Path
    tickets: Path
    settings: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)  # top-level config sections beside routing and channels

    def reload(self, **slack: Any) -> LoadedConfig:
        """Rewrite the config with ``channels.slack`` keys merged in."""
        self.settings = {**self.settings, **slack}
        self.config = write_config(self.tmp, self.runner, self.server, self.settings, self.sections)
        return self.config

    def configure(self, **sections: Any) -> LoadedConfig:
        """Rewrite the config with these top-level sections (``standingSessions``…) set."""
        self.sections = {**self.sections, **sections}
        return self.reload()

    def channel(self) -> Any:
        from the_loop_slack.channel import SlackChannel

        return SlackChannel(self.config)

    def dispatcher(self) -> Dispatcher:
        return Dispatcher(self.config, runner=self.runner)

    def spawn(self, ref: str = REF) -> FakeHarness:
        outcome = self.dispatcher().dispatch(
            WorkEvent(delivery_id=f"spawn-{ref}", work_item=ref, text="go", spawn=True)
        )
        assert outcome.status == "spawned", outcome
        own = SessionRegistry(self.config.state).load(ref).own  # type: ignore[union-attr]
        harness = FakeHarness(self.logs / f"{own.harness_session_id}.jsonl")
        harness.wait_ready(screen=lambda: self.runner.capture(own.tmux_target))
        return harness

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        path = self.config.state.events_path
        lines = path.read_text().splitlines() if path.exists() else []
        return [e for e in map(json.loads, lines) if name is None or e["event"] == name]

    def comments(self, ref: str = REF) -> list[str]:
        if not self.tickets.exists():
            return []
        return json.loads(self.tickets.read_text())["items"].get(ref, {}).get("comments", [])

    def binding(self, ref: str = REF) -> dict[str, Any] | None:
        from the_loop import channels

        return channels.binding(self.config, "slack", ref)

    def portable(self, ref: str = REF) -> dict[str, Any]:
        """The work item's portable record, or ``{}``."""
        return self.config.store.read(ref) or {}

    def thread(self, ref: str = REF) -> tuple[str, str]:
        """(channel id, thread ts) of the work item's bound conversation; it must have one."""
        bound = self.binding(ref)
        assert bound is not None
        return bound["channel"], bound["thread"]

    def poll(self) -> dict[str, int]:
        """One read cycle over every bound thread (``channels poll``), in this process."""
        from the_loop import channels

        return channels.read_cycle(self.config, self.channel())

    def route(self) -> int:
        from the_loop.routing.service import route_pending

        return route_pending(self.config)


def write_config(
    tmp: Path, runner: TmuxRunner, server: Server, slack: dict[str, Any], sections: dict[str, Any] | None = None
) -> LoadedConfig:
    from the_loop.plugins import get_host

    path = tmp / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "routing": {
            "enabled": True,
            "defaultHarness": "fake",
            "spawnOnUnmatched": "always",
            "spawnWorkdir": str(tmp / "work"),
            "tmux": {"socketName": runner.socket, "resumeProbeSeconds": 0.3},
            "authorizedUsers": [{"name": "dana", "slack": DANA}],
            "control": {"requireStartCommand": False},
        },
        "channels": {"slack": {"enabled": True, "channel": CHANNEL, "apiBaseUrl": server.base_url, **slack}},
        **(sections or {}),
    }
    path.write_text(yaml.safe_dump(document))
    config = load_config(path, get_host())
    events.configure(config.state.events_path, "test")
    return config


def dana_comment(body: str, number: int) -> InboundEvent:
    """A ticket comment by Dana (authorized through her Slack id) on the test work item, as an ingress delivers it."""
    return InboundEvent(
        dedupe_key=f"fake:comment:{number}",
        delivery_id=f"d-{number}",
        provider="fake",
        transport="webhook",
        event="issue_comment",
        kind="comment",
        actor=Actor(provider="slack", id=DANA),
        body=body,
        entity=REF,
        work_items=(REF,),
    )


def config_in_process(config_path: str, env: dict[str, str], source: str) -> LoadedConfig:
    """In a spawned child process: the test plugins (fake and Slack) and the loaded config, as a daemon has them."""
    import os

    os.environ.update(env)
    import the_loop_slack.plugin
    from the_loop.plugins import set_host
    from the_loop.testing import TestHost, fake_plugin

    host = TestHost.create(load_entrypoints=False)
    host.register(fake_plugin, "fake")
    host.register(the_loop_slack.plugin, "slack")
    set_host(host)
    config = load_config(config_path, host)
    events.configure(config.state.events_path, source)
    return config
