"""Declared rooms read by polling (channels-slack §2.7 item 43, issue-375): a ``listen: all`` room is baselined on
first sight and then read from its cursor; removing the declaration moves the conversation back to the central
channel at the next update. Real slack-sdk against the fake Slack, real tmux, the fake harness (the Socket Mode side
is in ``test_slack_socket.py``)."""

from __future__ import annotations

from slack_world import CHANNEL, DANA, REF, Loop

from the_loop import channels
from the_loop.refs import parse_ref
from the_loop.sessions.grants import grant
from the_loop.sessions.operations import Done

ROOM = "C0POLLROOM"
STRANGER = "U0STRANGER"


def declare(loop: Loop, command: str, words: str) -> Done:
    return grant(loop.config, parse_ref(REF), command, words, by="octocat", source="cli")


def pushed(loop: Loop, text: str) -> str:
    """A top-level message in the room as the Socket Mode listener hands it over: its outcome."""
    from the_loop.interfaces import InboundMessage

    ts = loop.slack.add_message(ROOM, user=DANA, text=text)
    return channels.accept(loop.config, loop.channel(), InboundMessage(ROOM, ts, ts, DANA, text), "socket")


def test_a_listen_all_room_is_baselined_then_every_member_message_reaches_the_item(loop: Loop) -> None:
    harness = loop.spawn()
    loop.slack.add_message(ROOM, user=DANA, text="history from before the declaration")
    assert declare(loop, "add-channel", f"slack@{ROOM} --listen all").effect == "declared"
    first = loop.poll()
    assert first["rooms"] == 1 and first["accepted"] == 0  # the first sight only records where the room stands
    assert channels.cursor(loop.config, "slack", REF, f"channel:{ROOM}")

    loop.slack.add_message(ROOM, user=STRANGER, text="let me in")
    ts = loop.slack.add_message(ROOM, user=DANA, text="the staging db is back")  # no mention: the room hears all
    counts = loop.poll()
    assert counts["accepted"] == 1, counts
    assert channels.cursor(loop.config, "slack", REF, f"channel:{ROOM}") == ts
    assert loop.route() == 1
    pasted = harness.wait_for_submitted(2)[-1]
    assert "the staging db is back" in pasted
    assert not any("history from before" in text or "let me in" in text for text in harness.submitted())
    reasons = [e["reason"] for e in loop.events("channel.dropped")]
    assert "unauthorized-actor" in reasons
    assert loop.poll()["accepted"] == 0  # read once


def test_a_mentions_room_is_not_polled(loop: Loop) -> None:
    loop.spawn()
    assert declare(loop, "add-channel", f"slack@{ROOM}").effect == "declared"
    loop.slack.add_message(ROOM, user=DANA, text="plain chatter")
    assert loop.poll().get("rooms", 0) == 0  # a mentions room hears only mentions, which only a listener gets
    assert not any(call.method == "conversations.history" for call in loop.slack.calls)


def test_remove_channel_moves_the_conversation_back_to_the_central_channel_at_the_next_update(loop: Loop) -> None:
    loop.spawn()
    assert declare(loop, "add-channel", f"slack@{ROOM}").effect == "declared"
    assert (loop.binding() or {}).get("mode") == "channel"
    assert pushed(loop, "<@UBOT0001> before the removal") == "accepted"  # a mention in the room reaches the item
    removed = declare(loop, "remove-channel", f"slack@{ROOM}")
    assert (removed.ok, removed.effect) == (True, "undeclared")
    assert "collaborationChannels" not in loop.portable() or not loop.portable()["collaborationChannels"]["channels"]

    channels.publish(loop.config, "comment.agent", REF, text="progress after the move back")
    bound = loop.binding()
    assert bound is not None and bound["channel"] == CHANNEL and bound["thread"] and "mode" not in bound
    root, pointer, update = [call.params for call in loop.slack.posts()[-3:]]
    assert root["channel"] == CHANNEL and "thread_ts" not in root  # a fresh root in the central channel
    assert pointer["channel"] == ROOM and "thread_ts" not in pointer and "moved" in pointer["text"]  # the room is told
    assert update["channel"] == CHANNEL and update["thread_ts"] == bound["thread"]  # the update itself

    loop.slack.add_message(ROOM, user=DANA, text="still here?")
    assert loop.poll()["accepted"] == 0  # the room no longer reaches the item
    assert pushed(loop, "<@UBOT0001> still here?") == "unmapped"  # not even a mention, as a listener pushes it
