"""A standing session's Slack thread (issue-277, S13/S14, scenario E34): announced when it starts, its allow-listed
members' replies pasted into the session, strangers dropped, nothing mirrored onto a ticket. Real tmux, the fake
harness, real slack-sdk against the fake Slack (poll and Socket Mode)."""

from __future__ import annotations

import json
from typing import Any

from slack_world import CHANNEL, DANA, Loop
from test_slack_socket import Listening, message

from the_loop import channels
from the_loop.standing import resolve
from the_loop.standing.control import sink, start, stop
from the_loop.testing import wait_for
from the_loop.testing.harness import FakeHarness

STRANGER = "U0STRANGER"
ROOM = "C0OPSROOM"


def standing(loop: Loop, **slack: Any) -> None:
    session = {"name": "watcher", "prompt": "watch the work in flight", "slack": {"enabled": True, **slack}}
    loop.configure(standingSessions={"enabled": True, "sessions": [session]})


def started(loop: Loop) -> tuple[dict[str, Any], FakeHarness]:
    definition = resolve(loop.config, "watcher")
    assert definition is not None
    row = start(loop.config, loop.runner, definition)
    assert row["outcome"] in ("started", "resumed"), row
    record = record_of(loop)
    harness = FakeHarness(loop.logs / f"{record['harnessSessionId']}.jsonl")
    harness.wait_ready(screen=lambda: loop.runner.capture("loop-standing-watcher"))
    return record, harness


def record_of(loop: Loop) -> dict[str, Any]:
    return json.loads((loop.config.state.root / "local" / "standing" / "watcher.json").read_text())


def shared(loop: Loop) -> dict[str, Any]:
    return json.loads((loop.config.state.root / "channels" / "slack.json").read_text())


def poll(loop: Loop) -> dict[str, int]:
    return channels.read_cycle(loop.config, loop.channel(), sink(loop.config))


def reactions(loop: Loop) -> list[str]:
    return [call.params["name"] for call in loop.slack.posts("reactions.add")]


def test_e34_an_authorized_reply_in_the_thread_is_pasted_and_a_strangers_is_dropped(loop: Loop) -> None:
    standing(loop)
    record, harness = started(loop)
    [root] = loop.slack.posts()
    assert root.params["channel"] == CHANNEL and "thread_ts" not in root.params  # top-level, in the central channel
    thread = record["slackThread"]
    assert record["slackChannel"] == CHANNEL and thread
    bound = shared(loop)["conversations"]["standing:watcher"]
    assert (bound["channel"], bound["thread"], bound["origin"]) == (CHANNEL, thread, "standing")
    [announced] = loop.events("standing.announced")
    assert announced["thread"] == thread and "text" not in announced
    prompt = harness.records("start")[0]["argv"][-1]
    assert "Slack thread" in prompt  # the directive names the thread its operator speaks through

    loop.slack.add_message(CHANNEL, user=STRANGER, text="rm -rf everything", thread_ts=thread)
    ts = loop.slack.add_message(CHANNEL, user=DANA, text="how are the open items doing?", thread_ts=thread)
    counts = poll(loop)
    assert counts["accepted"] == 1, counts
    [pasted] = [text for text in harness.wait_for_submitted(2) if "open items" in text]
    assert "[standing:watcher]" in pasted and f"dana (slack:{DANA})" in pasted
    assert not any("rm -rf" in text for text in harness.submitted())
    [said] = loop.events("standing.said")
    assert said["standing"] == "watcher" and said["actor"] == f"dana (slack:{DANA})"
    [skipped] = loop.events("channel.mirror_skipped")
    assert skipped["reason"] == "standing-session" and skipped["message"] == ts
    [dropped] = loop.events("channel.dropped")
    assert dropped["reason"] == "unauthorized-actor" and dropped["author"] == STRANGER
    assert reactions(loop) == ["eyes", "white_check_mark"]
    assert not loop.tickets.exists()  # no ticket anywhere was written
    assert poll(loop)["accepted"] == 0  # the cursor holds: nothing is taken twice

    # stopped and started again: the same thread, no second announcement
    assert stop(loop.config, loop.runner, "watcher")["outcome"] == "stopped"
    again, _ = started(loop)
    assert again["slackThread"] == thread and len(loop.slack.posts()) == 1
    assert len(loop.events("standing.announced")) == 1


def test_a_reply_while_the_session_is_stopped_is_refused_and_spawns_nothing(loop: Loop) -> None:
    standing(loop)
    record, _ = started(loop)
    assert stop(loop.config, loop.runner, "watcher")["outcome"] == "stopped"
    loop.slack.add_message(CHANNEL, user=DANA, text="are you there?", thread_ts=record["slackThread"])
    assert poll(loop)["accepted"] == 1  # claimed, then refused by the session: at most once
    [dropped] = loop.events("channel.dropped")
    assert dropped["reason"] == "undeliverable"
    [told] = loop.slack.posts("chat.postEphemeral")
    assert "the-loop standing start watcher" in told.params["text"]
    assert reactions(loop) == ["eyes", "warning"]
    assert loop.runner.probe("loop-standing-watcher") == "absent"  # say never spawns


def test_an_announcement_that_fails_leaves_the_session_up(loop: Loop) -> None:
    standing(loop, channel=ROOM)
    loop.slack.fail("chat.postMessage", error="channel_not_found")
    record, _ = started(loop)
    assert record["status"] == "running" and not record["slackThread"]
    [failed] = loop.events("standing.announce_failed")
    assert failed["standing"] == "watcher" and "xoxb" not in json.dumps(failed)
    assert not (loop.config.state.root / "channels" / "slack.json").exists()  # nothing was bound
    loop.slack.heal()
    assert stop(loop.config, loop.runner, "watcher")["outcome"] == "stopped"
    again, _ = started(loop)  # the next start announces, in the configured room
    assert again["slackChannel"] == ROOM and again["slackThread"]
    assert loop.events("standing.announced")[0]["channel_id"] == ROOM


def test_a_work_item_reply_reader_never_hands_a_standing_thread_to_the_inbox(loop: Loop) -> None:
    """Over Socket Mode: a member's reply in the standing thread is said into the pane; no inbox entry exists."""
    loop.server.start_socket()
    loop.reload(read={"mode": "socket"})
    standing(loop)
    record, harness = started(loop)
    listener = Listening(loop, sink(loop.config))
    try:
        socket = loop.server.socket
        assert socket is not None
        thread = record["slackThread"]
        ts = loop.slack.add_message(CHANNEL, user=DANA, text="pause the reviews", thread_ts=thread)
        socket.send_event(message(CHANNEL, ts, "pause the reviews", thread=thread))
        wait_for(lambda: any("pause the reviews" in text for text in harness.submitted()), timeout=10)
        wait_for(lambda: loop.events("channel.mirror_skipped"), timeout=10)
    finally:
        listener.close()
    from the_loop.inbox import Inbox

    assert Inbox.for_config(loop.config).pending() == []
