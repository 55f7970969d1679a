"""The durable inbox and its worker: durability and order across processes, dedupe, backoff, abandonment,
quarantine, the single-worker lock, SIGKILL at named points, and WorkEvents through the real dispatcher on tmux.

Scenario ids are from ingress-routing.md §2.8 (M2 one FIFO per work item, M5 failed deliveries released, M7 a
crash releases, exhausted retries are abandoned) and decision 6 (one dedupe key per provider object).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from the_loop import events
from the_loop.config import load_config
from the_loop.inbox import Inbox, InboxEntry, key_digest
from the_loop.inbox.worker import InboxWorker, WorkerBusy
from the_loop.models import WorkEvent
from the_loop.sessions.dispatcher import Dispatcher, Outcome
from the_loop.state import StateLayout
from the_loop.state.registry import SessionRegistry
from the_loop.testing import fake_plugin, wait_for
from the_loop.testing.harness import FakeHarness

DRIVER = Path(__file__).with_name("inbox_driver.py")


class Clock:
    """An injected clock: tests move ``now`` by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def layout(tmp_path: Path) -> Any:
    layout = StateLayout(tmp_path / "state")
    events.configure(layout.events_path, "test")
    yield layout
    events.configure(None, "cli")


def logged(layout: StateLayout, name: str) -> list[dict[str, Any]]:
    path = layout.events_path
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [record for record in records if record["event"] == name]


def driver(*args: str, kill_at: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **env, "THE_LOOP_TEST_KILL_AT": kill_at}
    return subprocess.run(
        [sys.executable, str(DRIVER), *args], env=environment, capture_output=True, text=True, timeout=60
    )


def outcome(status: str, *, will_retry: bool = False, error: str = "") -> Outcome:
    return Outcome(status, error=error, will_retry=will_retry)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- put, order


def test_an_accepted_entry_is_a_whole_file_named_in_arrival_order(layout: StateLayout) -> None:
    inbox = Inbox(layout)
    assert inbox.put("github:comment:IC_1", {"body": "first", "work_item": "fake:octo/repo#15"})
    assert inbox.put("slack:C0AB:1726.000100", {"body": "second"})
    names = sorted(p.name for p in layout.inbox_dir.glob("*.json"))
    assert len(names) == 2
    assert all(re.fullmatch(rf"\d{{20}}-{os.getpid():07d}-[0-9a-f]{{32}}\.json", name) for name in names)
    assert names[0].endswith(f"{key_digest('github:comment:IC_1')}.json")
    record = json.loads((layout.inbox_dir / names[0]).read_text())
    assert record["key"] == "github:comment:IC_1" and record["attempts"] == 0
    assert record["entry"] == {"body": "first", "work_item": "fake:octo/repo#15"}
    assert [e.key for e in inbox.pending()] == ["github:comment:IC_1", "slack:C0AB:1726.000100"]
    assert [p.name for p in layout.inbox_dir.iterdir() if p.name.endswith(".tmp")] == []


