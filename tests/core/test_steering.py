"""Steering a live session, with real tmux and the fake harness: the interrupt, budgets, admission by capacity and
stuck sessions (blocked on a decision prompt, or idle). The same scenarios run against the real Claude Code in
``plugins/claude/tests/test_steering_claude.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from the_loop.inbox import Inbox
from the_loop.inbox.worker import InboxWorker
from the_loop.refs import parse_ref
from the_loop.routing.service import inbox_handler, urgent_for
from the_loop.sessions import operations
from the_loop.sessions.steering import admission, budgets
from the_loop.sessions.steering.watch import Watch
from the_loop.testing import wait_for
from the_loop.testing.harness import FakeHarness
from the_loop.testing.world import REF, World

OTHER, THIRD = "fake:octo/repo#16", "fake:octo/repo#17"
STEERING = {
    "repositories": ["octo/repo"],
    "routing": {
        "enabled": True,
        "spawnOnUnmatched": "labeled",
        "authorizedUsers": ["octocat"],
        "announce": {"enabled": False},
        "tmux": {"interruptTimeoutSeconds": 5},
        "stuck": {"checkSeconds": 0.2},
    },
}


@pytest.fixture
def world(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    # Before the first spawn starts the private tmux server: its panes inherit it.
    monkeypatch.setenv("FAKE_HARNESS_STATE", str(world.tmp / "conversations"))
    world.configure(defaults=STEERING)
    return world


def started(world: World, ref: str = REF) -> FakeHarness:
    outcome = world.router.handle(world.inbound_event("the-loop start", ref=ref))
    assert outcome.reason == "control-executed", outcome
    harness = world.harness(ref)
    harness.wait_ready(screen=lambda: world.runner.capture(world.own(ref).tmux_target))
    return harness


def comment(world: World, body: str, *, ref: str = REF, actor: str = "octocat") -> Any:
    return world.router.handle(world.inbound_event(body, ref=ref, actor=actor))


def say(world: World, text: str, ref: str = REF) -> Any:
    """Text straight into the session (a fake harness command is read at the start of a turn, not in an event)."""
    return world.dispatcher.dispatch(world.work_event(text, ref=ref))


def cli(world: World, *args: str) -> Any:
    """``the-loop -c <the world's config> ARGS`` in a process of its own, as an operator runs it."""
    env = {**os.environ, "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin"}
    argv = [sys.executable, "-m", "the_loop", "-c", str(world.config_path), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


def listed(world: World) -> dict[str, dict[str, Any]]:
    result = cli(world, "sessions", "list", "--format", "json")
    assert result.returncode == 0, result.stderr
    return {row["endpoint"]: row for row in json.loads(result.stdout)}


def tick(world: World) -> dict[str, int]:
    return Watch().tick(world.config, world.runner)


# ------------------------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("+5usd", ("cost", 5.0)),
        ("+5 USD", ("cost", 5.0)),
        ("+200000tokens", ("tokens", 200000.0)),
        ("+50k tokens", ("tokens", 50000.0)),
        ("+1.5m tokens", ("tokens", 1500000.0)),
        ("+30min", ("wall", 30.0)),
        ("+2h", ("wall", 120.0)),
    ],
)
def test_a_raise_is_read_in_the_units_a_person_writes(text: str, parsed: tuple[str, float]) -> None:
    assert budgets.parse_amount(text, "usd") == parsed


@pytest.mark.parametrize("text", ["5 bananas", "+5eur", "+0tokens", "+5k usd", "lots", "+2kh"])
def test_an_amount_that_is_none_of_them_is_refused_with_why(text: str) -> None:
    assert isinstance(budgets.parse_amount(text, "usd"), str)


def test_the_interrupt_keyword_takes_a_colon_and_its_words_while_start_still_takes_none() -> None:
    from the_loop import control

    assert control.parse("the-loop interrupt: use the other API").command == "interrupt"
    assert control.argument("the-loop interrupt: use the other API\nand hurry", "interrupt", lines=True) == (
        "use the other API\nand hurry"
    )
    assert control.parse("the-loop start:now").command is None
    assert control.parse("the-loop interrupted the build").command is None
    assert control.argument("the-loop budget +5usd\nthanks", "budget") == "+5usd"


