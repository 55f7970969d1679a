"""Reading replies by polling (D §2.5 and §2.6, decision 10): authorization, the claim, the ticket mirror, delivery into
the live session on real tmux with the fake harness. Scenario ids are from channels-slack.md §7."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from fake_slack import BOT_USER
from slack_world import DANA, REF, Loop

from the_loop import channels
from the_loop.inbox import Inbox

STRANGER = "U0STRANGER"


def reactions(loop: Loop) -> list[str]:
    return [call.params["name"] for call in loop.slack.posts("reactions.add")]


def test_d8_an_allow_listed_reply_in_a_dm_thread_is_mirrored_then_pasted_into_the_session(loop: Loop) -> None:
    loop.reload(channel="D0DIRECT")
    harness = loop.spawn()
    channel, thread = loop.thread()
    assert channel == "D0DIRECT"
    ts = loop.slack.add_message(
        channel, user=DANA, text="use <!channel> tabs <!-- pasted -->, ping a@b.example", thread_ts=thread
    )
    assert loop.poll()["accepted"] == 1
    assert channels.cursor(loop.config, "slack", REF, thread) == ts
    assert loop.route() == 1
    mirrored = loop.comments()[-1]
    assert f"slack:{DANA}" in mirrored and "> use @channel tabs" in mirrored
    assert "pasted" not in mirrored and "a@b.example" not in mirrored and "the-loop:agent-comment" in mirrored
    assert '"type": "work-item.reply"' in mirrored  # the envelope
    pasted = harness.wait_for_submitted(2)[-1]
    assert "use" in pasted and "tabs" in pasted
    assert reactions(loop) == ["eyes", "white_check_mark"]
    received = loop.events("channel.reply_received")[0]
    assert received["message"] == ts and "text" not in received


def test_a_poll_reads_every_page_and_never_takes_a_message_twice(loop: Loop) -> None:
    loop.slack.page_size = 2
    harness = loop.spawn()
    channel, thread = loop.thread()
    for n in range(5):
        loop.slack.add_message(channel, user=DANA, text=f"part {n}", thread_ts=thread)
    assert loop.poll()["accepted"] == 5
    assert loop.poll()["messages"] == 0  # the cursor holds
    loop.route()
    pasted = harness.wait_for_submitted(6)[1:]
    assert all(f"part {n}" in pasted[n] for n in range(5))


def test_d9_a_stranger_is_dropped_before_anything_is_read_or_written(loop: Loop) -> None:
    harness = loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=STRANGER, text="rm -rf everything", thread_ts=thread)
    assert loop.poll()["accepted"] == 0
    [dropped] = loop.events("channel.dropped")
    assert dropped["reason"] == "unauthorized-actor" and dropped["level"] == "warning"
    assert loop.route() == 0 and len(loop.comments()) == 1  # only the spawn announcement
    assert reactions(loop) == [] and not Inbox.for_config(loop.config).pending()
    assert len(harness.submitted()) == 1


def test_d10_the_bots_own_messages_are_dropped_self_authored_before_the_allow_list(loop: Loop) -> None:
    loop.reload(publish=["work-item.reply"])
    loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=BOT_USER, text="mine", thread_ts=thread)
    loop.slack.add_message(channel, user=DANA, text="relayed", thread_ts=thread, bot_id="BOTHER")
    loop.poll()
    dropped = loop.events("channel.dropped")
    assert [d["reason"] for d in dropped] == ["self-authored", "self-authored"]
    assert all("author" not in d for d in dropped)


def test_d14_an_ungranted_control_keyword_is_dropped_and_never_reaches_the_session(loop: Loop) -> None:
    harness = loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="the-loop stop", thread_ts=thread)
    loop.poll()
    assert loop.events("channel.dropped")[0]["reason"] == "unpublishable-event"
    assert loop.route() == 0 and len(harness.submitted()) == 1


def test_d15_a_granted_control_keyword_is_relayed_unmarked_words_first_and_not_delivered(loop: Loop) -> None:
    loop.reload(publish=["work-item.reply", "control.command"])
    harness = loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="the-loop pause", thread_ts=thread)
    loop.poll()
    relayed = loop.comments()[-1]
    assert relayed.startswith("the-loop pause") and "the-loop:agent-comment" not in relayed
    assert '"type": "control.command"' in relayed
    assert loop.route() == 0 and len(harness.submitted()) == 1


def test_d16_a_reply_with_no_session_is_recorded_and_dropped_undeliverable(loop: Loop) -> None:
    from the_loop.refs import parse_ref

    channels.open_conversation(loop.config, loop.channel(), parse_ref(REF), "event")  # bound, never spawned
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="anyone there?", thread_ts=thread)
    loop.poll()
    loop.route()
    assert f"slack:{DANA}" in loop.comments()[-1]
    [dropped] = [d for d in loop.events("channel.dropped") if d["reason"] == "undeliverable"]
    assert dropped["level"] == "warning" and dropped["work_item"] == REF
    assert reactions(loop) == ["eyes", "warning"]
    assert not loop.events("session.spawned")  # a reply never first-spawns


def test_edits_and_deletes_are_never_new_input(loop: Loop) -> None:
    harness = loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="edited", thread_ts=thread, subtype="message_changed")
    loop.slack.add_message(channel, user=DANA, text="", thread_ts=thread, subtype="message_deleted")
    loop.poll()
    assert [d["reason"] for d in loop.events("channel.dropped")] == ["unsupported-subtype"] * 2
    assert loop.route() == 0 and len(harness.submitted()) == 1


def test_a_failing_read_skips_the_thread_and_keeps_its_cursor(loop: Loop) -> None:
    loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="later", thread_ts=thread)
    loop.slack.fail("conversations.replies", 500, times=1)
    assert loop.poll()["failed"] == 1 and channels.cursor(loop.config, "slack", REF, thread) == ""
    assert loop.poll()["accepted"] == 1


def test_an_empty_allow_list_lets_nobody_in(loop: Loop, monkeypatch: object) -> None:
    import yaml

    loop.spawn()
    path = loop.config.ref.path
    document = yaml.safe_load(path.read_text())
    document["routing"]["authorizedUsers"] = []
    path.write_text(yaml.safe_dump(document))
    from the_loop.config import load_config
    from the_loop.plugins import get_host

    loop.config = load_config(path, get_host())
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="hi", thread_ts=thread)
    loop.poll()
    assert [d["reason"] for d in loop.events("channel.dropped")] == ["unauthorized-actor"]
    assert json.dumps(loop.events()).count("hi") == 0


def test_a_collaborator_granted_on_the_item_is_heard_in_its_thread_and_nowhere_else(loop: Loop) -> None:
    """issue-307 on the channel path: the grant lets a reply through to this item's session (input only), and the
    router agrees with the channel's check, so the reply is delivered rather than dropped further on."""
    from the_loop.state.store import WorkItemStore

    harness = loop.spawn()
    channel, thread = loop.thread()
    store = WorkItemStore(loop.config.state, config=loop.config)
    store.update_section(REF, "collaborators", {"users": [{"slack": STRANGER, "addedBy": "octocat"}]})
    loop.slack.add_message(channel, user=STRANGER, text="the widget should be blue", thread_ts=thread)
    assert loop.poll()["accepted"] == 1
    assert loop.route() == 1
    assert "the widget should be blue" in harness.wait_for_submitted(2)[-1]
    assert loop.events("routing.routed")[-1]["collaborator"] is True


def test_channels_poll_says_when_no_running_service_will_deliver_what_it_queued(loop: Loop) -> None:
    """A one-shot read queues replies into the inbox; only a running ingress service routes them on (issue 18)."""
    loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="a reply for the session", thread_ts=thread)
    env = {**os.environ, "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin", "THE_LOOP_CACHE_DIR": ""}
    argv = [sys.executable, "-m", "the_loop", "--config", str(loop.config.ref.path), "channels", "poll"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "accepted=1" in result.stdout
    assert "note: no the-loop service is running to deliver what was queued" in result.stderr
    assert "the-loop start" in result.stderr
