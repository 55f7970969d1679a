"""Steering in the Slack thread: a decision prompt and a budget warning reach the work item's thread (real
slack-sdk against the fake Slack Web API, real tmux, the fake harness), and an authorized ``the-loop answer`` or
``the-loop interrupt`` in the thread goes onto the ticket, where the ticket's own path acts on it."""

from __future__ import annotations

import json

from slack_world import DANA, REF, Loop

from the_loop.models import WorkEvent
from the_loop.sessions.steering.watch import Watch
from the_loop.testing import wait_for


def test_a_decision_prompt_is_posted_into_the_thread_once_with_its_options(loop: Loop) -> None:
    loop.reload(subscribe=["session.blocked"])
    loop.spawn()
    _, thread = loop.thread()
    assert loop.dispatcher().dispatch(WorkEvent(delivery_id="ask", work_item=REF, text="/ask deploy")).ok
    watch = Watch()

    wait_for(lambda: (watch.tick(loop.config, loop.runner), loop.events("session.blocked"))[1], timeout=10)
    watch.tick(loop.config, loop.runner)

    posted = [call for call in loop.slack.posts() if call.params.get("thread_ts") == thread]
    [prompt] = [call for call in posted if "deploy" in json.dumps(call.params)]
    shown = json.dumps(prompt.params)
    assert "Waiting for a decision" in shown and "1. Yes" in shown and "the-loop answer" in shown


def test_an_answer_and_an_interrupt_in_the_thread_are_relayed_onto_the_ticket(loop: Loop) -> None:
    loop.reload(publish=["work-item.reply", "control.command"])
    loop.spawn()
    channel, thread = loop.thread()
    for text in ("the-loop answer 1", "the-loop interrupt: use the other API"):
        loop.slack.add_message(channel, user=DANA, text=text, thread_ts=thread)
        loop.poll()
        relayed = loop.comments()[-1]
        assert relayed.startswith(text) and f"(relayed from dana (slack:{DANA}))" in relayed