# ---------------------------------------------------------------------------------------------- interrupt


def test_an_interrupt_on_the_ticket_stops_a_long_turn_and_its_words_are_the_next_turn(world: World) -> None:
    harness = started(world)
    assert say(world, "/busy 30").status == "delivered"
    harness.wait_for_submitted(2)
    began = time.monotonic()

    outcome = comment(world, "the-loop interrupt: use the other API")

    assert outcome.reason == "control-executed", outcome
    assert time.monotonic() - began < 10
    [pressed] = harness.records("interrupt")
    assert pressed["busy"] is True  # the turn was running, and the Escape ended it
    turns = harness.wait_for_submitted(3)
    assert "use the other API" in turns[-1] and "octocat" in turns[-1]
    [logged] = world.events("session.interrupted")
    assert logged["stopped"] is True and logged["seconds"] < 5 and logged["actor"] == "octocat"
    assert world.events("control.command")[-1]["effect"] == "interrupted"


def test_an_interrupt_on_a_paused_session_does_nothing_and_says_so(world: World) -> None:
    harness = started(world)
    assert comment(world, "the-loop pause").reason == "control-executed"

    comment(world, "the-loop interrupt: stop that")

    assert harness.records("interrupt") == []
    assert world.events("control.rejected")[-1]["reason"] == "session-paused"
    assert "session is paused" in world.comments()[-1]


def test_an_interrupt_of_a_dead_session_respawns_nothing(world: World) -> None:
    started(world)
    world.runner.kill_server()

    done = operations.interrupt(world.config, parse_ref(REF), "carry on", source="cli", actor="ops")

    assert not done.ok and done.effect == "no-session"
    assert world.events("session.respawned") == []


def test_a_strangers_interrupt_is_refused(world: World) -> None:
    harness = started(world)
    assert say(world, "/busy 5").status == "delivered"

    outcome = comment(world, "the-loop interrupt: stop", actor="mallory")

    assert outcome.reason == "unauthorized-actor"
    assert harness.records("interrupt") == []


def test_an_interrupt_waiting_in_the_inbox_goes_ahead_of_the_items_other_events(world: World) -> None:
    started(world)
    inbox = Inbox.for_config(world.config)
    order = ["first comment", "second comment", "the-loop interrupt: do this instead"]
    for body in order:
        event = world.inbound_event(body)
        inbox.put(event.dedupe_key, event.inbox_entry())
    seen: list[str] = []
    handle = inbox_handler(world.router)

    def recording(entry: Any) -> Any:
        seen.append(entry.data["event"]["body"])
        return handle(entry)

    InboxWorker(inbox, recording, urgent=urgent_for(lambda: world.config)).run_once()

    assert seen == [order[2], order[0], order[1]]


# ------------------------------------------------------------------------------------------------ budgets


def test_a_token_budget_warns_once_pauses_after_the_turn_that_crosses_it_and_a_raise_resumes(world: World) -> None:
    world.configure(budgets={"tokens": 100})
    harness = started(world)  # the boot prompt's turn: 11 tokens
    tick(world)
    assert comment(world, "a turn [tokens 75]").status == "delivered"  # 87 of 100: past 80 %
    wait_for(lambda: (tick(world), world.events("budget.warning"))[1], timeout=10)
    assert world.own().status == "active"
    assert comment(world, "another [tokens 60]").status == "delivered"  # 148: past the limit
    wait_for(lambda: (tick(world), world.events("budget.exhausted"))[1], timeout=10)

    assert world.own().status == "paused"  # paused, not killed: the pane and its conversation are there
    row = listed(world)[REF]
    assert row["status"] == "paused (budget)" and row["spend"] == "148/100 tokens"
    checked = cli(world, "check", REF)
    assert "  spend: 148/100 tokens (paused: its tokens budget is spent)" in checked.stdout.splitlines()
    assert world.runner.probe(world.own().tmux_target) == "live"
    [warning] = world.events("budget.warning")
    assert warning["measure"] == "tokens" and warning["limit"] == 100
    assert "the-loop budget +" in world.comments()[-1]
    assert len(world.events("budget.warning")) == 1
    assert comment(world, "while paused").reason == "session-paused"

    assert comment(world, "the-loop budget +100tokens", actor="mallory").reason == "unauthorized-actor"
    assert world.own().status == "paused"
    assert comment(world, "the-loop budget +100tokens").reason == "control-executed"

    assert world.own().status == "active"
    [raised] = world.events("budget.raised")
    assert raised["resumed"] is True and raised["limit"] == 200 and raised["actor"] == "octocat"
    assert comment(world, "after the raise").status == "delivered"
    assert "after the raise" in harness.wait_for_submitted(4)[-1]
    portable = json.loads(world.config.state.portable_record(_slug(world)).read_text())
    assert portable["budget"]["raised"] == {"tokens": 100} and portable["budget"]["raises"][0]["by"] == "octocat"


