"""The dispatcher on real tmux with the fake harness: spawn, deliver, respawn/resume, occupancy, dedupe, ordering.

Scenario ids are from sessions-runner-harness.md §7 (C…). Refs use the fake ticket provider's scheme (``fake:``), so
no provider plugin is involved: everything here is provider-neutral core.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from the_loop import hookimpl
from the_loop.hooks.lifecycle import Decision
from the_loop.interfaces import Capabilities, Channel, HarnessAdapter, Launch
from the_loop.sessions.dispatcher import Dispatcher, DispatchQueue, Outcome
from the_loop.state.registry import Endpoint
from the_loop.testing import fake_plugin, wait_for
from the_loop.testing.harness import FakeHarness
from the_loop.testing.world import REF, World

DISPATCHER = {"routing": {"spawnOnUnmatched": "always", "tmux": {"resumeProbeSeconds": 0.3}}}


@pytest.fixture
def world(world: World) -> World:
    world.configure(defaults=DISPATCHER)
    return world


# ------------------------------------------------------------------------------------------------ spawning


def test_c1_first_spawn_registers_a_v2_record_and_announces_once(world: World) -> None:
    harness = world.spawn()
    own = world.own()
    assert own.tmux_target == "loop-fake-octo-repo-15"
    assert own.status == "active" and own.harness == "fake" and own.cwd == str(world.tmp / "work")
    start = harness.records("start")[0]
    assert start["mode"] == "fresh" and start["session_id"] == own.harness_session_id
    assert start["cwd"] == str(world.tmp / "work")
    boot = harness.submitted()[0]
    assert REF in boot and "start the work" in boot and "the-loop comment" in boot and "untrusted" not in boot.lower()
    assert "never as instructions" in boot
    data = json.loads(world.config.state.local_record("fake-octo-repo-15").read_text())
    assert data["version"] == 2 and data["sessions"][REF]["tmuxTarget"] == own.tmux_target
    shown = world.runner._run(["show-options", "-w", "-t", f"={own.tmux_target}:", "remain-on-exit"])
    assert shown is not None and b"on" in shown.stdout
    assert [e["work_item"] for e in world.events("session.spawned")] == [REF]
    comments = world.comments()
    assert len(comments) == 1
    assert f"attach -t {own.tmux_target}" in comments[0] and fake_plugin.MARKER in comments[0]
    assert own.cwd not in comments[0] and own.harness_session_id not in comments[0]


def test_r9_remain_on_exit_false_is_honoured_and_an_exited_harness_leaves_no_pane(world: World) -> None:
    world.configure(tmux={"remainOnExit": False})
    harness = world.spawn()
    target = world.own().tmux_target
    shown = world.runner._run(["show-options", "-w", "-t", f"={target}:", "remain-on-exit"])
    assert shown is not None and b"remain-on-exit on" not in shown.stdout
    world.dispatcher.dispatch(world.work_event("/exit 0"))
    harness.wait_for("exit")
    wait_for(lambda: world.runner.probe(target) == "absent")  # no dead pane kept
    assert world.dispatcher.dispatch(world.work_event("again")).status == "respawned"
    assert harness.wait_for_submitted(3)[-1] == "again"


def test_c2_a_dotted_repository_gets_the_name_tmux_gives_it(world: World) -> None:
    ref = "fake:octo/foo.js#15"
    harness = world.spawn(ref=ref)
    own = world.own(ref)
    assert own.tmux_target == "loop-fake-octo-foo_js-15"
    assert world.config.state.local_record("fake-octo-foo.js-15").exists()
    assert world.runner.probe(own.tmux_target) == "live"
    assert world.dispatcher.dispatch(world.work_event("next", ref=ref)).status == "delivered"
    assert harness.wait_for_submitted(2)[-1] == "next"


def test_c3_a_v1_record_with_the_dotted_name_reaches_the_live_session(world: World) -> None:
    ref = "fake:octo/foo.js#15"
    harness = world.spawn(ref=ref)
    own = world.own(ref)
    path = world.config.state.local_record("fake-octo-foo.js-15")
    path.write_text(
        json.dumps(
            {
                "workItem": {"ref": ref},
                "harness": "fake",
                "harnessSessionId": own.harness_session_id,
                "cwd": own.cwd,
                "status": "active",
                "tmuxTarget": "loop-fake-octo-foo.js-15",
                "recentDeliveries": [],
            }
        )
    )
    assert world.dispatcher.dispatch(world.work_event("via v1", ref=ref)).status == "delivered"
    assert harness.wait_for_submitted(2)[-1] == "via v1"
    assert len(harness.records("start")) == 1  # no respawn
    data = json.loads(path.read_text())
    assert data["version"] == 2 and data["sessions"][ref]["tmuxTarget"] == "loop-fake-octo-foo_js-15"


def test_a_v1_record_naming_no_harness_respawns_its_conversation_with_the_default_harness(world: World) -> None:
    harness = world.spawn()
    own = world.own()
    world.runner.kill(own.tmux_target)
    path = world.config.state.local_record("fake-octo-repo-15")
    v1 = {"workItem": {"ref": REF}, "harnessSessionId": own.harness_session_id, "cwd": own.cwd, "status": "active"}
    path.write_text(json.dumps(v1))  # written before records named their harness
    assert world.dispatcher.dispatch(world.work_event("after the upgrade")).status == "respawned"
    assert harness.wait_for_submitted(2)[-1] == "after the upgrade"
    assert [e["resumed"] for e in world.events("session.respawned")] == [True]
    assert world.own().harness == "fake"


def test_preparation_runs_before_every_spawn_and_both_halves_of_a_respawn(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.spawn()
    assert len(world.prepared.read_text().splitlines()) == 1
    monkeypatch.setenv("FAKE_HARNESS_REFUSE_RESUME", "1")
    world.runner.kill(world.own().tmux_target)
    outcome = world.dispatcher.dispatch(world.work_event("after"))
    assert outcome.status == "respawned", (outcome, world.events("session.spawn_failed"))
    assert len(world.prepared.read_text().splitlines()) == 3  # the resume attempt and the fresh fallback


def opening_channel(opened: list[str], check: Callable[[], None] = lambda: None) -> type[Channel]:
    """A channel that records each conversation it is asked to open (``check`` runs as it opens one)."""

    class Opens(Channel):
        name = "opens"

        @classmethod
        def enabled(cls, config: Any) -> bool:
            return True

        def open_conversation(self, ref: Any, title: str) -> dict[str, Any]:
            opened.append(str(ref))
            check()
            return {}

        def publish(self, binding: Any, text: str) -> None: ...

        def health(self) -> str:
            return "ok"

    return Opens


def register_channels(plugin_host: Any, *channels: type[Channel]) -> None:
    class ChannelPlugin:
        @hookimpl
        def loop_register_channels(self) -> list[type[Channel]]:
            return list(channels)

    plugin_host.register(ChannelPlugin(), "channels-test")


def test_channels_open_before_the_spawn_and_a_failing_one_never_blocks_it(world: World, plugin_host: Any) -> None:
    opened: list[str] = []

    def before_the_spawn() -> None:
        assert not world.config.state.local_record("fake-octo-repo-15").exists()

    Opens = opening_channel(opened, before_the_spawn)

    class Broken(Opens):  # type: ignore[valid-type,misc]
        name = "broken"

        def open_conversation(self, ref: Any, title: str) -> dict[str, Any]:
            raise RuntimeError("slack is down")

    register_channels(plugin_host, Broken, Opens)
    world.spawn()
    assert opened == [REF]
    failed = world.events("channel.open_failed")
    assert [e["channel"] for e in failed] == ["broken"] and "slack is down" in failed[0]["error"]


def test_a_session_spawn_hook_can_refuse_and_a_raising_hook_changes_nothing(world: World, plugin_host: Any) -> None:
    class Hooks:
        @hookimpl
        def loop_session_spawn(self, ctx: Any) -> Decision:
            raise RuntimeError("hook bug")

    plugin_host.register(Hooks(), "raising")
    world.spawn()
    assert world.events("hooks.failed")[0]["point"] == "session_spawn"

    class Refuses:
        @hookimpl
        def loop_session_spawn(self, ctx: Any) -> Decision:
            return Decision(proceed=False, reason="not today")

    plugin_host.register(Refuses(), "refuses")
    outcome = world.dispatcher.dispatch(world.work_event("x", ref="fake:octo/repo#16", spawn=True))
    assert outcome == Outcome("dropped", reason="hook-refused", error="not today")
    assert world.record("fake:octo/repo#16") is None


def test_c15_a_live_occupant_is_never_spawned_over(world: World, tmp_path: Path) -> None:
    occupant = FakeHarness(tmp_path / "occupant.jsonl")
    world.runner.spawn("loop-fake-octo-repo-15", tmp_path, occupant.argv(session_id="human"))
    occupant.wait_ready()
    outcome = world.dispatcher.dispatch(world.work_event("go", spawn=True))
    assert outcome.status == "failed" and not outcome.will_retry
    assert "kill-session -t loop-fake-octo-repo-15" in outcome.error
    assert world.events("session.spawn_failed")[0]["tmux_target"] == "loop-fake-octo-repo-15"
    assert world.runner.probe("loop-fake-octo-repo-15") == "live"
    assert occupant.submitted() == []
    assert world.record() is None


class _Missing(HarnessAdapter):
    name = "missing"
    capabilities = Capabilities(tmux_hostable=True, preassigned_session_id=True, can_resume=True)

    def fresh_argv(self, launch: Launch) -> list[str]:
        return ["/nonexistent/claude", "--session-id", launch.session_id, launch.prompt]

    def resume_argv(self, launch: Launch) -> list[str]:
        return ["/nonexistent/claude", "--resume", launch.session_id, launch.prompt]


class _OneShot(_Missing):
    name = "oneshot"
    capabilities = Capabilities(tmux_hostable=False, preassigned_session_id=False, can_resume=False)


class _AdapterPlugin:
    @hookimpl
    def loop_register_harnesses(self) -> list[type[HarnessAdapter]]:
        return [_Missing, _OneShot]


def test_c18_a_missing_harness_binary_creates_no_tmux_session(world: World, plugin_host: Any) -> None:
    plugin_host.register(_AdapterPlugin(), "adapters")
    dispatcher = world.configure(defaultHarness="missing")
    outcome = dispatcher.dispatch(world.work_event("go", spawn=True))
    assert outcome.status == "failed" and outcome.will_retry
    assert "not found on PATH" in outcome.error
    assert world.runner.list_sessions() == []
    assert world.events("session.spawn_failed")[0]["will_retry"] is True


def test_c18_a_respawn_without_the_harness_binary_creates_no_session_and_releases_the_id(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.spawn()
    world.runner.kill(world.own().tmux_target)
    monkeypatch.setenv("FAKE_HARNESS_PYTHON", str(world.tmp / "no-such-python"))
    outcome = world.dispatcher.dispatch(world.work_event("are you there", delivery_id="r-1"))
    assert outcome.status == "failed" and outcome.will_retry and outcome.error.startswith("respawn: ")
    assert "not found on PATH" in outcome.error
    assert world.runner.list_sessions() == []
    [failed] = world.events("dispatch.failed")
    assert failed["error"].startswith("respawn: ") and failed["will_retry"] is True
    assert world.events("session.spawn_failed")[-1]["will_retry"] is True
    monkeypatch.delenv("FAKE_HARNESS_PYTHON")
    assert (
        world.dispatcher.dispatch(world.work_event("are you there", delivery_id="r-1")).status == "respawned"
    )  # released


def test_c15_a_record_without_a_target_never_kills_a_live_occupant(
    world: World, tmp_path: Path, tmux_shim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R16/R21: a self-registered record (no tmuxTarget) takes the respawn path, which probes the name first: a
    live occupant is delivered into (and recorded), never killed — even when the harness could not start anyway."""
    occupant = FakeHarness(tmp_path / "occupant.jsonl")
    world.runner.spawn("loop-fake-octo-repo-15", tmp_path, occupant.argv(session_id="human"))
    occupant.wait_ready(screen=lambda: world.runner.capture("loop-fake-octo-repo-15"))
    world.dispatcher.registry.update(
        REF, lambda r: r.sessions.update({REF: Endpoint("fake", "registered-id", str(world.tmp / "work"))})
    )
    monkeypatch.setenv("FAKE_HARNESS_PYTHON", str(world.tmp / "no-such-python"))
    world.dispatcher.runner = tmux_shim.runner()
    outcome = world.dispatcher.dispatch(world.work_event("for whoever is there"))
    assert outcome.status == "delivered"
    assert occupant.wait_for_submitted(1) == ["for whoever is there"]
    assert world.runner.probe("loop-fake-octo-repo-15") == "live"
    assert tmux_shim.count("kill-session") == 0 and tmux_shim.count("new-session") == 0
    assert world.events("session.respawn_averted")[0]["tmux_target"] == "loop-fake-octo-repo-15"
    own = world.own()
    assert own.tmux_target == "loop-fake-octo-repo-15" and own.harness_session_id == "registered-id"


