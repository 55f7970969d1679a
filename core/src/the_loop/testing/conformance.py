"""The harness conformance kit: one set of scenarios every harness adapter must pass, run through the real
dispatcher, real tmux and the real harness.

An adapter's tests subclass :class:`HarnessConformance` and supply a :class:`HarnessKit` that knows how to start
the harness offline and read back what its model received::

    class TestMyHarness(HarnessConformance):
        @pytest.fixture
        def kit(self, tmp_path: Path) -> HarnessKit:
            return MyKit(tmp_path)

The oracle is never the pane: it is what the model received (:meth:`HarnessKit.requests`: per request to the
model, the human texts of its conversation so far, oldest first) and what the harness recorded of the conversation.
Core's fake harness passes through :class:`FakeHarnessKit`; Claude Code, against the fake Anthropic API
(:mod:`the_loop.testing.fake_anthropic`), through the claude plugin's kit.
"""

from __future__ import annotations

import abc
import itertools
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop.sessions.tmux import unframed

__all__ = [
    "FakeHarnessKit",
    "HarnessConformance",
    "HarnessKit",
    "HarnessStartFailure",
    "HarnessSteering",
    "Rig",
    "hermetic_path",
    "process_running",
]

REF = "fake:octo/conformance#7"
_COMMENTS = itertools.count(1)
TOOLS = ("env", "sh", "bash", "git", "tmux", "cat", "ls", "uname", "which", "ps")


def hermetic_path(directory: Path, *first: Path) -> str:
    """A PATH holding ``first`` and a directory of links to the few system tools a harness needs, so nothing
    else installed on the machine (another ``claude`` above all) is found."""
    directory.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        found = shutil.which(tool)
        link = directory / tool
        if found and not link.exists():
            link.symlink_to(found)
    python = directory / "python3"
    if not python.exists():
        python.symlink_to(sys.executable)
    return os.pathsep.join([*map(str, first), str(directory)])