def test_the_start_comment_sets_the_items_own_budget_in_place_of_the_configs(world: World) -> None:
    world.configure(budgets={"tokens": 1000000})
    assert comment(world, "the-loop start budget=50tokens").reason == "control-executed"
    world.harness().wait_ready(screen=lambda: world.runner.capture(world.own().tmux_target))

    assert budgets.limits(world.config, REF)["tokens"] == 50
    assert comment(world, "a turn [tokens 60]").status == "delivered"
    wait_for(lambda: (tick(world), world.events("budget.exhausted"))[1], timeout=10)
    assert world.events("budget.set")[0]["limit"] == 50


def test_a_bad_budget_on_the_start_comment_is_explained_and_the_start_goes_ahead(world: World) -> None:
    world.configure(budgets={"tokens": 1000})
    assert comment(world, "the-loop start budget=lots").reason == "control-executed"

    assert world.own().status == "active"
    assert budgets.limits(world.config, REF)["tokens"] == 1000
    assert any("did not set the budget" in c for c in world.comments())


def test_cost_comes_from_the_declared_price_table_and_shows_in_the_list(world: World) -> None:
    prices = {"fake": {"input": 1000, "output": 2000}}
    world.configure(budgets={"cost": 5, "currency": "eur", "prices": prices})
    started(world)
    assert comment(world, "x [tokens 500]").status == "delivered"
    wait_for(lambda: (tick(world), budgets.usage_of(world.record()).get("cost", 0) > 1)[1], timeout=10)

    usage = budgets.usage_of(world.record())
    expected = (usage["inputTokens"] * 1000 + usage["outputTokens"] * 2000) / 1e6
    assert usage["cost"] == pytest.approx(expected)
    assert "/5.00 eur" in budgets.describe(world.config, world.record())


def test_a_wall_time_budget_counts_from_the_first_session_and_pauses_it(world: World) -> None:
    world.configure(budgets={"wallMinutes": 0.02})  # 1.2 s
    started(world)

    wait_for(lambda: (tick(world), world.events("budget.exhausted"))[1], timeout=15)

    assert world.events("budget.exhausted")[0]["measure"] == "wall"
    assert world.own().status == "paused"
    assert "the-loop budget +60min" in world.comments()[-1]
    assert comment(world, "the-loop budget +30min").reason == "control-executed"
    assert world.own().status == "active"


def test_the_cron_form_enforces_budgets_once_per_run(world: World) -> None:
    from the_loop.routing.service import route_pending

    world.configure(budgets={"tokens": 50})
    started(world)
    assert comment(world, "a turn [tokens 60]").status == "delivered"

    wait_for(lambda: (route_pending(world.config), world.events("budget.exhausted"))[1], timeout=10)

    assert world.own().status == "paused"


def test_usage_is_read_from_where_the_last_read_ended(world: World) -> None:
    started(world)
    tick(world)
    first = budgets.usage_of(world.record())["tokens"]
    assert comment(world, "x [tokens 7]").status == "delivered"
    wait_for(lambda: (tick(world), budgets.usage_of(world.record())["tokens"] > first)[1], timeout=10)
    tick(world)  # nothing new: nothing counted twice

    assert budgets.usage_of(world.record())["tokens"] == first + 1 + 7  # the fake's one token in, seven out


# ---------------------------------------------------------------------------------------------- admission


