"""The undelivered queue under an outage (D §2.4, issue-409), the publishers wired through core (comment.human from
the router, work-item.closed from the close path), and tokens kept out of everything written (D25)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from slack_world import APP_TOKEN, BOT_TOKEN, CHANNEL, DANA, REF, Loop, config_in_process, dana_comment

from the_loop import channels
from the_loop.channels import outbox as channel_outbox

ITEMS = ["fake:octo/repo#1", "fake:octo/repo#2", "fake:octo/repo#3"]


def status_text(loop: Loop) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin"}
    command = [sys.executable, "-m", "the_loop", "--config", str(loop.config.ref.path), "status"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_slack_down_30_events_queue_then_all_land_once_in_order_per_work_item(loop: Loop) -> None:
    loop.slack.fail("chat.postMessage", 500)
    for n in range(30):
        item = ITEMS[n % 3]
        assert channels.publish(loop.config, "comment.agent", item, text=f"event {n:02d} of {item}") == []
    backlog = channel_outbox.backlog(loop.config.state)
    assert backlog is not None and backlog["count"] == 30
    shown = status_text(loop)
    assert "channels    30 undelivered, oldest" in shown.stdout
    assert shown.returncode == 0  # no service is enabled: the backlog alone never changes the exit code

    t0 = time.time()
    loop.slack.fail("chat.postMessage", 429, retry_after=120)
    first = channels.drain(loop.config, now=t0 + 60)
    assert first.delivered == 0 and first.failed == 3  # one head per work item tried; the rest held behind it
    assert channels.drain(loop.config, now=t0 + 150).claimed == 0  # Retry-After (120 s) outlasts the backoff
    loop.slack.heal()
    assert status_text(loop).stdout.count("undelivered") == 1
    second = channels.drain(loop.config, now=t0 + 200)
    third = channels.drain(loop.config, now=t0 + 260)
    assert (second.delivered, third.delivered) == (20, 10)  # at most 20 a drain
    assert channel_outbox.backlog(loop.config.state) is None and "undelivered" not in status_text(loop).stdout

    landed = [m for m in loop.slack.channels[CHANNEL] if m.get("thread_ts")]
    assert len(landed) == 30 and len({m["text"] for m in landed}) == 30  # each exactly once
    assert len([m for m in loop.slack.channels[CHANNEL] if not m.get("thread_ts")]) == 3  # one root per item
    for item in ITEMS:
        thread = loop.binding(item)["thread"]  # type: ignore[index]
        numbers = [int(m["text"].split("event ")[1][:2]) for m in landed if m["thread_ts"] == thread]
        assert numbers == sorted(numbers) and len(numbers) == 10
    assert len(loop.events("channel.delivered_late")) == 30


def test_a_new_event_waits_behind_its_work_items_backlog(loop: Loop) -> None:
    loop.spawn()
    loop.slack.fail("chat.postMessage", 500, times=1)
    channels.publish(loop.config, "comment.agent", REF, text="first")
    assert channels.publish(loop.config, "comment.agent", REF, text="second") == []  # Slack is back, but queued
    channels.drain(loop.config, now=time.time() + 61)
    thread = loop.binding()["thread"]  # type: ignore[index]
    landed = [m["text"] for m in loop.slack.channels[CHANNEL] if m.get("thread_ts") == thread]
    assert len(landed) == 2 and "first" in landed[0] and "second" in landed[1]


def test_a_person_s_ticket_comment_is_published_as_comment_human(loop: Loop) -> None:
    from the_loop.routing.router import Router

    harness = loop.spawn()
    event = dana_comment("please also update the docs", 1)
    outcome = Router(loop.config, loop.dispatcher()).handle(event)
    assert outcome.status == "delivered"
    harness.wait_for_submitted(2)
    reply = loop.slack.posts()[-1]
    assert reply.params["thread_ts"] == loop.binding()["thread"]  # type: ignore[index]
    assert "New comment" in json.dumps(reply.params["blocks"]) and "update the docs" in reply.params["text"]


def test_closing_the_work_item_publishes_work_item_closed(loop: Loop) -> None:
    from the_loop.sessions import closing

    loop.spawn()
    closing.work_item_ended(loop.config, REF, reason="issue-closed", actor="", authorized=False, source="webhook")
    reply = loop.slack.posts()[-1]
    assert reply.params["thread_ts"] == loop.binding()["thread"]  # type: ignore[index]
    assert "Closed" in json.dumps(reply.params["blocks"])


def _drain_in_process(config_path: str, env: dict[str, str], now: float, ready: Any) -> None:
    from the_loop import channels as core_channels

    config = config_in_process(config_path, env, "drainer")
    ready.wait()
    core_channels.drain(config, now=now)


def test_two_drainers_at_once_post_each_entry_once(loop: Loop) -> None:
    import multiprocessing

    loop.slack.fail("chat.postMessage", 500)
    for n in range(12):
        channels.publish(loop.config, "comment.agent", ITEMS[n % 3], text=f"entry {n:02d}")
    loop.slack.heal()
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    now = time.time() + 61
    drainers = [
        context.Process(target=_drain_in_process, args=(str(loop.config.ref.path), env, now, ready)) for _ in range(2)
    ]
    for drainer in drainers:
        drainer.start()
    ready.set()
    for drainer in drainers:
        drainer.join(60)
        assert drainer.exitcode == 0
    landed = [m["text"] for m in loop.slack.channels[CHANNEL] if m.get("thread_ts")]
    assert sorted(landed) == sorted(set(landed)) and len(landed) == 12
    assert channel_outbox.backlog(loop.config.state) is None


def test_d25_no_token_byte_reaches_the_state_root_the_event_log_or_channels_status(
    loop: Loop, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    loop.spawn()
    loop.slack.fail("chat.postMessage", 200, error="invalid_auth", times=1)
    channels.publish(loop.config, "comment.agent", REF, text="queued")
    bound = loop.binding()
    assert bound is not None
    loop.slack.add_message(bound["channel"], user=DANA, text="a reply", thread_ts=bound["thread"])
    channels.read_cycle(loop.config, loop.channel())
    loop.route()
    env = {**os.environ, "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin"}
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "the_loop",
            "--config",
            str(loop.config.ref.path),
            "channels",
            "status",
            "--probe",
            "--format",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(shown.stdout)
    assert shown.returncode == 0, shown.stderr
    assert report["tokens"]["bot"] == {"env": "THE_LOOP_SLACK_BOT_TOKEN", "set": True}
    assert report["probe"]["botUser"] == "UBOT0001" and report["threads"] == 1
    for path in Path(loop.config.state.root).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert BOT_TOKEN.encode() not in data and APP_TOKEN.encode() not in data, path
    for token in (BOT_TOKEN, APP_TOKEN):
        assert token not in shown.stdout and token not in shown.stderr
        assert token not in caplog.text
    assert "chat.postMessage" in caplog.text  # slack-sdk did log its requests, through the redacting filter


def test_channels_threads_lists_bindings_and_exits_1_when_none(loop: Loop) -> None:
    env = {**os.environ, "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin"}
    base = [sys.executable, "-m", "the_loop", "--config", str(loop.config.ref.path), "channels", "threads"]
    assert subprocess.run(base, env=env, capture_output=True, text=True, timeout=60).returncode == 1
    loop.spawn()
    shown = subprocess.run(
        [*base, "--work-item", REF, "--format", "json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    [row] = json.loads(shown.stdout)
    assert row["workItem"] == REF and row["origin"] == "start"


def test_the_daemons_background_threads_drain_the_queue_and_poll_the_threads(loop: Loop) -> None:
    import threading

    from the_loop.testing import wait_for

    loop.spawn()
    loop.slack.fail("chat.postMessage", 500, times=1)
    channels.publish(loop.config, "comment.agent", REF, text="while down")
    bound = loop.binding()
    assert bound is not None and channel_outbox.backlog(loop.config.state) is not None
    loop.slack.add_message(bound["channel"], user=DANA, text="polled", thread_ts=bound["thread"])
    stop = threading.Event()
    threads = channels.start_background(loop.config, stop.is_set)
    try:
        assert [t.name for t in threads] == ["the-loop-channel-drain", "the-loop-slack-reader"]
        wait_for(lambda: channel_outbox.backlog(loop.config.state) is None and loop.events("channel.reply_received"))
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    assert loop.events("channel.delivered_late")[0]["work_item"] == REF