def process_running(word: str) -> bool:
    """Whether a process on this machine runs with ``word`` (a conversation id) in its command line."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if word.encode() in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


class HarnessKit(abc.ABC):
    """How the scenarios start one harness offline and read back what its model received."""

    name: str  # the adapter's name

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.home = tmp / "home"  # a fresh HOME: no config of the harness's own yet
        self.home.mkdir(parents=True, exist_ok=True)

    def plugins(self) -> list[tuple[object, str]]:
        """The plugins that bring the adapter (core's fake plugin, with the fake ticket provider, is always in)."""
        return []

    @abc.abstractmethod
    def environment(self) -> dict[str, str | None]:
        """Variables for the harness panes (set before the private tmux server starts): HOME, PATH, the fake API;
        None removes one."""

    def config(self) -> dict[str, Any]:
        """Extra config for the file (``routing`` keys are merged, other top-level keys added)."""
        return {}

    def dying_config(self) -> dict[str, Any]:
        """Config under which the harness dies (or hangs at a screen of its own) during its start."""
        return {}

    # What the pane shows when it dies that way: the start failure's logged last lines must hold it.
    dying_sign: str = ""

    @abc.abstractmethod
    def requests(self) -> list[list[str]]:
        """Per request to the model, in order: the human texts of the conversation it carried, oldest first."""

    @abc.abstractmethod
    def busy(self, seconds: float) -> str:
        """A message that keeps the harness busy for about ``seconds`` once submitted."""

    @abc.abstractmethod
    def forget(self, session_id: str, cwd: Path) -> None:
        """Delete what the harness keeps of conversation ``session_id`` (so it can no longer be resumed)."""

    def stop(self) -> None:  # noqa: B027 - most kits start nothing
        """Release what the kit started (a fake API server)."""

    # The steering scenarios (:class:`HarnessSteering`) ask these of a kit whose adapter declares steering.

    def long_turn(self, seconds: float) -> str:
        """A message whose turn runs about ``seconds`` and can be interrupted (the default: :meth:`busy`)."""
        return self.busy(seconds)

    def costly(self, tokens: int) -> str:
        """A message whose turn spends about ``tokens`` output tokens (as the harness records its usage)."""
        raise NotImplementedError(f"{type(self).__name__} has no costly turn")

    def asking(self, what: str) -> str:
        """A message after which the harness waits at a decision prompt of its own about ``what``."""
        raise NotImplementedError(f"{type(self).__name__} cannot be made to ask")

    def asking_config(self) -> dict[str, Any]:
        """Config under which the harness asks instead of going ahead (the default: the kit's own)."""
        return {}

    def ran(self, what: str, cwd: Path) -> bool:
        """Whether what :meth:`asking` asked about (a command writing a file: ``echo yes > allowed.txt``) was done,
        in the session's ``cwd``."""
        raise NotImplementedError(f"{type(self).__name__} cannot tell")


class FakeHarnessKit(HarnessKit):
    """Core's fake harness TUI: a "request" is each submitted input, with the submissions of its conversation
    before it (a resumed conversation keeps them, as a model's history would be)."""

    name = "fake"

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.log = tmp / "fake-harness.jsonl"
        self.state = tmp / "fake-state"

    def environment(self) -> dict[str, str | None]:
        return {
            "HOME": str(self.home),
            "PATH": hermetic_path(self.tmp / "sysbin"),
            "FAKE_HARNESS_LOG": str(self.log),
            "FAKE_HARNESS_STATE": str(self.state),
        }

    dying_sign = "exiting at start with status 3"

    def dying_config(self) -> dict[str, Any]:
        return {"routing": {"harnessArgs": {"fake": ["--exit-at-start", "3"]}}}

    def requests(self) -> list[list[str]]:
        from the_loop.testing.harness import FakeHarness

        history: dict[str, list[str]] = {}
        current = ""
        requests = []
        for record in FakeHarness(self.log).records():
            if record["kind"] == "start":
                current = record["session_id"]
                if record["mode"] == "fresh":
                    history[current] = []
            elif record["kind"] == "submit":
                history.setdefault(current, []).append(unframed(record["text"]))
                requests.append(list(history[current]))
        return requests

    def busy(self, seconds: float) -> str:
        return f"/busy {seconds:g}"

    def forget(self, session_id: str, cwd: Path) -> None:
        (self.state / session_id).unlink()

    def costly(self, tokens: int) -> str:
        return f"a costly turn [tokens {tokens}]"

    def asking(self, what: str) -> str:
        return f"/ask {what}"

    def ran(self, what: str, cwd: Path) -> bool:
        from the_loop.testing.harness import FakeHarness

        return any(r["choice"] == "1" and r["asked"] == what for r in FakeHarness(self.log).records("answered"))


@dataclass
class Rig:
    """The dispatcher, config and private tmux server a scenario drives, around one kit."""

    kit: HarnessKit
    config: Any
    dispatcher: Any
    runner: Any
    work: Path

    def dispatch(self, text: str, *, spawn: bool = False, delivery_id: str = "") -> Any:
        from the_loop.models import WorkEvent

        event = WorkEvent(delivery_id=delivery_id or f"d-{uuid.uuid4()}", work_item=REF, text=text, spawn=spawn)
        return self.dispatcher.dispatch(event)

    def own(self) -> Any:
        from the_loop.state.registry import SessionRegistry

        record = SessionRegistry(self.config.state).load(REF)
        return record.own if record else None

    def events(self, name: str) -> list[dict[str, Any]]:
        path = self.config.state.events_path
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return [event for event in map(json.loads, lines) if event["event"] == name]

    def newest(self) -> list[str]:
        """The newest human text of every request to the model, in order."""
        return [texts[-1] for texts in self.kit.requests() if texts]

    def wait_for(self, predicate: Callable[[list[list[str]]], bool], timeout: float = 60.0) -> list[list[str]]:
        deadline = time.monotonic() + timeout
        while not predicate(requests := self.kit.requests()):
            if time.monotonic() > deadline:
                raise AssertionError(f"the model did not receive what was expected within {timeout}s: {requests}")
            time.sleep(0.05)
        return requests

    def wait_received(self, text: str, timeout: float = 60.0) -> list[str]:
        """Wait until a request's newest human text contains ``text``; that request's texts."""
        requests = self.wait_for(lambda rs: any(r and text in r[-1] for r in rs), timeout)
        return next(r for r in requests if r and text in r[-1])

    def interrupt(self, text: str) -> Any:
        """``the-loop sessions interrupt`` with ``text``, through the dispatcher."""
        from the_loop.refs import parse_ref
        from the_loop.sessions import operations

        return operations.interrupt(self.config, parse_ref(REF), text, source="cli", actor="conformance")

    def comment(self, body: str, actor: str) -> Any:
        """A comment by ``actor`` on the ticket, through the router (as an ingress hands it over)."""
        from the_loop.routing.router import Router
        from the_loop.testing.world import comment_event

        event = comment_event(next(_COMMENTS), body, ref=REF, actor=actor, repository="octo/conformance")
        return Router(self.config, self.dispatcher).handle(event)

    def watch_until(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """Tick the session watch until it logged event ``name``; that event."""
        from the_loop.sessions.steering.watch import Watch

        watch = Watch()
        deadline = time.monotonic() + timeout
        while not self.events(name):
            assert time.monotonic() < deadline, f"no {name} within {timeout}s"
            watch.tick(self.config, self.runner)
            time.sleep(0.1)
        return self.events(name)[-1]

    def comments(self) -> list[str]:
        path = self.kit.tmp / "tickets.json"
        return json.loads(path.read_text())["items"].get(REF, {}).get("comments", []) if path.exists() else []

    def type_draft(self, text: str) -> None:
        """A person types on the input line without sending."""
        import subprocess

        target = self.own().tmux_target
        subprocess.run(
            [*self.runner.command_prefix, "send-keys", "-t", f"={target}:", "-l", text], check=True, timeout=10
        )
        deadline = time.monotonic() + 10
        while text not in self.runner.capture(target):
            assert time.monotonic() < deadline, "the draft never showed in the pane"
            time.sleep(0.05)


class HarnessConformance:
    """The scenarios. Subclass it as ``Test…`` and provide a ``kit`` fixture returning a :class:`HarnessKit`."""

    @pytest.fixture
    def rig(
        self, kit: HarnessKit, tmp_path: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any
    ) -> Iterator[Rig]:
        yield from rig_for(kit, tmp_path, plugin_host, monkeypatch, request)

    # ------------------------------------------------------------------------------------------- scenarios

    def test_a_fresh_spawn_from_a_fresh_home_reaches_the_model(self, rig: Rig) -> None:
        outcome = rig.dispatch("Please look at the failing test in widget.py.", spawn=True)
        assert outcome.status == "spawned", outcome
        first = rig.wait_received("Please look at the failing test in widget.py.")
        assert len(first) == 1  # a fresh conversation: the boot prompt is its first turn
        assert rig.own().status == "active" and rig.runner.probe(rig.own().tmux_target) == "live"
        _no_control_bytes(rig)

    def test_one_line_and_multi_line_deliveries_each_arrive_whole_as_their_own_turn(self, rig: Rig) -> None:
        assert rig.dispatch("Start here.", spawn=True).ok
        rig.wait_received("Start here.")
        assert rig.dispatch("A one-line comment from octocat.").status == "delivered"
        rig.wait_received("A one-line comment from octocat.")
        multi = "A review from hubot:\n\n- first point\n- second point\n\n```\ncode block\n```\nend of review"
        assert rig.dispatch(multi).status == "delivered"
        rig.wait_received("end of review")
        assert rig.newest()[-2:] == ["A one-line comment from octocat.", multi]
        _no_control_bytes(rig)

    def test_a_delivery_while_the_harness_is_busy_is_queued_and_not_lost(self, rig: Rig) -> None:
        assert rig.dispatch("Start here.", spawn=True).ok
        rig.wait_received("Start here.")
        assert rig.dispatch(rig.kit.busy(3)).status == "delivered"
        rig.wait_received(rig.kit.busy(3))
        assert rig.dispatch("Sent while you were busy.").status == "delivered"
        rig.wait_received("Sent while you were busy.")
        assert rig.newest()[-1] == "Sent while you were busy."

    def test_a_humans_unsent_draft_is_kept_ahead_of_the_event_and_both_reach_the_model(self, rig: Rig) -> None:
        assert rig.dispatch("Start here.", spawn=True).ok
        rig.wait_received("Start here.")
        rig.type_draft("my half typed note")
        assert rig.dispatch("Event: octocat commented.").status == "delivered"
        turn = rig.wait_received("Event: octocat commented.")
        assert turn[-1] == "my half typed note\nEvent: octocat commented."
        _no_control_bytes(rig)

    def test_after_the_tmux_server_dies_the_next_event_resumes_the_conversation_with_its_history(
        self, rig: Rig
    ) -> None:
        assert rig.dispatch("Remember the word pineapple.", spawn=True).ok
        rig.wait_received("Remember the word pineapple.")
        session_id = rig.own().harness_session_id
        rig.runner.kill_server()
        outcome = rig.dispatch("What was the word?")
        assert outcome.status == "respawned", outcome
        turn = rig.wait_received("What was the word?")
        assert any("Remember the word pineapple." in text for text in turn[:-1])  # the model saw the earlier turn
        assert rig.own().harness_session_id == session_id
        [respawned] = rig.events("session.respawned")
        assert respawned["resumed"] is True

    def test_a_conversation_that_no_longer_exists_is_not_resumed_and_the_event_starts_a_fresh_one(
        self, rig: Rig
    ) -> None:
        assert rig.dispatch("Remember the word pineapple.", spawn=True).ok
        rig.wait_received("Remember the word pineapple.")
        old = rig.own()
        rig.runner.kill_server()
        _wait_gone(old.harness_session_id)  # a harness may still write its conversation as it exits
        rig.kit.forget(old.harness_session_id, Path(old.cwd))
        outcome = rig.dispatch("A comment after the history was lost.")
        assert outcome.status == "respawned", outcome
        turn = rig.wait_received("A comment after the history was lost.")
        assert not any("pineapple" in text for text in turn)  # a fresh conversation, booted with the event
        assert rig.own().harness_session_id != old.harness_session_id
        [failed] = rig.events("session.resume_failed")
        assert old.harness_session_id in failed["error"]
        [respawned] = rig.events("session.respawned")
        assert respawned["resumed"] is False


STEERING = {
    "repositories": ["octo/conformance"],
    "routing": {
        "enabled": True,
        "spawnOnUnmatched": "always",
        "authorizedUsers": ["octocat"],
        "control": {"requireStartCommand": False},
        "tmux": {"interruptTimeoutSeconds": 20},
        "budgets": {"tokens": 400},
    },
}


ALLOWED = "echo yes > allowed.txt"  # what the decision prompt asks to run (a shell builtin: no PATH needed)


class HarnessSteering:
    """The steering scenarios (:mod:`the_loop.sessions.steering`), for an adapter that declares them: an interrupt
    during a long turn, a token budget and its raise, a decision prompt answered from the ticket."""

    @pytest.fixture
    def rig(
        self, kit: HarnessKit, tmp_path: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any
    ) -> Iterator[Rig]:
        yield from rig_for(kit, tmp_path, plugin_host, monkeypatch, request, _merge(STEERING, kit.asking_config()))

    def test_an_interrupt_during_a_long_turn_stops_it_and_its_words_are_the_next_turn_with_the_history(
        self, rig: Rig
    ) -> None:
        assert rig.dispatch("Remember the word pineapple.", spawn=True).ok
        rig.wait_received("Remember the word pineapple.")
        long = rig.kit.long_turn(60)
        assert rig.dispatch(long).status == "delivered"
        rig.wait_received(long)
        began = time.monotonic()

        done = rig.interrupt("Use the other API instead.")

        assert done.ok, done.message
        turn = rig.wait_received("Use the other API instead.")
        assert time.monotonic() - began < 30  # the 60-second turn did not run to its end
        assert any("pineapple" in text for text in turn[:-1])  # the conversation is kept
        [pressed] = rig.events("session.interrupted")
        assert pressed["stopped"] is True, pressed

    def test_a_token_budget_pauses_the_session_after_the_turn_that_crosses_it_and_a_raise_resumes_it(
        self, rig: Rig
    ) -> None:
        from the_loop.refs import parse_ref
        from the_loop.sessions import operations

        assert rig.dispatch("Start here.", spawn=True).ok
        rig.wait_received("Start here.")
        costly = rig.kit.costly(500)  # past the 400 the rig allows
        assert rig.dispatch(costly).status == "delivered"

        exhausted = rig.watch_until("budget.exhausted")

        assert exhausted["measure"] == "tokens" and exhausted["spent"] >= 400
        assert rig.own().status == "paused" and rig.runner.probe(rig.own().tmux_target) == "live"
        assert rig.dispatch("Held off while paused.").reason == "session-paused"
        raised = operations.raise_budget(rig.config, parse_ref(REF), "+1000tokens", source="cli", actor="ops")
        assert raised.ok and raised.effect == "resumed", raised.message
        assert rig.dispatch("Carry on.").status == "delivered"
        turn = rig.wait_received("Carry on.")
        assert any("Start here." in text for text in turn[:-1])  # the same conversation, resumed

    def test_a_decision_prompt_is_posted_and_only_an_authorized_answer_on_the_ticket_presses_it(self, rig: Rig) -> None:
        assert rig.dispatch("Start here.", spawn=True).ok
        rig.wait_received("Start here.")
        cwd = Path(rig.own().cwd)
        assert rig.dispatch(rig.kit.asking(ALLOWED)).status == "delivered"

        blocked = rig.watch_until("session.blocked")

        assert len(blocked["options"]) >= 2
        posted = [c for c in rig.comments() if "waiting for a decision" in c]
        assert len(posted) == 1 and "the-loop answer" in posted[0]
        assert rig.comment("the-loop answer 1", actor="mallory").reason == "unauthorized-actor"
        time.sleep(1)
        assert not rig.kit.ran(ALLOWED, cwd)
        assert rig.comment("the-loop answer 1", actor="octocat").reason == "control-executed"
        deadline = time.monotonic() + 30
        while not rig.kit.ran(ALLOWED, cwd):
            assert time.monotonic() < deadline, "the allowed action never ran"
            time.sleep(0.1)
        assert rig.events("session.prompt_answered")[-1]["actor"] == "octocat"


class HarnessStartFailure:
    """The start-failure scenario, on a rig whose harness dies during its start (``HarnessKit.dying_config``)."""

    @pytest.fixture
    def rig(
        self, kit: HarnessKit, tmp_path: Path, plugin_host: Any, monkeypatch: pytest.MonkeyPatch, request: Any
    ) -> Iterator[Rig]:
        # A harness that waits at a screen of its own (instead of exiting) is caught by the readiness bound.
        bound = {"routing": {"tmux": {"readyTimeoutSeconds": 10}}}
        yield from rig_for(kit, tmp_path, plugin_host, monkeypatch, request, _merge(bound, kit.dying_config()))

    def test_a_harness_that_dies_during_start_fails_the_spawn_and_releases_the_event(self, rig: Rig) -> None:
        outcome = rig.dispatch("Start here.", spawn=True, delivery_id="start-1")
        assert outcome.status == "failed" and outcome.will_retry, outcome
        [failed] = rig.events("session.spawn_failed")
        assert failed["will_retry"] is True, failed
        assert any(rig.kit.dying_sign in line for line in failed["last_lines"]), failed[
            "last_lines"
        ]  # for the operator
        assert rig.own() is None  # nothing recorded as active
        assert rig.kit.requests() == []
        again = rig.dispatch("Start here.", spawn=True, delivery_id="start-1")  # released: a retry is tried again
        assert again.status == "failed" and again.reason != "duplicate-delivery", again
        assert len(rig.events("session.spawn_failed")) == 2


def rig_for(
    kit: HarnessKit,
    tmp_path: Path,
    plugin_host: Any,
    monkeypatch: pytest.MonkeyPatch,
    request: Any,
    extra: dict[str, Any] | None = None,
) -> Iterator[Rig]:
    """A fixture body: the rig around ``kit`` (``extra`` config merged last); the kit is stopped at teardown."""
    from the_loop import events
    from the_loop.config import load_config
    from the_loop.sessions.dispatcher import Dispatcher

    runner = request.getfixturevalue("tmux_runner")
    for name, value in kit.environment().items():  # before the private tmux server starts: panes inherit it
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("FAKE_TICKETS", str(tmp_path / "tickets.json"))
    from the_loop.testing import fake_plugin

    plugin_host.register(fake_plugin, "fake")
    for plugin, name in kit.plugins():
        plugin_host.register(plugin, name)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    path = write_config(kit, tmp_path, runner.socket, work, extra)
    config = load_config(path, plugin_host)
    events.configure(config.state.events_path, "test")
    try:
        yield Rig(kit, config, Dispatcher(config, runner=runner), runner, work)
    finally:
        kit.stop()


def write_config(kit: HarnessKit, tmp: Path, socket: str, work: Path, extra: dict[str, Any] | None = None) -> Path:
    """The rig's config file under ``tmp``: ``kit``'s harness as the default on tmux server ``socket``, spawning
    in ``work``, no announcement; the kit's own config and then ``extra`` merged over it."""
    routing: dict[str, Any] = {
        "defaultHarness": kit.name,
        "spawnWorkdir": str(work),
        "announce": {"enabled": False},
        "tmux": {"socketName": socket, "readyTimeoutSeconds": 60},
    }
    document: dict[str, Any] = {"version": "0.12.0"}
    for part in (kit.config(), extra or {}):
        for key, value in part.items():
            if key == "routing":
                routing = _merge(routing, value)
            elif isinstance(value, dict) and isinstance(document.get(key), dict):
                document[key] = _merge(document[key], value)
            else:
                document[key] = value
    document["routing"] = routing
    path = tmp / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        nested = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if nested else value
    return merged


def _wait_gone(session_id: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while process_running(session_id):
        assert time.monotonic() < deadline, f"the harness of {session_id} is still running"
        time.sleep(0.05)


def _no_control_bytes(rig: Rig) -> None:
    """Nothing the model received holds a control byte other than a line break or a tab."""
    for texts in rig.kit.requests():
        for text in texts:
            assert not [c for c in text if ord(c) < 0x20 and c not in "\n\t"], repr(text)
