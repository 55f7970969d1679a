"""One machine in the test's process, for tests that drive the dispatcher and the router directly (the ``world``
fixture of :mod:`the_loop.testing`).

A :class:`World` has the temp folders (``logs/`` for the fake harness, ``work/`` as the spawn workdir), the fake
plugin's environment (``FAKE_HARNESS_LOG``, ``FAKE_TICKETS``, ``FAKE_HARNESS_PREPARED``), the fake plugin on the test's
plugin host, and a config at ``<tmp>/cfg/.the-loop/cli-config.yaml`` with a dispatcher and a router over it.
A test module states its own config defaults once, in a fixture of its own::

    ROUTING = {"routing": {"spawnOnUnmatched": "always"}}

    @pytest.fixture
    def world(world: World) -> World:
        world.configure(defaults=ROUTING)
        return world
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.models import Actor, EventKind, InboundEvent, WorkEvent
from the_loop.routing.router import Router
from the_loop.sessions.dispatcher import Dispatcher
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state.registry import Endpoint, SessionRecord, SessionRegistry
from the_loop.state.slugs import slug_of
from the_loop.testing import fake_plugin
from the_loop.testing.harness import FakeHarness
from the_loop.testing.host import TestHost

REF = "fake:octo/repo#15"
"""The work item a world's readers and builders are about unless told otherwise."""
LABEL = "the-loop: auto-execute"
"""The label an :meth:`World.inbound_event` carries unless told otherwise."""


