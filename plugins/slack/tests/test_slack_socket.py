"""The Socket Mode listener (D §2.5, §2.10): slack-sdk's real built-in SocketModeClient against a local websocket
server, real tmux and the fake harness. Scenario ids are from channels-slack.md §7."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slack_world import APP_TOKEN, BOT_TOKEN, CHANNEL, DANA, Loop

from the_loop import channels
from the_loop.interfaces import InboundMessage
from the_loop.testing import wait_for


@pytest.fixture
def socket_loop(loop: Loop) -> Iterator[Loop]:
    loop.server.start_socket()
    loop.reload(read={"mode": "socket"})
    yield loop


class Listening:
    """``channels.listen`` in a thread of this process, stopped at teardown."""

    def __init__(self, loop: Loop, standing: Any = None) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=channels.listen, args=(loop.config, loop.channel(), self.stop.is_set, standing), daemon=True
        )
        self.thread.start()
        wait_for(lambda: loop.server.socket is not None and loop.server.socket.clients, timeout=10)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def listening(socket_loop: Loop) -> Iterator[Listening]:
    listener = Listening(socket_loop)
    yield listener
    listener.close()


def message(channel: str, ts: str, text: str, *, thread: str = "", user: str = DANA, kind: str = "message") -> dict:
    event: dict[str, Any] = {"type": kind, "channel": channel, "user": user, "text": text, "ts": ts}
    if thread:
        event["thread_ts"] = thread
    return event


def test_d11_a_mention_in_a_thread_the_loop_never_bound_is_unmapped(socket_loop: Loop, listening: Listening) -> None:
    socket = socket_loop.server.socket
    assert socket is not None
    ts = socket_loop.slack.add_message(CHANNEL, user=DANA, text="<@UBOT0001> hi", thread_ts="1600000000.000001")
    envelope = socket.send_event(message(CHANNEL, ts, "<@UBOT0001> hi", thread="1600000000.000001", kind="app_mention"))
    assert socket.wait_acked(envelope)
    wait_for(lambda: socket_loop.events("channel.dropped"))
    assert socket_loop.events("channel.dropped")[0]["reason"] == "unmapped"


def test_d12_a_reply_the_catch_up_took_is_a_duplicate_when_slack_redelivers_it(socket_loop: Loop) -> None:
    harness = socket_loop.spawn()
    bound = socket_loop.binding()
    assert bound is not None
    ts = socket_loop.slack.add_message(
        bound["channel"], user=DANA, text="written while down", thread_ts=bound["thread"]
    )
    listener = Listening(socket_loop)  # the catch-up at connect takes it
    try:
        wait_for(lambda: socket_loop.events("channel.caught_up"))
        assert socket_loop.events("channel.caught_up")[0]["accepted"] == 1
        socket = socket_loop.server.socket
        assert socket is not None
        envelope = socket.send_event(message(bound["channel"], ts, "written while down", thread=bound["thread"]))
        assert socket.wait_acked(envelope)
        wait_for(lambda: any(d["reason"] == "duplicate" for d in socket_loop.events("channel.dropped")))
    finally:
        listener.close()
    socket_loop.route()
    pasted = harness.wait_for_submitted(2)
    assert sum("written while down" in text for text in pasted) == 1


def test_d13_a_raising_handler_still_acks_and_the_next_envelope_is_processed(socket_loop: Loop) -> None:
    from the_loop_slack.listener import run_socket_mode

    seen: list[str] = []

    def sink(received: InboundMessage) -> str:
        seen.append(received.message_id)
        if len(seen) == 1:
            raise RuntimeError("injected handler fault")
        return "accepted"

    stop = threading.Event()
    worker = threading.Thread(target=run_socket_mode, args=(socket_loop.channel(), sink, stop.is_set), daemon=True)
    worker.start()
    try:
        socket = socket_loop.server.socket
        assert socket is not None
        wait_for(lambda: socket.clients, timeout=10)
        first = socket.send_event(message(CHANNEL, "1700000001.000001", "one", thread="1700000000.000001"))
        second = socket.send_event(message(CHANNEL, "1700000001.000002", "two", thread="1700000000.000001"))
        assert socket.wait_acked(first) and socket.wait_acked(second)
        wait_for(lambda: len(seen) == 2)
        assert seen == ["1700000001.000001", "1700000001.000002"]
        assert socket.acks.index(first) < socket.acks.index(second)
    finally:
        stop.set()
        worker.join(10)


def test_a_reply_seen_by_both_the_poll_and_the_socket_reaches_the_session_once(socket_loop: Loop) -> None:
    harness = socket_loop.spawn()
    bound = socket_loop.binding()
    assert bound is not None
    listener = Listening(socket_loop)
    try:
        wait_for(lambda: socket_loop.events("channel.caught_up"))
        ts = socket_loop.slack.add_message(bound["channel"], user=DANA, text="once only", thread_ts=bound["thread"])
        socket = socket_loop.server.socket
        assert socket is not None
        envelope = socket.send_event(message(bound["channel"], ts, "<@UBOT0001> once only", thread=bound["thread"]))
        assert socket.wait_acked(envelope)
        wait_for(lambda: socket_loop.events("channel.reply_received"))
        channels.read_cycle(socket_loop.config, socket_loop.channel())  # the poll path sees it too
        mention = socket.send_event(
            message(bound["channel"], ts, "<@UBOT0001> once only", thread=bound["thread"], kind="app_mention")
        )
        assert socket.wait_acked(mention)
    finally:
        listener.close()
    socket_loop.route()
    socket_loop.route()
    pasted = harness.wait_for_submitted(2)
    assert sum("once only" in text for text in pasted) == 1
    assert len(socket_loop.events("channel.reply_received")) == 1


def test_d23_a_second_listener_exits_1_naming_the_holder_and_opens_no_socket(socket_loop: Loop) -> None:
    env = {
        **os.environ,
        "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin",
        "THE_LOOP_SLACK_BOT_TOKEN": BOT_TOKEN,
        "THE_LOOP_SLACK_APP_TOKEN": APP_TOKEN,
    }
    command = [sys.executable, "-m", "the_loop", "--config", str(socket_loop.config.ref.path), "channels", "listen"]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pidfile = socket_loop.config.state.pidfile("slack-listener")
        wait_for(lambda: socket_loop.server.socket is not None and socket_loop.server.socket.clients, timeout=30)
        assert Path(pidfile).read_text().strip() == str(first.pid)
        opened = len(socket_loop.slack.posts("apps.connections.open"))
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert str(first.pid) in second.stderr and "already running" in second.stderr
        assert len(socket_loop.slack.posts("apps.connections.open")) == opened
    finally:
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    for token in (BOT_TOKEN, APP_TOKEN):
        assert token not in out and token not in err


def test_issue_334_a_reconnect_reads_what_was_written_meanwhile(socket_loop: Loop) -> None:
    harness = socket_loop.spawn()
    bound = socket_loop.binding()
    assert bound is not None
    listener = Listening(socket_loop)
    try:
        wait_for(lambda: len(socket_loop.events("channel.caught_up")) == 1)
        socket = socket_loop.server.socket
        assert socket is not None
        opened = len(socket_loop.slack.posts("apps.connections.open"))
        socket_loop.slack.add_message(bound["channel"], user=DANA, text="sent in the gap", thread_ts=bound["thread"])
        socket.send_raw({"type": "disconnect", "reason": "refresh_requested"})  # no envelope for the gap's reply
        wait_for(lambda: len(socket_loop.events("channel.caught_up")) == 2, timeout=20)
        assert len(socket_loop.slack.posts("apps.connections.open")) == opened + 1  # a fresh connection
        assert socket_loop.events("channel.caught_up")[1]["accepted"] == 1
    finally:
        listener.close()
    socket_loop.route()
    assert "sent in the gap" in harness.wait_for_submitted(2)[-1]


def test_issue_362_the_listener_logs_the_scopes_it_lacks_at_connect(socket_loop: Loop) -> None:
    socket_loop.reload(channel="D0DIRECT")
    socket_loop.slack.scopes = "chat:write,channels:history,reactions:write"
    listener = Listening(socket_loop)
    try:
        wait_for(lambda: socket_loop.events("channel.scope_missing"))
    finally:
        listener.close()
    [missing] = socket_loop.events("channel.scope_missing")
    assert missing["scopes"] == ["im:history", "app_mentions:read"] and missing["level"] == "warning"


def test_channels_status_probe_names_a_missing_scope_and_exits_1(socket_loop: Loop) -> None:
    socket_loop.slack.scopes = "chat:write,reactions:write,app_mentions:read"
    env = {**os.environ, "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin"}
    command = [sys.executable, "-m", "the_loop", "--config", str(socket_loop.config.ref.path), "channels", "status"]
    shown = subprocess.run([*command, "--probe"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 1 and "missing scope channels:history" in shown.stdout


def test_an_envelope_is_acked_right_after_its_claim_not_after_the_slow_calls_that_follow(
    socket_loop: Loop,
) -> None:
    harness = socket_loop.spawn()
    bound = socket_loop.binding()
    assert bound is not None
    socket_loop.slack.delays["reactions.add"] = 4.0  # Slack wants the ack within 3 s
    listener = Listening(socket_loop)
    try:
        wait_for(lambda: socket_loop.events("channel.caught_up"))
        socket = socket_loop.server.socket
        assert socket is not None
        ts = socket_loop.slack.add_message(bound["channel"], user=DANA, text="quick ack", thread_ts=bound["thread"])
        envelope = socket.send_event(message(bound["channel"], ts, "quick ack", thread=bound["thread"]))
        assert socket.wait_acked(envelope, timeout=2.0)
        assert socket_loop.events("channel.reply_received")  # claimed before the ack
        wait_for(lambda: socket_loop.slack.posts("reactions.add"), timeout=10)
    finally:
        listener.close()
    socket_loop.route()
    assert "quick ack" in harness.wait_for_submitted(2)[-1]


# ------------------------------------------------------------------------------------ rooms (D §2.7, issue-375)

ROOM = "C0TMP375"


def _declare(loop: Loop, ref: str, words: str) -> Any:
    from the_loop.refs import parse_ref
    from the_loop.sessions.grants import grant

    return grant(loop.config, parse_ref(ref), "add-channel", words, by="octocat", source="comment", note="")


def test_d17_add_channel_moves_the_conversation_into_the_room_and_a_member_there_reaches_the_item(
    socket_loop: Loop, listening: Listening
) -> None:
    harness = socket_loop.spawn()
    old_channel, old_thread = socket_loop.thread()
    assert old_channel == CHANNEL
    done = _declare(socket_loop, "fake:octo/repo#15", f"slack@{ROOM}")
    assert done.ok and done.effect == "declared", done
    bound = socket_loop.binding()
    assert bound is not None
    assert (bound["channel"], bound["thread"], bound["mode"], bound["origin"]) == (ROOM, "", "channel", "declared")
    posts = socket_loop.slack.posts()
    intro, pointer = posts[-2].params, posts[-1].params
    assert intro["channel"] == ROOM and "thread_ts" not in intro  # one top-level intro in the room
    assert pointer["channel"] == CHANNEL and pointer["thread_ts"] == old_thread and ROOM in pointer["text"]
    [declared] = socket_loop.portable()["collaborationChannels"]["channels"]
    from the_loop.state import CHANNEL_DECLARATION_FIELDS, CONVERSATION_FIELDS

    assert set(declared) <= set(CHANNEL_DECLARATION_FIELDS) and set(bound) <= set(CONVERSATION_FIELDS)
    assert (declared["ref"], declared["type"], declared["target"], declared["listen"]) == (
        f"slack@{ROOM}",
        "slack",
        ROOM,
        "mentions",
    )

    # the next update lands top-level in the room
    from the_loop import channels

    channels.publish(socket_loop.config, "comment.agent", "fake:octo/repo#15", text="progress")
    last = socket_loop.slack.posts()[-1].params
    assert last["channel"] == ROOM and "thread_ts" not in last

    # a member's mention in the room reaches the item; a plain message in a `mentions` room is not addressed
    socket = socket_loop.server.socket
    assert socket is not None
    plain = socket_loop.slack.add_message(ROOM, user=DANA, text="just chatting")
    socket.send_event(message(ROOM, plain, "just chatting"))
    wait_for(lambda: any(e["reason"] == "not-addressed" for e in socket_loop.events("channel.dropped")))
    ts = socket_loop.slack.add_message(ROOM, user=DANA, text="<@UBOT0001> use the staging db")
    socket.send_event(message(ROOM, ts, "<@UBOT0001> use the staging db", kind="app_mention"))
    wait_for(lambda: socket_loop.events("channel.reply_received"))
    assert socket_loop.route() == 1
    assert "use the staging db" in harness.wait_for_submitted(2)[-1]

    # the thread it left is unmapped from now on
    later = socket_loop.slack.add_message(CHANNEL, user=DANA, text="<@UBOT0001> hi", thread_ts=old_thread)
    socket.send_event(message(CHANNEL, later, "<@UBOT0001> hi", thread=old_thread, kind="app_mention"))
    wait_for(lambda: any(e.get("message") == later for e in socket_loop.events("channel.dropped")))
    assert [e["reason"] for e in socket_loop.events("channel.dropped") if e.get("message") == later] == ["unmapped"]


def test_d18_a_room_another_item_holds_is_refused_and_the_first_declaration_stands(socket_loop: Loop) -> None:
    socket_loop.spawn()
    assert _declare(socket_loop, "fake:octo/repo#15", f"slack@{ROOM} --listen all").effect == "declared"
    refused = _declare(socket_loop, "fake:octo/repo#16", f"slack://{ROOM}")
    assert (refused.ok, refused.effect) == (False, "channel-taken")
    [kept] = socket_loop.portable()["collaborationChannels"]["channels"]
    assert kept["listen"] == "all"
    assert "collaborationChannels" not in socket_loop.portable("fake:octo/repo#16")
    for words, reason in (
        ("slack@#general", "missing-channel"),
        ("", "missing-channel"),
        (f"slack@{ROOM} --listen loud", "unknown-listen-mode"),
    ):
        assert _declare(socket_loop, "fake:octo/repo#16", words).effect == reason
