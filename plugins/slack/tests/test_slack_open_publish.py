"""Opening a work item's thread and publishing into it (D §2.2 to §2.4): slack-sdk's real WebClient against the fake
Slack Web API, real tmux and the fake harness. Scenario ids are from channels-slack.md §7."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path
from typing import Any

from slack_world import BOT_TOKEN, CHANNEL, REF, Loop, config_in_process

from the_loop import channels
from the_loop.channels import outbox as channel_outbox
from the_loop.refs import parse_ref


def roots(loop: Loop) -> list[Any]:
    return [call for call in loop.slack.posts() if "thread_ts" not in call.params]


def test_d1_an_accepted_start_opens_exactly_one_root_before_the_checkout(loop: Loop) -> None:
    loop.spawn()
    [root] = roots(loop)
    assert root.params["channel"] == CHANNEL and root.token == BOT_TOKEN
    assert REF in json.dumps(root.params["blocks"])
    assert len(loop.slack.posts("chat.getPermalink")) == 1
    bound = loop.binding()
    assert bound is not None and bound["origin"] == "start" and bound["channel"] == CHANNEL
    portable = json.loads(loop.config.state.portable_record("fake-octo-repo-15").read_text())
    assert portable["channels"]["slack"]["thread"] == bound["thread"] and bound["permalink"].startswith("https://")
    [opened] = loop.events("channel.thread_opened")
    assert opened["work_item"] == REF and opened["origin"] == "start" and opened["thread"] == bound["thread"]
    assert len(loop.slack.posts()) == 1  # no reply is posted on open


def test_d2_a_repeat_open_makes_no_call_and_logs_nothing(loop: Loop) -> None:
    loop.spawn()
    calls, logged = len(loop.slack.calls), len(loop.events())
    bound = channels.open_conversation(loop.config, loop.channel(), parse_ref(REF), "start")
    channels.open_for_start(loop.config, parse_ref(REF))
    assert bound == loop.binding()
    assert len(loop.slack.calls) == calls and len(loop.events()) == logged


def test_d4_a_failed_root_at_start_never_stops_the_spawn_and_the_first_event_opens_it(loop: Loop) -> None:
    loop.slack.fail("chat.postMessage", 500, times=1)
    loop.spawn()  # spawned regardless
    [failed] = loop.events("channel.open_failed")
    assert failed["channel"] == "slack" and failed["work_item"] == REF and loop.binding() is None
    assert channels.publish(loop.config, "session.awaiting_input", REF, text="which colour?") == ["slack"]
    bound = loop.binding()
    assert bound is not None and bound["origin"] == "event"
    reply = loop.slack.posts()[-1]
    assert reply.params["thread_ts"] == bound["thread"] and "which colour?" in json.dumps(reply.params)


def test_d3_ask_records_the_question_on_the_ticket_before_it_reaches_the_thread(loop: Loop) -> None:
    loop.spawn()
    env = {**_env(loop), "THE_LOOP_WORK_ITEM": REF}
    done = subprocess.run(
        [sys.executable, "-m", "the_loop", "--config", str(loop.config.ref.path), "ask", "--question", "Tabs?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    comments = loop.comments()
    assert comments[-1].startswith("Tabs?") and "the-loop:agent-comment" in comments[-1]
    reply = loop.slack.posts()[-1]
    assert reply.params["thread_ts"] == loop.binding()["thread"]  # type: ignore[index]
    assert "Question from the agent" in json.dumps(reply.params["blocks"])
    asked = loop.events("session.awaiting_input")[-1]
    posted = loop.events("channel.posted")[-1]
    assert asked["ts"] <= posted["ts"] and posted["event_type"] == "session.awaiting_input"


def test_a_reset_forgets_the_thread_so_the_next_start_opens_a_new_one(loop: Loop) -> None:
    """Seed 004: reset is a clean wipe. The thread binding lives in the portable record's channels section, which a
    reset clears, so the work item's next session is announced in a new thread instead of continuing the old one."""
    from the_loop.sessions.closing import reset

    loop.spawn()
    first = loop.thread()
    report = reset(loop.config, REF, runner=loop.runner)
    assert "channels" in report.removed and loop.binding() is None
    loop.spawn()
    assert len(roots(loop)) == 2 and loop.thread() != first
    assert [e["origin"] for e in loop.events("channel.thread_opened")] == ["start", "start"]