def test_bad_input_is_refused_before_anything_is_written(layout: StateLayout) -> None:
    inbox = Inbox(layout)
    with pytest.raises(ValueError):
        inbox.put("", {})
    with pytest.raises(TypeError):
        inbox.put("k", ["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        inbox.put("k", {"not json": object()})
    assert not layout.inbox_dir.exists() or list(layout.inbox_dir.iterdir()) == []


def test_two_writer_processes_lose_nothing_and_keep_each_writers_order(layout: StateLayout) -> None:
    layout.root.mkdir(parents=True)
    writers = [
        subprocess.Popen(
            [sys.executable, str(DRIVER), "put", str(layout.root), prefix, "150"],
            env={**os.environ, "THE_LOOP_TEST_WAIT_GO": "1"},
            stdout=subprocess.PIPE,
            text=True,
        )
        for prefix in ("A", "B")
    ]
    (layout.root / "go").touch()
    outputs = [writer.communicate(timeout=60)[0] for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0]
    assert all(out.count(" True\n") == 150 for out in outputs)
    keys = [entry.key for entry in Inbox(layout).pending()]
    assert sorted(keys) == sorted(f"{p}-{n}" for p in "AB" for n in range(150))
    for prefix in "AB":
        assert [k for k in keys if k.startswith(prefix)] == [f"{prefix}-{n}" for n in range(150)]
    assert {e.data["pad"] for e in Inbox(layout).pending()} == {"x" * 2000}
    # A put that starts after another process's put returned sorts after it.
    assert driver("put", str(layout.root), "C", "3").returncode == 0
    assert driver("put", str(layout.root), "D", "3").returncode == 0
    assert [e.key for e in Inbox(layout).pending()][-6:] == ["C-0", "C-1", "C-2", "D-0", "D-1", "D-2"]


def test_concurrent_puts_share_directory_fsyncs_and_each_is_on_disk_when_put_returns(layout: StateLayout) -> None:
    inbox = Inbox(layout)
    seen_on_return: list[bool] = []
    lock = threading.Lock()

    def writer(thread: int) -> None:
        for n in range(25):
            key = f"t{thread}-{n}"
            assert inbox.put(key, {"n": n, "body": "y" * 12_000})
            on_disk = any(layout.inbox_dir.glob(f"*-{key_digest(key)}.json"))
            with lock:
                seen_on_return.append(on_disk)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen_on_return) == 400 and all(seen_on_return)
    assert len(inbox.pending()) == 400
    assert inbox.commits < 400  # followers rode on a leader's directory fsync


# ------------------------------------------------------------------------------------------------- dedupe


def test_decision_6_a_key_is_queued_once_while_pending_and_after_completion(layout: StateLayout) -> None:
    inbox = Inbox(layout)
    assert inbox.put("github:comment:IC_7", {"from": "webhook"}) is True
    assert inbox.put("github:comment:IC_7", {"from": "poll"}) is False  # pending
    [entry] = inbox.pending()
    assert entry.data == {"from": "webhook"}
    inbox.settle(entry)
    assert inbox.pending() == []
    assert inbox.put("github:comment:IC_7", {"from": "poll"}) is False  # completed
    assert Inbox(layout).put("github:comment:IC_7", {"from": "a restarted poller"}) is False
    assert list(layout.inbox_dir.glob("*.json")) == []
    assert [p.name for p in layout.inbox_dir.iterdir() if p.name.startswith(".")] == []


def test_the_same_key_from_many_threads_and_two_processes_is_accepted_once(layout: StateLayout) -> None:
    inbox = Inbox(layout)
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(inbox.put("same", {}))) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 15 + [True]
    layout.root.mkdir(parents=True, exist_ok=True)
    writers = [
        subprocess.Popen(
            [sys.executable, str(DRIVER), "put", str(layout.root), "shared", "60"],
            env={**os.environ, "THE_LOOP_TEST_WAIT_GO": "1"},
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    (layout.root / "go").touch()
    outputs = "".join(writer.communicate(timeout=60)[0] for writer in writers)
    accepted = Counter(line.split()[1] for line in outputs.splitlines() if line.endswith(" True"))
    assert set(accepted.values()) == {1} and len(accepted) == 60
    assert len(inbox.pending()) == 61


def test_the_completed_record_is_bounded_to_the_newest_keys(layout: StateLayout) -> None:
    inbox = Inbox(layout, completed_limit=4)
    for n in range(20):
        assert inbox.put(f"k{n}", {"n": n})
        inbox.settle(inbox.pending()[0])
    lines = (layout.inbox_dir / "completed.jsonl").read_text().splitlines()
    assert 4 <= len(lines) < 8
    assert json.loads(lines[-1])["key"] == "k19"
    fresh = Inbox(layout, completed_limit=4)  # what a restarted process reads back
    assert [fresh.put(f"k{n}", {}) for n in range(16, 20)] == [False] * 4
    assert fresh.put("k15", {}) is True  # forgotten: older than the newest four


def test_for_config_takes_the_dedupe_cache_size(tmp_path: Path, plugin_host: Any) -> None:
    path = tmp_path / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump({"routing": {"dedupCacheSize": 7}}))
    config = load_config(path, plugin_host)
    inbox = Inbox.for_config(config)
    assert inbox.completed_limit == 7 and inbox.dir == config.state.root / "local" / "inbox"


# ------------------------------------------------------------------------------------- backoff, abandon


def test_m5_a_released_entry_backs_off_exponentially_up_to_the_cap(layout: StateLayout) -> None:
    clock = Clock()
    inbox = Inbox(layout, clock=clock, max_attempts=7, backoff_base=2.0, backoff_cap=10.0)
    calls: list[float] = []

    def failing(entry: InboxEntry) -> Outcome:
        calls.append(clock.now)
        return outcome("failed", will_retry=True, error="tmux busy")

    worker = InboxWorker(inbox, failing, clock=clock)
    inbox.put("d1", {"work_item": "fake:octo/repo#15"})
    start = clock.now
    assert worker.run_once() == 1
    waits = []
    for _ in range(5):
        [entry] = [e for e in inbox.pending(float("inf"))]
        wait = entry.next_attempt_at - clock.now
        clock.now += wait - 0.5
        assert worker.run_once() == 0 and inbox.pending() == []  # not due yet
        clock.now += 0.5
        assert worker.run_once() == 1
        waits.append(wait)
    assert waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert calls[0] == start and len(calls) == 6
    record = json.loads(next(layout.inbox_dir.glob("*.json")).read_text())
    assert record["attempts"] == 6 and record["lastError"] == "tmux busy"
    assert record["nextAttemptAt"] == events.timestamp(clock.now + 10.0)


def test_m7_an_exception_is_dispatch_error_and_a_retry_and_default_backoff_starts_at_2s(layout: StateLayout) -> None:
    clock = Clock()
    inbox = Inbox(layout, clock=clock)
    worker = InboxWorker(inbox, lambda entry: 1 / 0, clock=clock)
    inbox.put("d1", {"work_item": "fake:octo/repo#15", "delivery_id": "gh-delivery-1"})
    assert worker.run_once() == 1
    [error] = logged(layout, "dispatch.error")
    assert error["delivery_id"] == "gh-delivery-1" and error["work_item"] == "fake:octo/repo#15"
    assert error["will_retry"] is True and error["error"].startswith("ZeroDivisionError")
    [entry] = inbox.pending(float("inf"))
    assert entry.attempts == 1 and entry.next_attempt_at == clock.now + 2.0


def test_m7_after_max_attempts_the_entry_is_abandoned_and_never_retried(layout: StateLayout) -> None:
    clock = Clock()
    inbox = Inbox(layout, clock=clock, max_attempts=3)
    handled: list[str] = []

    def handle(entry: InboxEntry) -> Outcome:
        handled.append(entry.key)
        if entry.key == "poison":
            return outcome("failed", will_retry=True, error="spawn failed: no harness")
        return outcome("delivered")

    worker = InboxWorker(inbox, handle, clock=clock)
    inbox.put("poison", {"work_item": "fake:octo/repo#15", "delivery_id": "d-poison"})
    inbox.put("next", {"work_item": "fake:octo/repo#15"})
    for _ in range(3):
        worker.run_once()
        clock.now += 1000
    assert handled == ["poison", "poison", "poison", "next"]  # "next" waited behind it, then went on
    [moved] = (layout.inbox_dir / "abandoned").iterdir()
    assert moved.name.endswith(f"{key_digest('poison')}.json")
    assert json.loads(moved.read_text())["attempts"] == 3
    [abandoned] = logged(layout, "dispatch.abandoned")
    assert abandoned["delivery_id"] == "d-poison" and abandoned["attempts"] == 3
    assert abandoned["error"] == "spawn failed: no harness" and abandoned["work_item"] == "fake:octo/repo#15"
    clock.now += 10_000
    assert worker.run_once() == 0 and handled.count("poison") == 3
    assert len(logged(layout, "dispatch.abandoned")) == 1


def test_m2_a_backing_off_entry_holds_back_its_work_items_later_entries_only(layout: StateLayout) -> None:
    clock = Clock()
    inbox = Inbox(layout, clock=clock)
    handled: list[str] = []
    flaky = {"a1": 1}

    def handle(entry: InboxEntry) -> Outcome:
        handled.append(entry.key)
        if flaky.get(entry.key, 0) > 0:
            flaky[entry.key] -= 1
            return outcome("failed", will_retry=True, error="paste failed")
        return outcome("delivered")

    worker = InboxWorker(inbox, handle, clock=clock)
    for key, items in [("a1", "#1"), ("b1", "#2"), ("ac", "#1 #3"), ("c1", "#3"), ("a2", "#1"), ("b2", "#2")]:
        inbox.put(key, {"work_items": [f"fake:octo/repo{item}" for item in items.split()]})
    inbox.put("raw", {"body": "not routed yet: no work item, nothing to keep in order with"})
    assert worker.run_once() == 4
    assert handled == ["a1", "b1", "b2", "raw"]
    assert worker.run_once() == 0
    assert [entry.key for entry in inbox.pending(clock.now)] == []  # held back behind a1, even c1 (via ac)
    clock.now += 2
    assert worker.run_once() == 4
    assert handled[4:] == ["a1", "ac", "c1", "a2"]


def test_outcomes_settle_or_release(layout: StateLayout) -> None:
    clock = Clock()
    inbox = Inbox(layout, clock=clock)
    answers = {
        "delivered": outcome("delivered"),
        "spawned": outcome("spawned"),
        "respawned": outcome("respawned"),
        "dropped": outcome("dropped"),
        "final": outcome("failed", will_retry=False, error="no such harness"),
        "retry": outcome("failed", will_retry=True, error="busy"),
        "nonsense": None,
    }
    for key in answers:
        inbox.put(key, {})
    assert InboxWorker(inbox, lambda entry: answers[entry.key], clock=clock).run_once() == 7
    assert sorted(entry.key for entry in inbox.pending(float("inf"))) == ["nonsense", "retry"]
    assert logged(layout, "dispatch.error") == [] and logged(layout, "dispatch.abandoned") == []
    assert all(inbox.put(key, {}) is False for key in answers)


# --------------------------------------------------------------------------------------------- corruption


def test_a_corrupt_entry_is_moved_aside_reported_and_the_rest_is_handled(layout: StateLayout) -> None:
    inbox = Inbox(layout)
    inbox.put("good-1", {})
    bad = layout.inbox_dir / f"{'0' * 20}-{os.getpid():07d}-{key_digest('bad')}.json"
    bad.write_text('{"key": "bad", "entry": {"trunc')
    wrong = layout.inbox_dir / f"{'0' * 19}1-{os.getpid():07d}-{key_digest('other')}.json"
    wrong.write_text(json.dumps({"key": "not-other", "entry": {}, "attempts": 0}))
    inbox.put("good-2", {})
    handled: list[str] = []
    worker = InboxWorker(inbox, lambda entry: handled.append(entry.key) or outcome("delivered"))
    assert worker.run_once() == 2 and handled == ["good-1", "good-2"]
    aside = sorted(p.name for p in layout.inbox_dir.glob("*.corrupt-*"))
    assert [name.split(".corrupt-")[0] for name in aside] == [bad.name, wrong.name]
    assert (layout.inbox_dir / aside[0]).read_text() == '{"key": "bad", "entry": {"trunc'
    reports = logged(layout, "inbox.quarantined")
    assert [r["path"] for r in reports] == [str(bad), str(wrong)]
    assert reports[1]["error"] == "has no key matching its name"
    assert worker.run_once() == 0 and len(logged(layout, "inbox.quarantined")) == 2


# ------------------------------------------------------------------------------------------------ lock


def test_one_worker_per_state_root_a_second_waits_on_standby(layout: StateLayout, hold_lock: Any) -> None:
    inbox = Inbox(layout)
    inbox.put("k1", {})
    handled: list[str] = []
    worker = InboxWorker(inbox, lambda entry: handled.append(entry.key) or outcome("delivered"))
    layout.locks_dir.mkdir(parents=True, exist_ok=True)
    holder = hold_lock(layout.lock_for("inbox-worker"), "empty")
    with pytest.raises(WorkerBusy):
        worker.run_once()
    assert worker.run(should_stop=lambda: True) is False
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop.is_set, 0.02))
    thread.start()
    try:
        threading.Event().wait(0.3)
        assert handled == []  # on standby while the other worker lives
        holder.process.kill()
        holder.process.wait(timeout=10)
        wait_for(lambda: handled == ["k1"])
        inbox.put("k2", {})
        wait_for(lambda: handled == ["k1", "k2"])
        with pytest.raises(WorkerBusy):  # now this worker holds it
            InboxWorker(Inbox(layout), lambda entry: outcome("delivered")).run_once()
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