def test_past_max_live_sessions_a_third_item_queues_and_spawns_when_the_first_is_stopped(world: World) -> None:
    world.configure(capacity={"maxLiveSessions": 2, "recheckSeconds": 0.2})
    inbox = Inbox.for_config(world.config)
    worker = InboxWorker(inbox, inbox_handler(world.router), urgent=urgent_for(lambda: world.config))

    def put(body: str, ref: str) -> None:
        event = world.inbound_event(body, ref=ref)
        assert inbox.put(event.dedupe_key, event.inbox_entry())

    for ref in (REF, OTHER, THIRD):
        put("the-loop start", ref)
    for n in range(3):
        put(f"third item comment {n}", THIRD)
    worker.run_once()

    assert world.endpoint(THIRD) is None
    assert admission.queued(world.config) == {THIRD: 1}
    assert listed(world)[THIRD]["status"] == "queued (position 1)"
    assert "  queued: position 1 in line for a slot (routing.capacity)" in cli(world, "check", THIRD).stdout
    [queued] = world.events("admission.queued")
    assert queued["work_item"] == THIRD and queued["reason"] == "max-live-sessions" and queued["live"] == 2
    assert "queued this work item (position 1)" in world.comments(THIRD)[-1]
    time.sleep(0.3)
    worker.run_once()  # still full: it waits, and is told nothing again
    assert world.endpoint(THIRD) is None and len(world.comments(THIRD)) == 1
    assert inbox.pending(time.time() + 60)[0].attempts == 0  # waiting is no failed attempt

    assert operations.stop(world.config, parse_ref(REF), source="cli", actor="ops", comment=False).ok
    wait_for(lambda: (worker.run_once(), world.endpoint(THIRD))[1], timeout=20)

    harness = world.harness(THIRD)
    harness.wait_for_submitted(4, timeout=20)
    assert [t.rsplit("comment ", 1)[-1][:1] for t in harness.submitted()[1:]] == ["0", "1", "2"]
    assert admission.queued(world.config) == {}
    assert world.events("admission.admitted")[0]["work_item"] == THIRD


def test_a_memory_floor_queues_a_spawn_until_memory_frees(world: World, mocker: Any) -> None:
    world.configure(capacity={"minFreeMemoryMiB": 1024})
    free = mocker.patch.object(admission, "free_memory_mib", return_value=512)  # an injected fault: a full box

    outcome = world.dispatcher.dispatch(world.work_event("start", spawn=True))

    assert outcome.status == "queued" and outcome.reason == "memory-floor"
    free.return_value = 4096
    assert world.dispatcher.dispatch(world.work_event("start", spawn=True)).status == "spawned"


def test_a_respawn_goes_ahead_of_first_spawns_in_line(world: World, mocker: Any) -> None:
    world.configure(capacity={"minFreeMemoryMiB": 1024})
    world.spawn(ref=OTHER)
    mocker.patch.object(admission, "free_memory_mib", return_value=512)
    assert world.dispatcher.dispatch(world.work_event("start", ref=THIRD, spawn=True)).status == "queued"
    world.runner.kill_server()

    assert world.dispatcher.dispatch(world.work_event("after the crash", ref=OTHER)).status == "queued"

    assert admission.queued(world.config) == {OTHER: 1, THIRD: 2}


# ---------------------------------------------------------------------------------------------------- stuck


def test_a_decision_prompt_is_posted_once_and_only_an_authorized_answer_presses_it(world: World) -> None:
    harness = started(world)
    assert say(world, "/ask make build").status == "delivered"
    wait_for(lambda: (tick(world), world.events("session.blocked"))[1], timeout=10)
    tick(world)

    [blocked] = world.events("session.blocked")
    assert blocked["options"] == ["1", "2"] and "make build" in blocked["text"]
    assert listed(world)[REF]["status"] == "blocked"
    posted = world.comments()[-1]
    assert "make build" in posted and "1. Yes" in posted and "the-loop answer" in posted
    assert len([c for c in world.comments() if "waiting for a decision" in c]) == 1

    assert comment(world, "the-loop answer 1", actor="mallory").reason == "unauthorized-actor"
    assert harness.records("answered") == []
    assert comment(world, "the-loop answer yes").reason == "control-executed"

    [answered] = harness.wait_for("answered")
    assert answered["choice"] == "1"
    assert world.events("session.prompt_answered")[0]["actor"] == "octocat"
    assert "blocked" not in world.record().extra