def _merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` on top; a mapping meeting a mapping is merged one level deep (``tmux={…}`` adds
    to the tmux section instead of replacing it)."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


class World:
    """One machine in this process: folders, the fake plugin's environment, a config written and loaded with the
    test's plugin host, the event log pointed at its state, a dispatcher on the test's tmux server and a router.

    :meth:`configure` writes the config again (a restart); the config, dispatcher and router are made on first use
    when a test never calls it."""

    __test__ = False

    def __init__(self, tmp: Path, runner: TmuxRunner, host: TestHost) -> None:
        """Make ``logs/`` and ``work/`` under ``tmp``; :meth:`create` also sets up the fake plugin."""
        self.tmp = tmp
        self.runner = runner
        self.host = host
        self.logs = tmp / "logs"
        self.work = tmp / "work"
        self.tickets = tmp / "tickets.json"
        self.prepared = tmp / "prepared.txt"
        self.config_path = tmp / "cfg" / ".the-loop" / "cli-config.yaml"
        self.defaults: dict[str, Any] = {}
        self.logs.mkdir()
        self.work.mkdir()
        self._config: LoadedConfig | None = None
        self._dispatcher: Dispatcher | None = None
        self._router: Router | None = None
        self._ids = itertools.count(1)

    @classmethod
    def create(cls, tmp: Path, runner: TmuxRunner, host: TestHost, monkeypatch: pytest.MonkeyPatch) -> World:
        """A world under ``tmp`` with the fake plugin registered on ``host`` and its environment set."""
        world = cls(tmp, runner, host)
        host.register(fake_plugin, "fake")
        monkeypatch.setenv("FAKE_HARNESS_LOG", str(world.logs / "{session}.jsonl"))
        monkeypatch.setenv("FAKE_TICKETS", str(world.tickets))
        monkeypatch.setenv("FAKE_HARNESS_PREPARED", str(world.prepared))
        return world

    # ---------------------------------------------------------------------------------------------- config

    def configure(
        self,
        *,
        defaults: Mapping[str, Any] | None = None,
        repositories: Sequence[str] | None = None,
        hooks: list[dict[str, Any]] | None = None,
        **routing: Any,
    ) -> Dispatcher:
        """Write and load the config, re-point the event log and make a new dispatcher (the router follows on next
        use): a daemon restart. The config is the world's base (fake harness, ``work/``, the test's tmux socket),
        then ``defaults`` (a config mapping; given, it is kept for every later call), then ``routing`` merged
        into ``routing:`` and ``repositories`` / ``hooks`` set at the top level. Nothing carries over from an
        earlier call but the defaults."""
        if defaults is not None:
            self.defaults = dict(defaults)
        base = {"defaultHarness": "fake", "spawnWorkdir": str(self.work), "tmux": {"socketName": self.runner.socket}}
        settings = {**self.defaults, "routing": _merged(_merged(base, self.defaults.get("routing", {})), routing)}
        if repositories is not None:
            settings["repositories"] = list(repositories)
        if hooks is not None:
            settings["hooks"] = hooks
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
        self._config = load_config(self.config_path, self.host)
        events.configure(self._config.state.events_path, "test")
        self._dispatcher = Dispatcher(self._config, runner=self.runner)
        self._router = None
        return self._dispatcher

    @property
    def config(self) -> LoadedConfig:
        """The loaded config (written with the defaults on first use if :meth:`configure` was never called)."""
        if self._config is None:
            self.configure()
        assert self._config is not None
        return self._config

    @property
    def dispatcher(self) -> Dispatcher:
        """The dispatcher over :attr:`config`, new with each :meth:`configure`."""
        if self._dispatcher is None:
            self.configure()
        assert self._dispatcher is not None
        return self._dispatcher

    @property
    def router(self) -> Router:
        """A router over :attr:`config` and :attr:`dispatcher`, made on first use after each :meth:`configure`."""
        if self._router is None:
            self._router = Router(self.config, self.dispatcher)
        return self._router

    # --------------------------------------------------------------------------------------------- readers

    def record(self, ref: str = REF) -> SessionRecord | None:
        """This machine's session record of ``ref`` (None when there is none)."""
        return SessionRegistry(self.config.state).load(ref)

    def endpoint(self, ref: str = REF) -> Endpoint | None:
        """``ref``'s own session endpoint, None when there is no record or no own session in it."""
        record = self.record(ref)
        return record.own if record else None

    def own(self, ref: str = REF) -> Endpoint:
        """``ref``'s own session endpoint, which must exist."""
        own = self.endpoint(ref)
        assert own is not None, f"no own session recorded for {ref}"
        return own

    def harness(self, ref: str = REF, *, session_id: str | None = None) -> FakeHarness:
        """The fake harness of ``ref``'s own session as recorded now, or of the conversation ``session_id``."""
        return FakeHarness(self.logs / f"{session_id or self.own(ref).harness_session_id}.jsonl")

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The event log in order: every event, or those called ``name``."""
        path = self.config.state.events_path
        lines = path.read_text().split("\n") if path.exists() else []  # not splitlines: U+2028 may be in a line
        found = [json.loads(line) for line in lines if line.strip()]
        return [event for event in found if name is None or event["event"] == name]

    def ticket(self, ref: str = REF) -> dict[str, Any]:
        """The fake ticket of ``ref`` (its ``comments``, ``reactions``, ``state``…); empty when nothing is stored."""
        return json.loads(self.tickets.read_text())["items"].get(ref, {}) if self.tickets.exists() else {}

    def comments(self, ref: str = REF) -> list[str]:
        """The comments posted on ``ref``'s fake ticket, in order."""
        return list(self.ticket(ref).get("comments", []))

    def control(self, ref: str = REF) -> dict[str, Any] | None:
        """The ``control`` section of ``ref``'s portable record, as stored (None without one)."""
        path = self.config.state.portable_record(slug_of(self.config.state, ref))
        return json.loads(path.read_text()).get("control") if path.exists() else None

    # -------------------------------------------------------------------------------------------- builders

    def work_event(
        self, text: str = "hello", *, ref: str = REF, spawn: bool = False, delivery_id: str = "", **fields: Any
    ) -> WorkEvent:
        """A :class:`WorkEvent` for ``ref`` with a fresh delivery id unless one is given; ``fields`` are the
        event's other fields (``kind``, ``actor``, ``source``…)."""
        delivery_id = delivery_id or f"event-{next(self._ids)}"
        return WorkEvent(delivery_id=delivery_id, work_item=ref, text=text, spawn=spawn, **fields)

    def spawn(self, text: str = "start the work", *, ref: str = REF) -> FakeHarness:
        """Dispatch a spawn for ``ref`` with boot prompt ``text``; its fake harness once it is ready for input."""
        outcome = self.dispatcher.dispatch(self.work_event(text, ref=ref, spawn=True))
        assert outcome.status == "spawned", outcome
        harness = self.harness(ref)
        harness.wait_ready(screen=lambda: self.runner.capture(self.own(ref).tmux_target))
        return harness

    def inbound_event(self, body: str | None = "hello", **fields: Any) -> InboundEvent:
        """A fresh comment on ``ref`` (default :data:`REF`) from the fake provider, as an ingress normalizes it: the
        fields of :func:`comment_event` (``actor``, ``kind``, ``labels``, ``key`` …), with the next number."""
        return comment_event(next(self._ids), body, **fields)


def comment_event(
    n: int,
    body: str | None,
    *,
    ref: str = REF,
    actor: str | None = "octocat",
    kind: EventKind = "comment",
    labels: tuple[str, ...] = (LABEL,),
    repository: str = "octo/repo",
    key: str | None = None,
    closed: Literal["issue-closed", "pr-merged", "pr-closed"] | None = None,
) -> InboundEvent:
    """Comment number ``n`` by GitHub user ``actor`` on ``ref`` from the fake provider, as an ingress normalizes it
    (``key`` the dedupe key, ``fake:comment:<n>`` unless given)."""
    return InboundEvent(
        dedupe_key=key or f"fake:comment:{n}",
        delivery_id=f"delivery-{n}",
        provider="fake",
        transport="webhook",
        event="issue_comment",
        action="created",
        kind=kind,
        repository=repository,
        actor=Actor(provider="github", id=actor) if actor else None,
        body=body,
        entity=ref,
        work_items=(ref,),
        labels=labels,
        url=f"https://tickets.example/{n}",
        excerpt={"comment": {"body": body or "", "author": actor or ""}},
        ack={"ref": ref, "id": str(n)},
        closed=closed,
    )