def test_c19_a_harness_that_cannot_be_tmux_hosted_is_refused_by_name(world: World, plugin_host: Any) -> None:
    opened: list[str] = []
    plugin_host.register(_AdapterPlugin(), "adapters")
    register_channels(plugin_host, opening_channel(opened))
    outcome = world.configure(defaultHarness="oneshot").dispatch(world.work_event("go", spawn=True))
    assert outcome.status == "failed" and not outcome.will_retry
    assert "'oneshot'" in outcome.error and "pre-assignable session id" in outcome.error
    assert world.runner.list_sessions() == []
    assert opened == []  # R6: a start without a usable harness is not accepted, so no conversation is opened


def test_c32_the_session_gets_its_identity_and_no_credentials(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp_secret_value")
    monkeypatch.setenv("THE_LOOP_GH_WEBHOOK_SECRET", "hook-secret")
    harness = world.spawn()
    start = harness.records("start")[0]
    assert start["env"]["THE_LOOP_WORK_ITEM"] == REF
    assert start["env"]["THE_LOOP_CLI_CONFIG"] == str(world.config.ref.path)
    assert "GH_TOKEN" not in start["credentials_present"]
    assert "THE_LOOP_GH_WEBHOOK_SECRET" not in start["credentials_present"]
    assert "ghp_secret_value" not in json.dumps(harness.records())


# ----------------------------------------------------------------------------------------------- delivering


def test_c4_c6_events_arrive_in_order_each_as_one_submitted_message(world: World) -> None:
    harness = world.spawn()
    texts = [f"event {n}\nline two of {n}" for n in range(20)]
    for text in texts:
        assert world.dispatcher.dispatch(world.work_event(text)).status == "delivered"
    assert harness.wait_for_submitted(21)[1:] == texts
    assert world.own().last_event_at
    assert len(world.events("dispatch.succeeded")) == 20


def test_input_is_cleaned_of_terminal_escapes(world: World) -> None:
    harness = world.spawn()
    world.dispatcher.dispatch(world.work_event("before\x1b[31mred\x1b[0m\x07after"))
    assert harness.wait_for_submitted(2)[-1] == "before[31mred[0mafter"


def test_c8_a_delivery_id_is_delivered_once_even_after_a_restart(world: World) -> None:
    harness = world.spawn()
    assert world.dispatcher.dispatch(world.work_event("once", delivery_id="d-1")).status == "delivered"
    assert world.dispatcher.dispatch(world.work_event("once", delivery_id="d-1")).reason == "duplicate-delivery"
    restarted = world.configure()
    assert restarted.dispatch(world.work_event("once", delivery_id="d-1")).reason == "already-processed"
    harness.wait_for_submitted(2)
    for n in range(60):
        restarted.dispatch(world.work_event(f"n{n}", delivery_id=f"bulk-{n}"))
    assert world.own().recent_deliveries == [f"bulk-{n}" for n in range(10, 60)]
    assert harness.submitted().count("once") == 1


def test_no_session_means_no_spawn_for_a_plain_event(world: World) -> None:
    outcome = world.dispatcher.dispatch(world.work_event("hello"))
    assert outcome == Outcome("dropped", reason="no-session")
    assert world.runner.list_sessions() == []
    assert world.events("dispatch.dropped")[0]["reason"] == "no-session"


def test_c23_a_paused_session_gets_nothing_and_nothing_is_replayed(world: World) -> None:
    harness = world.spawn()
    world.dispatcher.registry.update(REF, lambda r: setattr(r.own, "status", "paused"))
    assert world.dispatcher.dispatch(world.work_event("suppressed")).reason == "session-paused"
    world.dispatcher.registry.update(REF, lambda r: setattr(r.own, "status", "active"))
    world.dispatcher.dispatch(world.work_event("after resume"))
    assert harness.wait_for_submitted(2)[1:] == ["after resume"]


def test_c7_concurrent_items_each_get_exactly_their_own_events_in_order(world: World) -> None:
    refs = [f"fake:octo/repo#{n}" for n in range(21, 25)]
    harnesses = {ref: world.spawn(ref=ref) for ref in refs}
    queue = DispatchQueue(world.dispatcher, max_workers=4)
    futures = []
    for n in range(50):
        for ref in refs:
            futures.append(queue.submit(world.work_event(f"{ref} #{n}", ref=ref)))
    assert all(f.result(timeout=60).status == "delivered" for f in futures)
    queue.shutdown()
    for ref, harness in harnesses.items():
        assert harness.wait_for_submitted(51)[1:] == [f"{ref} #{n}" for n in range(50)]


# ---------------------------------------------------------------------------------------- respawn, resume


def test_c9_a_killed_session_is_respawned_resuming_the_same_conversation(world: World) -> None:
    harness = world.spawn()
    session_id = world.own().harness_session_id
    world.runner.kill(world.own().tmux_target)
    outcome = world.dispatcher.dispatch(world.work_event("are you there", delivery_id="after-kill"))
    assert outcome.status == "respawned"
    starts = harness.wait_for("start", 2)
    assert starts[1]["mode"] == "resume" and starts[1]["session_id"] == session_id
    assert harness.wait_for_submitted(2)[-1] == "are you there"
    own = world.own()
    assert own.harness_session_id == session_id and "after-kill" in own.recent_deliveries
    assert world.events("session.respawned")[0]["resumed"] is True
    assert len(world.comments()) == 1  # no second announcement


def test_a_killed_tmux_server_leads_to_the_same_conversation_resumed(world: World) -> None:
    harness = world.spawn()
    session_id = world.own().harness_session_id
    world.runner._run(["kill-server"])
    assert world.dispatcher.dispatch(world.work_event("back")).status == "respawned"
    assert harness.wait_for("start", 2)[1]["session_id"] == session_id
    assert world.runner.probe(world.own().tmux_target) == "live"


def test_a_respawn_for_a_long_event_boots_with_it_capped_instead_of_failing_forever(world: World) -> None:
    """The boot prompt is one argv word and tmux refuses a command over ~16 KB ("command too long"): a respawn
    whose pending event is longer boots with it capped (as a first spawn does), rather than failing every retry."""
    from the_loop.sessions.prompts import BOOT_PROMPT_CAP

    harness = world.spawn()
    world.runner.kill(world.own().tmux_target)
    long_text = "word " * 5000  # 25,000 bytes
    assert world.dispatcher.dispatch(world.work_event(long_text)).status == "respawned"
    boot = harness.wait_for_submitted(2)[-1]
    assert long_text.startswith(boot[:1000]) and boot.endswith("[… truncated by the-loop]")
    assert len(boot.encode()) <= BOOT_PROMPT_CAP
    assert world.events("session.respawned")[0]["resumed"] is True


def test_c10_an_exited_harness_leaves_a_dead_pane_that_is_replaced(world: World) -> None:
    harness = world.spawn()
    world.dispatcher.dispatch(world.work_event("/exit 0"))
    wait_for(lambda: world.runner.probe(world.own().tmux_target) == "dead")
    assert world.dispatcher.dispatch(world.work_event("again")).status == "respawned"
    assert harness.wait_for("start", 2)[1]["mode"] == "resume"
    assert harness.submitted().count("again") == 1


def test_c11_a_refused_resume_falls_back_to_a_fresh_conversation(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.spawn()
    old_id = world.own().harness_session_id
    monkeypatch.setenv("FAKE_HARNESS_REFUSE_RESUME", "1")
    world.runner.kill(world.own().tmux_target)
    assert world.dispatcher.dispatch(world.work_event("fresh please")).status == "respawned"
    new_id = world.own().harness_session_id
    assert new_id != old_id
    fresh = world.harness(session_id=new_id)
    assert fresh.wait_for("start")[0]["mode"] == "fresh"
    assert fresh.wait_for_submitted(1) == ["fresh please"]
    assert world.events("session.resume_failed")[0]["harness_session_id"] == old_id
    assert world.events("session.respawned")[0]["resumed"] is False


@pytest.mark.parametrize("case", ["opted-out", "bad-id"])
def test_c12_no_resume_when_opted_out_or_the_recorded_id_is_not_an_id(world: World, case: str) -> None:
    world.spawn()
    if case == "opted-out":
        world.configure(tmux={"resumeOnRespawn": False})
    else:
        world.dispatcher.registry.update(REF, lambda r: setattr(r.own, "harness_session_id", "--help"))
    world.runner.kill(world.own().tmux_target)
    assert world.dispatcher.dispatch(world.work_event("new")).status == "respawned"
    new = world.harness()
    start = new.wait_for("start")[0]
    assert "--resume" not in start["argv"] and start["mode"] == "fresh"
    assert world.events("session.resume_failed")


def test_c31_a_record_without_a_tmux_session_heals_on_its_next_event(world: World) -> None:
    path = world.config.state.local_record("fake-octo-repo-15")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "workItem": {"ref": REF},
                "harness": "fake",
                "harnessSessionId": "registered-id",
                "cwd": str(world.tmp / "work"),
                "status": "active",
                "tmuxTarget": "",
                "runner": "process",
            }
        )
    )
    assert world.dispatcher.dispatch(world.work_event("first event")).status == "respawned"
    assert world.own().tmux_target == "loop-fake-octo-repo-15"
    data = json.loads(path.read_text())
    assert data["version"] == 2 and "runner" not in data["sessions"][REF]


