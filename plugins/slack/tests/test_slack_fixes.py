"""Review fixes (final round): a cleanup never loses a thread's cursor, a retried dispatch publishes its comment
once, a failed claim holds its thread's cursor, a slow root never stalls a claim, and a close opens no conversation.
The fake Slack Web API on 127.0.0.1, real tmux and the fake harness; faults are injected only where named."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fake_slack import BOT_USER
from slack_world import DANA, REF, Loop, dana_comment

from the_loop import channels
from the_loop.channels import outbox as channel_outbox
from the_loop.inbox import Inbox
from the_loop.interfaces import InboundMessage
from the_loop.models import WorkEvent
from the_loop.refs import parse_ref
from the_loop.sessions.dispatcher import Dispatcher, Outcome
from the_loop.state.registry import SessionRegistry


def test_a_cleanup_keeps_the_thread_cursor_so_a_relayed_command_is_never_relayed_again(loop: Loop) -> None:
    from the_loop.sessions import closing

    loop.reload(publish=["work-item.reply", "control.command"])
    loop.spawn()
    channel, thread = loop.thread()
    ts = loop.slack.add_message(channel, user=DANA, text="the-loop pause", thread_ts=thread)
    assert loop.poll()["accepted"] == 1
    relayed = [c for c in loop.comments() if c.startswith("the-loop pause")]
    assert len(relayed) == 1
    closing.cleanup(loop.config, REF, actor="octocat", source="cli", runner=loop.runner)
    assert SessionRegistry(loop.config.state).load(REF) is None  # the local record (and its cursor copy) is gone
    assert channels.cursor(loop.config, "slack", REF, thread) == ts
    counts = loop.poll()
    assert counts["accepted"] == 0
    assert [c for c in loop.comments() if c.startswith("the-loop pause")] == relayed


class FailingOnce(Dispatcher):
    """A dispatcher whose first dispatch fails as a retryable fault (the injected fault), then works."""

    failed = False

    def dispatch(self, event: WorkEvent) -> Outcome:
        if not self.failed:
            self.failed = True
            return Outcome("failed", reason="injected", error="injected fault", will_retry=True)
        return super().dispatch(event)


def test_a_retried_dispatch_publishes_its_comment_human_once(loop: Loop) -> None:
    from the_loop.routing.router import Router

    harness = loop.spawn()
    event = dana_comment("please also update the changelog", 77)
    router = Router(loop.config, FailingOnce(loop.config, runner=loop.runner))
    assert router.handle(event).status == "failed"
    assert router.handle(event).status == "delivered"  # the inbox's retry of the same event
    harness.wait_for_submitted(2)
    published = [p for p in loop.slack.posts() if "update the changelog" in p.params.get("text", "")]
    assert len(published) == 1
    other = event.model_copy(update={"dedupe_key": "fake:comment:78", "body": "and the readme"})
    router.handle(other)
    assert [p for p in loop.slack.posts() if "and the readme" in p.params.get("text", "")]  # a new event still posts


def test_a_failed_claim_holds_the_thread_cursor_before_that_message(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = loop.spawn()
    channel, thread = loop.thread()
    first = loop.slack.add_message(channel, user=DANA, text="message A", thread_ts=thread)
    loop.slack.add_message(channel, user=DANA, text="message B", thread_ts=thread)
    put = Inbox.put

    def failing_put(self: Inbox, key: str, entry: Any) -> Any:  # the injected fault: A's inbox write fails
        if key.endswith(first):
            raise OSError("disk full")
        return put(self, key, entry)

    monkeypatch.setattr(Inbox, "put", failing_put)
    assert loop.poll()["accepted"] == 0
    assert channels.cursor(loop.config, "slack", REF, thread) == ""  # not moved past A
    monkeypatch.setattr(Inbox, "put", put)
    assert loop.poll()["accepted"] == 2
    loop.route()
    pasted = harness.wait_for_submitted(3)[1:]
    assert "message A" in pasted[0] and "message B" in pasted[1]


def test_a_slow_root_post_never_holds_up_a_reply_claim(loop: Loop) -> None:
    loop.spawn()
    channel, thread = loop.thread()
    loop.slack.delays["chat.postMessage"] = 2.0
    opener = threading.Thread(
        target=channels.open_conversation,
        args=(loop.config, loop.channel(), parse_ref("fake:octo/repo#16"), "event"),
    )
    opener.start()
    try:
        time.sleep(0.3)  # the root post is under way (the fake answers it after 2 s)
        ts = loop.slack.add_message(channel, user=DANA, text="quick one", thread_ts=thread)
        message = InboundMessage(channel_id=channel, thread_id=thread, message_id=ts, author_id=DANA, text="quick one")
        started = time.monotonic()
        later: list[Any] = []
        assert channels.accept(loop.config, loop.channel(), message, "socket", bot_id=BOT_USER, later=later.append)
        claim_seconds = time.monotonic() - started
        assert opener.is_alive()  # the root was still being posted during the claim
    finally:
        opener.join()
    assert claim_seconds < 1.0
    assert channels.binding(loop.config, "slack", "fake:octo/repo#16") is not None


def test_closing_a_work_item_with_no_conversation_opens_none(loop: Loop) -> None:
    from the_loop.sessions import closing

    loop.slack.fail("chat.postMessage", 500, times=1)
    loop.spawn()  # tracked, but its root failed: no conversation
    assert loop.binding() is None
    asked = len(loop.slack.posts())
    closing.work_item_ended(loop.config, REF, reason="issue-closed", actor="", authorized=False, source="webhook")
    assert len(loop.slack.posts()) == asked and loop.binding() is None
    assert loop.events("work_item.ended")
    assert not channel_outbox.pending_for(loop.config, REF, "slack")