# ------------------------------------------------------------------------------------------ crash safety


def handled_log(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def assert_exactly_or_at_most_twice(lines: list[str], keys: list[str], twice: str | None) -> None:
    counts = Counter(line.split()[1] for line in lines if line.startswith("handled "))
    assert set(counts) == set(keys)  # nothing lost
    assert {key: n for key, n in counts.items() if n != 1} == ({twice: 2} if twice else {})
    for key in keys:  # never handled after it was settled
        position = [i for i, line in enumerate(lines) if line == f"settled {key}"]
        assert len(position) <= 1
        assert all(line != f"handled {key}" for line in lines[position[0] + 1 :]) if position else True


@pytest.mark.parametrize(
    ("kill_at", "handled_twice"),
    [
        ("after-fsync", None),  # (1) the writer died after put returned: handled exactly once
        ("in-handle", "k-3"),  # (2) died inside the handler: handled again (at most twice)
        ("before-settle", "k-3"),  # (3) died after the handler returned, before settle: handled again
        ("mid-settle", None),  # key recorded as completed, file not yet deleted: never handed out again
    ],
)
def test_sigkill_at_a_named_point_loses_nothing(layout: StateLayout, kill_at: str, handled_twice: str | None) -> None:
    keys = [f"k-{n}" for n in range(6)]
    log = layout.root / "handled.log"
    layout.root.mkdir(parents=True)
    writer = driver("put", str(layout.root), "k", "6", kill_at="after-fsync:k-3" if kill_at == "after-fsync" else "")
    if kill_at == "after-fsync":
        assert writer.returncode == -9
        assert writer.stdout.splitlines() == [f"put k-{n} True" for n in range(4)]
        keys = keys[:4]
    else:
        assert writer.returncode == 0, writer.stderr
        killed = driver("work", str(layout.root), str(log), kill_at=f"{kill_at}:k-3")
        assert killed.returncode == -9, killed.stderr
        assert handled_log(log)[-1] == "handled k-3"
    restarted = driver("work", str(layout.root), str(log))
    assert restarted.returncode == 0, restarted.stderr
    lines = handled_log(log)
    assert_exactly_or_at_most_twice(lines, keys, handled_twice)
    assert [line.split()[1] for line in lines if line.startswith("handled")] == sorted(
        keys + ([handled_twice] if handled_twice else []), key=lambda k: int(k.split("-")[1])
    )
    assert list(layout.inbox_dir.glob("*.json")) == []
    assert all(Inbox(layout).put(key, {}) is False for key in keys)


# -------------------------------------------------------------------------------- end to end, real tmux

REF = "fake:octo/repo#15"


class Crash(BaseException):
    """Stands in for the process dying: nothing after the raise runs, what is on disk stays."""


class CrashingInbox(Inbox):
    crash_before_settle: str = ""

    def settle(self, *entries: InboxEntry) -> None:
        if any(entry.key == self.crash_before_settle for entry in entries):
            raise Crash(self.crash_before_settle)
        super().settle(*entries)


@dataclass
class E2E:
    config: Any
    runner: Any
    logs: Path

    def worker(self, *, crash_before_settle: str = "") -> InboxWorker:
        """A fresh worker over a fresh dispatcher (its in-memory dedupe empty): a restarted daemon."""
        inbox = CrashingInbox.for_config(self.config)
        inbox.crash_before_settle = crash_before_settle
        dispatcher = Dispatcher(self.config, runner=self.runner)

        def handle(entry: InboxEntry) -> Outcome:
            result = dispatcher.dispatch(WorkEvent.model_validate(entry.data))
            if result.status == "spawned":  # let the TUI come up before the next paste, as a human would
                session = SessionRegistry(self.config.state).load(REF).own  # type: ignore[union-attr]
                self.harness().wait_ready(screen=lambda: self.runner.capture(session.tmux_target))
            return result

        return InboxWorker(inbox, handle)

    def harness(self) -> FakeHarness:
        record = SessionRegistry(self.config.state).load(REF)
        assert record is not None and record.own is not None
        return FakeHarness(self.logs / f"{record.own.harness_session_id}.jsonl")


@pytest.fixture
def e2e(tmp_path: Path, plugin_host: Any, tmux_runner: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    plugin_host.register(fake_plugin, "fake")
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("FAKE_HARNESS_LOG", str(logs / "{session}.jsonl"))
    monkeypatch.setenv("FAKE_TICKETS", str(tmp_path / "tickets.json"))
    path = tmp_path / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    routing = {
        "defaultHarness": "fake",
        "spawnOnUnmatched": "always",
        "spawnWorkdir": str(tmp_path / "work"),
        "tmux": {"socketName": tmux_runner.socket},
    }
    path.write_text(yaml.safe_dump({"routing": routing}))
    config = load_config(path, plugin_host)
    events.configure(config.state.events_path, "test")
    yield E2E(config, tmux_runner, logs)
    events.configure(None, "cli")


def test_m2_twenty_work_events_reach_the_pane_in_order_exactly_once_across_restarts(e2e: E2E) -> None:
    inbox = Inbox.for_config(e2e.config)
    texts = [f"event {n}" for n in range(20)]
    for n, text in enumerate(texts):
        work_event = WorkEvent(delivery_id=f"gh-{n}", work_item=REF, text=text, spawn=n == 0, source="webhook")
        assert inbox.put(f"github:comment:{n}", work_event.model_dump(mode="json"))
    assert inbox.put("github:comment:7", {"a": "duplicate from the poller"}) is False

    first = e2e.worker()
    count = 0

    def stop_after_six() -> bool:
        nonlocal count
        count += 1
        return count > 6

    assert first.run(stop_after_six, interval=0.01) is True  # a graceful stop midway
    assert 0 < len(inbox.pending()) < 20
    with pytest.raises(Crash):  # a crash after the paste, before the settle
        e2e.worker(crash_before_settle="github:comment:12").run_once()
    assert e2e.worker().run_once() > 0  # the restart finishes the rest
    assert inbox.pending() == []
    harness = e2e.harness()
    submitted = harness.wait_for_submitted(20)
    assert "event 0" in submitted[0] and submitted[1:] == texts[1:]
    threading.Event().wait(0.3)
    assert len(harness.submitted()) == 20
    assert len(harness.records("start")) == 1
    drops = [e for e in events.read_events(e2e.config.state.events_path, events.EventFilter(("dispatch.dropped",)))]
    # The crash came before the lane's one settle: every event that pass handled is handled once more, and each is
    # dropped by its delivery id, never pasted twice.
    dropped = [(r["delivery_id"], r["reason"]) for _, r in drops]
    assert ("gh-12", "already-processed") in dropped
    assert {reason for _, reason in dropped} == {"already-processed"}
    assert len({delivery for delivery, _ in dropped}) == len(dropped)


def test_work_items_are_lanes_handled_side_by_side_each_in_order(layout: StateLayout) -> None:
    """A slow work item does not hold up the others; one work item's entries keep their order; an entry naming two
    work items joins their lanes."""
    import time

    inbox = Inbox(layout)
    for n in range(3):
        inbox.put(f"slow-{n}", {"work_item": "slow", "n": n})
        inbox.put(f"fast-{n}", {"work_item": "fast", "n": n})
    inbox.put("link", {"work_items": ["fast", "other"], "n": 9})
    inbox.put("other-0", {"work_item": "other", "n": 0})
    seen: list[tuple[str, int, float]] = []
    lock = threading.Lock()

    def handle(entry: InboxEntry) -> Outcome:
        item = entry.work_items[0]
        if item == "slow":
            time.sleep(0.2)
        with lock:
            seen.append((item, entry.data["n"], time.monotonic()))
        return outcome("delivered")

    started = time.monotonic()
    assert InboxWorker(inbox, handle, workers=4).run_once() == 8
    by_item: dict[str, list[int]] = {}
    for item, n, _ in seen:
        by_item.setdefault(item, []).append(n)
    assert by_item["slow"] == [0, 1, 2]
    assert by_item["fast"] == [0, 1, 2, 9] and by_item["other"] == [0]
    fast_done = max(t for item, _, t in seen if item != "slow")
    assert fast_done - started < 0.2  # the fast lane finished before the slow lane's first entry
    assert inbox.pending() == []


def test_delivery_status_tells_inflight_done_failed_and_unknown(layout: StateLayout) -> None:
    """What a poller reads instead of the sessions: the inbox's own answer for a key, round by round."""
    inbox = Inbox(layout, max_attempts=1)
    assert inbox.delivery_status("never-put") == "unknown"
    assert inbox.put("k-done", {"work_item": "fake:octo/repo#1"})
    assert inbox.delivery_status("k-done") == "inflight"
    inbox.settle(*inbox.pending())
    assert inbox.delivery_status("k-done") == "done"
    assert inbox.put("k-fail", {"work_item": "fake:octo/repo#2"})
    [entry] = inbox.pending()
    assert inbox.release(entry, "boom") is None  # its only attempt: abandoned
    assert inbox.delivery_status("k-fail") == "failed"
    assert inbox.delivery_status("k-fail", rounds=2) == "unknown"  # a second round was never abandoned


def test_a_forgotten_key_may_be_taken_again_also_by_a_later_process_and_after_compaction(layout: StateLayout) -> None:
    """A reopen forgets the item's close key: its next close is new input, not a duplicate of the first."""
    inbox = Inbox(layout, completed_limit=4)
    close = "github:close:github:octo/repo#15:closed"
    assert inbox.put(close, {"work_item": "github:octo/repo#15"})
    inbox.settle(*inbox.pending())
    assert not inbox.put(close, {"work_item": "github:octo/repo#15"})  # settled: refused
    inbox.forget(close, "never-settled")  # an unknown key's tombstone forgets nothing
    lines = (layout.inbox_dir / "completed.jsonl").read_text().splitlines()
    assert [json.loads(line).get("forgotten") for line in lines] == [None, True, True]
    assert Inbox(layout).delivery_status(close) == "unknown"  # a fresh reader replays the tombstone
    assert inbox.put(close, {"work_item": "github:octo/repo#15"})
    inbox.settle(*inbox.pending())
    assert not Inbox(layout).put(close, {})
    for n in range(8):  # enough to compact: the tombstone goes, the second settle stays
        assert inbox.put(f"k{n}", {"work_item": f"fake:octo/repo#{n}"})
        inbox.settle(*inbox.pending())
    assert all("forgotten" not in line for line in (layout.inbox_dir / "completed.jsonl").read_text().splitlines())


def test_a_key_forgotten_while_its_lane_runs_is_not_remembered_by_the_lanes_settle(layout: StateLayout) -> None:
    """A close and the reopen after it, handled in one pass of one lane: the reopen forgets the close key (from
    another Inbox instance, as the close path does) before the lane settles both — the close must stay forgotten."""
    close = "github:close:github:octo/repo#15:closed"
    inbox = Inbox(layout)
    assert inbox.put(close, {"work_item": "github:octo/repo#15", "kind": "closed"})
    assert inbox.put("reopen-delivery", {"work_item": "github:octo/repo#15", "kind": "reopened"})

    def handle(entry: InboxEntry) -> Outcome:
        if entry.data["kind"] == "reopened":
            Inbox(layout).forget(close)
        return outcome("delivered")

    assert InboxWorker(inbox, handle).run_once() == 2
    assert inbox.put(close, {"work_item": "github:octo/repo#15", "kind": "closed"})  # the second close is new input
    assert not inbox.put("reopen-delivery", {})  # the reopen itself stays remembered
