"""The rules around the inbound pipeline and the settings (D §2.1, §2.2 refusals, §2.6, decision 10, issue-368):
who may do what, the bot's unknown id, the ticket record's wording, a dead session, fail-closed settings. The fake
Slack Web API on 127.0.0.1 with slack-sdk's real WebClient, real tmux and the fake harness."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from slack_world import CHANNEL, DANA, REF, Loop, dana_comment

from the_loop import channels
from the_loop.channels import outbox as channel_outbox
from the_loop.config import ConfigError
from the_loop.inbox import Inbox
from the_loop.interfaces import ChannelError
from the_loop.refs import parse_ref
from the_loop.state.registry import SessionRegistry

COLLABORATOR = "U0COLLAB"


def drops(loop: Loop) -> list[str]:
    return [d["reason"] for d in loop.events("channel.dropped")]


def test_unauthorized_act_a_collaborator_may_reply_but_never_relay_a_control_keyword(loop: Loop) -> None:
    from the_loop.state.store import WorkItemStore

    loop.reload(publish=["work-item.reply", "control.command"])
    harness = loop.spawn()
    channel, thread = loop.thread()
    store = WorkItemStore(loop.config.state, config=loop.config)
    store.update_section(REF, "collaborators", {"users": [{"slack": COLLABORATOR, "addedBy": "octocat"}]})
    comments = len(loop.comments())
    loop.slack.add_message(channel, user=COLLABORATOR, text="the-loop stop", thread_ts=thread)
    assert loop.poll()["accepted"] == 0
    assert drops(loop) == ["unauthorized-act"]
    assert len(loop.comments()) == comments and loop.route() == 0 and len(harness.submitted()) == 1
    assert not Inbox.for_config(loop.config).pending()


def test_no_bot_id_a_mention_while_the_bots_id_is_unknown_is_refused_privately_then_works_once_known(
    loop: Loop,
) -> None:
    harness = loop.spawn()
    channel, thread = loop.thread()
    loop.slack.fail("auth.test", 500)
    first = loop.slack.add_message(channel, user=DANA, text="<@UBOT0001> tabs please", thread_ts=thread)
    assert loop.poll()["accepted"] == 0
    assert drops(loop) == ["no-bot-id"]
    [told] = loop.slack.posts("chat.postEphemeral")
    assert told.params["user"] == DANA and told.params["thread_ts"] == thread and "again" in told.params["text"]
    assert channels.cursor(loop.config, "slack", REF, thread) == first  # at most once: not replayed
    assert not Inbox.for_config(loop.config).pending() and loop.route() == 0
    loop.slack.heal()
    loop.slack.add_message(channel, user=DANA, text="<@UBOT0001> tabs please", thread_ts=thread)
    assert loop.poll()["accepted"] == 1
    loop.route()
    pasted = harness.wait_for_submitted(2)[-1]
    assert "tabs please" in pasted and "UBOT0001" not in pasted  # the bot's own mention is not prose
    assert "UBOT0001" not in loop.comments()[-1]


def test_a_keyword_after_the_bots_mention_is_a_control_command_not_prose(loop: Loop) -> None:
    loop.reload(publish=["work-item.reply", "control.command"])
    harness = loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="<@UBOT0001> the-loop pause", thread_ts=thread)
    loop.poll()
    relayed = loop.comments()[-1]
    assert relayed.startswith("the-loop pause") and "(relayed from dana (slack:U0DANA))" in relayed
    assert loop.route() == 0 and len(harness.submitted()) == 1


def test_the_ticket_record_names_the_person_defangs_keywords_and_hides_secrets(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEPLOY_API_TOKEN", "s3cr3t-deploy-value")
    loop.spawn()
    channel, thread = loop.thread()
    text = "looks fine\nthe-loop stop if it fails; key s3cr3t-deploy-value in /home/bob/notes"
    loop.slack.add_message(channel, user=DANA, text=text, thread_ts=thread)
    assert loop.poll()["accepted"] == 1  # a keyword not opening the message is prose
    loop.route()
    mirrored = loop.comments()[-1]
    assert mirrored.startswith("Reply from dana (slack:U0DANA)")
    assert "> `the-loop stop` if it fails" in mirrored
    assert "s3cr3t-deploy-value" not in mirrored and "[redacted]" in mirrored
    assert "/home/[user]/notes" in mirrored and "bob" not in mirrored


def test_decision_10_a_reply_to_a_dead_session_respawns_it_and_is_delivered(loop: Loop) -> None:
    harness = loop.spawn()
    own = SessionRegistry(loop.config.state).load(REF).own  # type: ignore[union-attr]
    assert own is not None
    loop.runner.kill(own.tmux_target)
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="still there?", thread_ts=thread)
    loop.poll()
    assert loop.route() == 1
    assert loop.events("session.respawned")
    assert "still there?" in harness.wait_for_submitted(2)[-1]
    assert [call.params["name"] for call in loop.slack.posts("reactions.add")] == ["eyes", "white_check_mark"]


def test_issue_368_the_binding_is_portable_and_the_thread_cursor_machine_local(loop: Loop) -> None:
    loop.spawn()
    channel, thread = loop.thread()
    ts = loop.slack.add_message(channel, user=DANA, text="noted", thread_ts=thread)
    loop.poll()
    portable = json.loads(loop.config.state.portable_record("fake-octo-repo-15").read_text())
    assert portable["channels"]["slack"]["thread"] == thread and "cursors" not in portable["channels"]["slack"]
    local = json.loads(loop.config.state.local_record("fake-octo-repo-15").read_text())
    assert local["channels"]["slack"]["cursors"] == {thread: ts}
    shared = channels.state_path(loop.config, "slack")  # kept there too, so a cleanup never loses it
    assert json.loads(shared.read_text())["cursors"] == {thread: ts}


def test_settings_out_of_range_read_back_fail_closed(loop: Loop) -> None:
    channel = loop.channel()
    assert (channel.read_mode(), channel.max_chars(), channel.catch_up_interval()) == ("poll", 1500, 900.0)
    loop.reload(read={"mode": "sockets", "catchUpSeconds": -5}, maxChars=50)
    channel = loop.channel()
    assert (channel.read_mode(), channel.max_chars(), channel.catch_up_interval()) == ("off", 1500, 0.0)
    loop.reload(read={"mode": "gateway", "catchUpSeconds": 30}, maxChars=5000)
    channel = loop.channel()
    assert (channel.read_mode(), channel.max_chars(), channel.catch_up_interval()) == ("off", 2900, 60.0)
    loop.reload(
        publish=["work-item.reply", "control.comand", "work-item.reply", "session.awaiting_input"],
        subscribe=["comment.agent", "my-team.digest"],
    )
    channel = loop.channel()
    assert tuple(channel.granted()) == ("work-item.reply",)  # a typo never widens a grant
    assert tuple(channel.subscribed()) == ("comment.agent", "my-team.digest")  # a custom event is kept


@pytest.mark.parametrize("retired", ["events", "authorizedUsers"])
def test_retired_slack_keys_are_refused_at_load(loop: Loop, retired: str) -> None:
    with pytest.raises(ConfigError, match=rf"channels\.slack\.{retired} is retired.*migrate-config"):
        loop.reload(**{retired: ["U0DANA"]})


def test_refusals_before_any_call_no_channel_and_no_token(loop: Loop, monkeypatch: pytest.MonkeyPatch) -> None:
    loop.reload(channel="")
    with pytest.raises(ChannelError, match=r"channels\.slack\.channel.*add-channel"):
        channels.open_conversation(loop.config, loop.channel(), parse_ref(REF), "start")
    loop.reload(channel=CHANNEL)
    monkeypatch.delenv("THE_LOOP_SLACK_BOT_TOKEN")
    with pytest.raises(ChannelError, match="THE_LOOP_SLACK_BOT_TOKEN"):
        channels.open_conversation(loop.config, loop.channel(), parse_ref(REF), "start")
    assert loop.slack.calls == [] and loop.binding() is None


def test_a_root_answered_without_ts_binds_nothing_and_the_next_event_opens_it(loop: Loop) -> None:
    loop.slack.no_ts = 1
    with pytest.raises(ChannelError, match="no ts"):
        channels.open_conversation(loop.config, loop.channel(), parse_ref(REF), "start")
    assert loop.binding() is None
    assert channels.publish(loop.config, "comment.agent", REF, text="hello") == ["slack"]
    assert loop.binding()["origin"] == "event"  # type: ignore[index]


def test_an_unreadable_undelivered_entry_is_removed_and_never_blocks_the_queue(loop: Loop) -> None:
    path = channel_outbox.outbox_path(loop.config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "pending": {"20260101T000000.000000Z-00000000": "garbage"}}))
    channel_outbox.queue(loop.config, ["slack"], {"eventType": "comment.agent", "workItem": REF, "text": "x"}, "e")
    report = channels.drain(loop.config)
    assert report.delivered == 1 and channel_outbox.backlog(loop.config.state) is None
    assert any(d.get("reason") == "unreadable" for d in loop.events("channel.undelivered_dropped"))


def _cli(loop: Loop, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin"}
    command = [sys.executable, "-m", "the_loop", "--config", str(loop.config.ref.path), "channels", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


def test_channels_poll_runs_one_cycle_and_exits_1_when_skipped(loop: Loop) -> None:
    loop.spawn()
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="by hand", thread_ts=thread)
    done = _cli(loop, "poll", "--format", "json")
    assert done.returncode == 0, done.stderr
    counts: dict[str, Any] = json.loads(done.stdout)
    assert counts["threads"] == 1 and counts["accepted"] == 1
    loop.reload(read={"mode": "socket"})
    skipped = _cli(loop, "poll")
    assert skipped.returncode == 1 and "skipped" in skipped.stderr


def test_d16_a_reply_to_a_paused_session_is_recorded_and_dropped_undeliverable(loop: Loop) -> None:
    from the_loop import control

    harness = loop.spawn()
    assert control.set_session_status(loop.config, parse_ref(REF), "paused")
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="while paused", thread_ts=thread)
    loop.poll()
    loop.route()
    assert "while paused" in loop.comments()[-1]
    [dropped] = [d for d in loop.events("channel.dropped") if d["reason"] == "undeliverable"]
    assert dropped["detail"] == "session-paused" and dropped["level"] == "warning"
    assert [call.params["name"] for call in loop.slack.posts("reactions.add")] == ["eyes", "warning"]
    assert len(harness.submitted()) == 1


def test_verbosity_and_reaction_names_are_read_fail_closed(loop: Loop) -> None:
    loop.reload(verbosity="quiet", reactions={"received": ":thumbsup:", "completed": "", "error": "Not A Name"})
    harness = loop.spawn()
    channels.publish(loop.config, "comment.agent", REF, text="the quiet body", url="https://tickets.example/15")
    quiet = loop.slack.posts()[-1].params
    assert [b["type"] for b in quiet["blocks"]] == ["header", "actions"] and "quiet body" not in quiet["text"]
    assert quiet["text"].startswith("The agent commented · fake:octo/repo#15") and "tickets.example" in quiet["text"]
    loop.reload(verbosity="loud")  # unknown reads as normal
    channels.publish(loop.config, "comment.agent", REF, text="the normal body")
    assert [b["type"] for b in loop.slack.posts()[-1].params["blocks"]] == ["header", "section"]
    loop.reload(verbosity="verbose")
    channels.publish(loop.config, "comment.agent", REF, text="the verbose body")
    assert [b["type"] for b in loop.slack.posts()[-1].params["blocks"]] == ["header", "section", "context"]
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=DANA, text="ack me", thread_ts=thread)
    loop.poll()
    loop.route()
    harness.wait_for_submitted(2)
    assert [call.params["name"] for call in loop.slack.posts("reactions.add")] == ["thumbsup"]  # "" and bad: none


def test_a_channel_name_is_resolved_once_and_an_unknown_one_refuses_every_post_without_relisting(loop: Loop) -> None:
    loop.slack.channels.setdefault("C0NAMED", [])
    loop.reload(channel="#name-c0named")
    channels.open_conversation(loop.config, loop.channel(), parse_ref(REF), "start")
    assert loop.binding()["channel"] == "C0NAMED"  # type: ignore[index]
    channels.publish(loop.config, "comment.agent", REF, text="one")
    assert len(loop.slack.posts("conversations.list")) == 1  # resolved once per process
    loop.reload(channel="no-such-channel")
    for n in range(3):  # three work items: none waits behind another's queued entry
        assert channels.publish(loop.config, "comment.agent", f"fake:octo/repo#{16 + n}", text=f"refused {n}") == []
    assert len(loop.events("channel.post_failed")) == 3
    assert len(loop.slack.posts("conversations.list")) == 2  # a miss is looked up again at most hourly
    assert all("C0CENTRAL" not in str(call.params) for call in loop.slack.posts())  # never a fallback
    assert "names no channel the bot can see" in loop.events("channel.post_failed")[-1]["error"]


def test_a_ticket_comment_carrying_an_envelope_is_never_published_back_to_the_channel(loop: Loop) -> None:
    from the_loop.routing.router import Router

    harness = loop.spawn()
    posts = len(loop.slack.posts())
    body = 'looks good\n\n<!-- the-loop:event {"actor":{},"source":"slack","ts":"t","type":"gate.feedback"} -->'
    event = dana_comment(body, 77)
    assert Router(loop.config, loop.dispatcher()).handle(event).status == "delivered"
    harness.wait_for_submitted(2)  # delivered into the session as usual
    assert len(loop.slack.posts()) == posts and not loop.events("channel.posted")


def test_a_poll_reads_only_open_work_items_and_stops_its_cycle_on_a_429(loop: Loop) -> None:
    from the_loop.sessions import closing

    items = ["fake:octo/repo#21", "fake:octo/repo#22", "fake:octo/repo#23"]
    for item in items:
        channels.open_conversation(loop.config, loop.channel(), parse_ref(item), "event")
    closing.work_item_ended(loop.config, items[0], reason="issue-closed", actor="", authorized=False, source="webhook")
    assert loop.poll()["threads"] == 2  # the ended one is no longer read
    read = [call.params["ts"] for call in loop.slack.posts("conversations.replies")]
    assert loop.binding(items[0])["thread"] not in read  # type: ignore[index]
    loop.slack.fail("conversations.replies", 429, retry_after=30)
    before = len(loop.slack.posts("conversations.replies"))
    counts = loop.poll()
    assert counts["failed"] == 1 and len(loop.slack.posts("conversations.replies")) == before + 1
    assert loop.events("channel.read_failed")[-1]["retry_after"] == 30


def test_an_event_with_no_work_item_posts_top_level_in_the_central_channel_unbound(loop: Loop) -> None:
    assert channels.publish(loop.config, "comment.agent", "", text="for everyone") == ["slack"]
    [post] = loop.slack.posts()
    assert post.params["channel"] == CHANNEL and "thread_ts" not in post.params
    assert "for everyone" in post.params["text"] and not loop.events("channel.thread_opened")