def test_nothing_is_typed_into_a_decision_prompt_the_event_waits_until_it_is_answered(world: World) -> None:
    harness = started(world)
    assert say(world, "/ask rm -rf build").status == "delivered"
    wait_for(lambda: "Allow fake-tool" in world.runner.capture(world.own().tmux_target), timeout=10)
    pasted = len(harness.records("paste"))
    event = world.inbound_event("meanwhile, a comment")

    waiting = world.router.handle(event)  # a paste's Enter would pick the highlighted option

    assert waiting.status == "queued" and waiting.reason == "session-blocked"
    assert len(harness.records("paste")) == pasted
    assert world.events("session.blocked")  # seen at the delivery, before any watch tick
    assert comment(world, "the-loop answer 2").reason == "control-executed"
    wait_for(lambda: "Allow fake-tool" not in world.runner.capture(world.own().tmux_target), timeout=10)
    assert world.router.handle(event).status == "delivered"  # the inbox's retry
    assert "meanwhile, a comment" in harness.wait_for_submitted(3)[-1]


def test_nothing_is_typed_into_a_prompt_by_a_respawn_that_finds_the_pane_live(world: World) -> None:
    harness = started(world)
    target = world.own().tmux_target
    assert say(world, "/ask deploy").status == "delivered"
    wait_for(lambda: "Allow fake-tool" in world.runner.capture(target), timeout=10)

    def forget_target(record: Any) -> None:  # a record that lost its pane's name: the next event respawns
        record.own.tmux_target = ""

    world.config.registry.update(REF, forget_target)
    pasted = len(harness.records("paste"))

    outcome = say(world, "after the record lost its target")

    assert outcome.status == "queued" and outcome.reason == "session-blocked"
    assert len(harness.records("paste")) == pasted and world.events("session.respawn_averted") == []


def test_a_prompt_someone_answers_in_the_pane_itself_is_cleared(world: World) -> None:
    harness = started(world)
    assert say(world, "/ask deploy").status == "delivered"
    wait_for(lambda: (tick(world), world.events("session.blocked"))[1], timeout=10)

    world.runner.send_keys(world.own().tmux_target, ["2"])  # a person attached to the session answers there

    assert harness.wait_for("answered")[0]["choice"] == "2"
    wait_for(lambda: (tick(world), world.events("session.unblocked"))[1], timeout=10)
    assert "blocked" not in world.record().extra


def test_an_answer_with_no_prompt_on_screen_says_what_to_do(world: World) -> None:
    started(world)

    comment(world, "the-loop answer 1")

    assert world.events("control.rejected")[-1]["reason"] == "nothing-to-answer"
    assert "reply in words" in world.comments()[-1]


def test_an_idle_session_gets_one_nudge_and_the_waiting_for_input_point(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "hooks_fixtures"))
    log = tmp_path / "hooks.jsonl"
    hook = {"name": "watcher", "module": "hook_recorder", "with": {"log": str(log), "answers": {}}}
    world.configure(stuck={"idleMinutes": 0.02, "checkSeconds": 0.2}, hooks=[hook])  # 1.2 s
    started(world)
    watch = Watch()
    wait_for(lambda: (watch.tick(world.config, world.runner), world.events("session.idle"))[1], timeout=15)
    watch.tick(world.config, world.runner)

    assert len(world.events("session.idle")) == 1
    assert listed(world)[REF]["status"] == "idle"
    assert "no activity" in world.comments()[-1] and "the-loop interrupt" in world.comments()[-1]
    told = [json.loads(line) for line in log.read_text().splitlines()]
    [point] = [call for call in told if call["point"] == "waiting_for_input"]
    assert point["ctx"]["kind"] == "idle"
    assert comment(world, "wake up").status == "delivered"
    wait_for(lambda: (watch.tick(world.config, world.runner), world.events("session.active"))[1], timeout=10)


def _slug(world: World) -> str:
    from the_loop.state.slugs import slug_of

    return slug_of(world.config.state, REF)