def test_comment_publishes_comment_agent_and_a_long_text_stays_within_max_chars(loop: Loop) -> None:
    loop.reload(maxChars=300)
    loop.spawn()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "the_loop",
            "--config",
            str(loop.config.ref.path),
            "comment",
            "--work-item",
            REF,
            "--body",
            "word " * 400,
        ],
        env=_env(loop),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    reply = loop.slack.posts()[-1]
    assert len(reply.params["text"]) <= 300
    section = next(b for b in reply.params["blocks"] if b["type"] == "section")
    assert len(section["text"]["text"]) <= 300 and "shortened" in section["text"]["text"]
    assert loop.events("channel.posted")[-1]["event_type"] == "comment.agent"


def test_d7_an_unsubscribed_type_is_neither_posted_nor_queued(loop: Loop) -> None:
    loop.reload(subscribe=["session.awaiting_input"])
    loop.spawn()
    before = len(loop.slack.posts())
    assert channels.publish(loop.config, "comment.agent", REF, text="note") == []
    assert len(loop.slack.posts()) == before
    assert channel_outbox.backlog(loop.config.state) is None and not loop.events("channel.undelivered")


def test_d6_a_refused_post_is_queued_drained_late_and_the_queue_is_capped(loop: Loop) -> None:
    loop.spawn()
    loop.slack.fail("chat.postMessage", 200, error="invalid_auth")
    assert channels.publish(loop.config, "comment.agent", REF, text="one") == []
    data = json.loads(channel_outbox.outbox_path(loop.config).read_text())
    assert len(data["pending"]) == 1 and "invalid_auth" in loop.events("channel.undelivered")[0]["error"]
    loop.slack.heal()
    report = channels.drain(loop.config)
    assert report.delivered == 1 and channel_outbox.backlog(loop.config.state) is None
    [late] = loop.events("channel.delivered_late")
    assert late["attempts"] == 1 and late["work_item"] == REF
    assert "one" in json.dumps(loop.slack.posts()[-1].params)
    # past 200 the oldest goes
    for n in range(channel_outbox.CAP + 3):
        channel_outbox.queue(
            loop.config, ["slack"], {"eventType": "comment.agent", "workItem": REF, "text": str(n)}, "x"
        )
    pending = json.loads(channel_outbox.outbox_path(loop.config).read_text())["pending"]
    assert len(pending) == channel_outbox.CAP and {e["event"]["text"] for e in pending.values()} >= {"202"}
    assert "0" not in {e["event"]["text"] for e in pending.values()}
    assert len(loop.events("channel.undelivered_dropped")) == 3


def _open_in_process(config_path: str, env: dict[str, str], ready: Any) -> None:
    import os

    from the_loop import channels as core_channels

    config = config_in_process(config_path, env, "proc")
    ready.wait()
    core_channels.publish(config, "comment.agent", REF, text=f"from {os.getpid()}")


def test_d5_five_processes_publishing_the_first_event_make_one_root(loop: Loop) -> None:
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    env = _env(loop)
    processes = [
        context.Process(target=_open_in_process, args=(str(loop.config.ref.path), env, ready)) for _ in range(5)
    ]
    for process in processes:
        process.start()
    ready.set()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert len(roots(loop)) == 1
    thread = loop.binding()["thread"]  # type: ignore[index]
    replies = [call for call in loop.slack.posts() if "thread_ts" in call.params]
    assert len(replies) == 5 and {call.params["thread_ts"] for call in replies} == {thread}


def _env(loop: Loop) -> dict[str, str]:
    import os

    path = str(Path(__file__).parent)
    return {
        **os.environ,
        "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin",
        "PYTHONPATH": os.pathsep.join(filter(None, [path, os.environ.get("PYTHONPATH", "")])),
    }