def test_c14_a_stale_dead_reading_ends_in_a_delivery_not_a_respawn(
    world: World, tmux_shim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = world.spawn()
    world.dispatcher.runner = tmux_shim.runner()
    tmux_shim.set_faults(panes_dead=1)  # the delivery's own liveness check is real; the first probe lies
    world.dispatcher.runner.deliver = _missing_once(world.dispatcher.runner.deliver)  # type: ignore[method-assign]
    assert world.dispatcher.dispatch(world.work_event("still here")).status == "delivered"
    assert harness.wait_for_submitted(2)[-1] == "still here"
    assert world.events("session.respawn_averted")
    assert tmux_shim.count("new-session") == 0 and tmux_shim.count("kill-session") == 0


def _missing_once(deliver: Any) -> Any:
    """The first delivery reports the session missing (as a crash between probe and paste would)."""
    from the_loop.sessions.tmux import DeliveryError

    calls = {"n": 0}

    def wrapped(target: str, text: str) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise DeliveryError("session_missing", "gone", transient=False)
        deliver(target, text)

    return wrapped


def test_c13_an_unanswered_probe_never_causes_a_respawn_over_a_live_session(world: World, tmux_shim: Any) -> None:
    harness = world.spawn()
    world.dispatcher.runner = tmux_shim.runner(timeout=1)
    tmux_shim.set_faults(delay={"has-session": [3, -1]})
    assert world.dispatcher.dispatch(world.work_event("probe is slow")).status == "delivered"
    assert harness.wait_for_submitted(2)[-1] == "probe is slow"
    assert tmux_shim.count("new-session") == 0 and tmux_shim.count("kill-session") == 0


def test_c16_a_dead_occupant_that_cannot_be_cleared_keeps_the_delivery_id(world: World, tmux_shim: Any) -> None:
    harness = world.spawn()
    world.dispatcher.dispatch(world.work_event("/exit 0"))
    wait_for(lambda: world.runner.probe(world.own().tmux_target) == "dead")
    harness.wait_for("exit")
    world.dispatcher.runner = tmux_shim.runner()
    tmux_shim.set_faults(fail={"kill-session": -1})
    outcome = world.dispatcher.dispatch(world.work_event("blocked", delivery_id="stuck"))
    assert outcome.reason == "session-occupied"
    dropped = [e for e in world.events("dispatch.dropped") if e["reason"] == "session-occupied"]
    assert dropped and dropped[0]["level"] == "error"
    assert world.dispatcher.dispatch(world.work_event("blocked", delivery_id="stuck")).reason == "duplicate-delivery"


def test_dispatches_never_run_send_keys_or_name_a_client(world: World, tmux_shim: Any) -> None:
    from the_loop.testing.shim import violations

    world.dispatcher.runner = tmux_shim.runner()
    harness = world.spawn()
    world.dispatcher.dispatch(world.work_event("a\nb"))
    world.runner.kill(world.own().tmux_target)
    world.dispatcher.dispatch(world.work_event("respawn"))
    harness.wait_for_submitted(2)
    assert tmux_shim.calls()
    assert violations(tmux_shim.calls()) == []


def test_one_work_items_dispatches_are_serialised_across_dispatchers(world: World) -> None:
    """Two dispatchers (two processes' worth) racing to spawn one item end with one session."""
    other = Dispatcher(world.config, runner=world.runner)
    results: list[Outcome] = []
    barrier = threading.Barrier(2)

    def go(dispatcher: Dispatcher, n: int) -> None:
        barrier.wait()
        results.append(dispatcher.dispatch(world.work_event(f"start {n}", spawn=True)))

    threads = [threading.Thread(target=go, args=(d, n)) for n, d in enumerate((world.dispatcher, other))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(o.status for o in results) == ["delivered", "spawned"]
    assert world.runner.list_sessions() == ["loop-fake-octo-repo-15"]
    assert len(world.events("session.spawned")) == 1


def test_a_crash_between_the_paste_and_the_record_delivers_again_after_a_restart(world: World, mocker: Any) -> None:
    """Kill point "between paste and record": the delivery id was not yet in recentDeliveries, so the restarted
    daemon pastes the event a second time (at-least-once: a human's comment is never lost). A crash after the record
    drops the redelivery as already-processed."""
    harness = world.spawn()
    mocker.patch.object(Dispatcher, "_record_delivery", side_effect=SystemExit("killed"))  # an injected fault
    with pytest.raises(SystemExit):
        world.dispatcher.dispatch(world.work_event("exactly this", delivery_id="kp-1"))
    mocker.stopall()
    restarted = world.configure()
    assert restarted.dispatch(world.work_event("exactly this", delivery_id="kp-1")).status == "delivered"
    assert harness.wait_for_submitted(3)[1:] == ["exactly this", "exactly this"]
    assert restarted.dispatch(world.work_event("exactly this", delivery_id="kp-1")).reason == "duplicate-delivery"
    assert (
        world.configure().dispatch(world.work_event("exactly this", delivery_id="kp-1")).reason == "already-processed"
    )
