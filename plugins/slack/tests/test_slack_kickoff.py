"""Kickoff (D §2.8): a top-level message in the central channel opens an issue, through real slack-sdk and real
PyGithub against the fake Slack and the fake GitHub. Scenario ids are from channels-slack.md §7."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from fake_github import TOKEN, FakeGitHub
from fake_slack import BOT_USER
from slack_world import CHANNEL, DANA, Loop

from the_loop import events
from the_loop.config import ConfigError, load_config

STRANGER = "U0STRANGER"
REPOS = ["octo/slim-gym", "octo/api", "acme/api"]


@pytest.fixture
def kick(loop: Loop, plugin_host: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Loop, FakeGitHub]]:
    import the_loop_github.plugin

    plugin_host.register(the_loop_github.plugin, "github")
    monkeypatch.setenv("GH_TOKEN", TOKEN)
    with FakeGitHub() as gh:
        for repo in REPOS:
            gh.add_repo(repo)
        loop.reload(publish=["work-item.reply", "work-item.create"], kickoff={"labels": ["the-loop"]})
        rewrite(loop, {"repositories": REPOS, **gh.config()})
        yield loop, gh


def rewrite(loop: Loop, extra: dict[str, Any]) -> None:
    path = loop.config.ref.path
    document = {**yaml.safe_load(path.read_text()), **extra}
    path.write_text(yaml.safe_dump(document))
    loop.config = load_config(path, loop.config.host)
    events.configure(loop.config.state.events_path, "test")


def baseline(loop: Loop) -> None:
    loop.slack.add_message(CHANNEL, user=DANA, text="octo/api: an old message")
    assert loop.poll().get("kickoff_baselined") == 1


def replies(loop: Loop, ts: str) -> list[str]:
    return [c.params["text"] for c in loop.slack.posts() if c.params.get("thread_ts") == ts]


def drops(loop: Loop) -> list[str]:
    return [d["reason"] for d in loop.events("channel.dropped")]


def test_d20_a_kickoff_message_in_the_central_channel_creates_an_issue_with_the_label_and_a_bound_thread(
    kick: tuple[Loop, FakeGitHub],
) -> None:
    loop, gh = kick
    baseline(loop)
    ts = loop.slack.add_message(CHANNEL, user=DANA, text="slim-gym: flaky teardown\n\nit fails on CI, mail a@b.example")
    assert loop.poll()["kickoff_created"] == 1
    [(key, item)] = [(k, v) for k, v in gh.items.items() if k[0] == "octo/slim-gym"]
    assert item.title == "flaky teardown" and item.labels == ["the-loop"]
    assert "the-loop:agent-comment" not in item.body and "a@b.example" not in item.body  # armable, scrubbed
    assert f"slack:{DANA}" in item.body and '"type": "work-item.create"' in item.body
    ref = f"github:octo/slim-gym#{key[1]}"
    bound = loop.binding(ref)
    assert bound is not None and bound["thread"] == ts and bound["origin"] == "kickoff" and bound["channel"] == CHANNEL
    assert any(ref in text for text in replies(loop, ts))
    [created] = loop.events("channel.created")
    assert created["work_item"] == ref and created["outcome"] == "resolved" and "text" not in created
    assert [c.params["name"] for c in loop.slack.posts("reactions.add")] == ["eyes", "white_check_mark"]
    assert loop.poll().get("kickoff_created") == 0  # the cursor moved: never a second issue


def test_d21_the_first_read_records_the_newest_message_and_creates_nothing(kick: tuple[Loop, FakeGitHub]) -> None:
    loop, gh = kick
    loop.slack.add_message(CHANNEL, user=DANA, text="octo/api: old one")
    newest = loop.slack.add_message(CHANNEL, user=DANA, text="octo/api: old two")
    assert loop.poll().get("kickoff_baselined") == 1
    from the_loop.channels.conversations import _shared

    assert _shared(loop.config, "slack")["cursors"][f"channel:{CHANNEL}"] == newest
    assert not gh.calls("POST")
    assert not loop.events("channel.created")


def test_an_unknown_repository_is_refused_in_the_thread_with_the_declared_names(kick: tuple[Loop, FakeGitHub]) -> None:
    loop, gh = kick
    baseline(loop)
    ts = loop.slack.add_message(CHANNEL, user=DANA, text="octo/nope: do the thing secretly")
    loop.poll()
    [answer] = replies(loop, ts)
    assert "`octo/nope` is not a declared repository" in answer
    assert "`octo/slim-gym`" in answer and "`acme/api`" in answer and "secretly" not in answer
    assert drops(loop)[-1] == "kickoff-unknown-repo" and not gh.calls("POST")


def test_an_ambiguous_repository_is_refused(kick: tuple[Loop, FakeGitHub]) -> None:
    loop, gh = kick
    baseline(loop)
    ts = loop.slack.add_message(CHANNEL, user=DANA, text="api: which one")
    loop.poll()
    assert "`api` matches more than one declared repository" in replies(loop, ts)[0]
    assert drops(loop)[-1] == "kickoff-ambiguous-repo" and not gh.calls("POST")


def test_an_unauthorized_member_and_the_bot_are_dropped_silently(kick: tuple[Loop, FakeGitHub]) -> None:
    loop, gh = kick
    baseline(loop)
    stranger = loop.slack.add_message(CHANNEL, user=STRANGER, text="slim-gym: let me in")
    mine = loop.slack.add_message(CHANNEL, user=BOT_USER, text="slim-gym: echo")
    loop.poll()
    assert drops(loop) == ["unauthorized-actor", "self-authored"]
    assert not replies(loop, stranger) and not replies(loop, mine)
    assert not loop.slack.posts("reactions.add") and not gh.calls("POST")


def test_without_a_prefix_the_fallback_repository_is_used_and_a_bare_word_is_prose(
    kick: tuple[Loop, FakeGitHub],
) -> None:
    loop, gh = kick
    loop.reload(kickoff={"repo": "octo/api", "labels": []})
    rewrite(loop, {"repositories": REPOS, **gh.config()})
    baseline(loop)
    loop.slack.add_message(CHANNEL, user=DANA, text="Note: # the docs are stale")
    assert loop.poll()["kickoff_created"] == 1
    [item] = [v for k, v in gh.items.items() if k[0] == "octo/api"]
    assert item.title == "Note: # the docs are stale"
    assert loop.events("channel.created")[0]["outcome"] == "fallback"


def test_no_grant_reads_nothing_and_an_undeclared_fallback_is_a_config_error(kick: tuple[Loop, FakeGitHub]) -> None:
    loop, gh = kick
    loop.reload(publish=["work-item.reply"], kickoff={"repo": "octo/other"})
    with pytest.raises(ConfigError, match=r"channels\.slack\.kickoff\.repo"):
        rewrite(loop, {"repositories": REPOS, **gh.config()})


def test_the_prefix_resolves_by_last_segments_and_every_outcome_has_its_name() -> None:
    from the_loop.channels.kickoff import refusal, resolve, title_of

    declared = ["ghe.example/octo/slim-gym", "octo/api", "acme/api"]
    assert resolve("Slim-Gym: fix it", declared, "")[:2] == ("resolved", "ghe.example/octo/slim-gym")
    assert resolve("ghe.example/octo/slim-gym: fix", declared, "")[0] == "resolved"
    assert resolve("acme/api: x", declared, "")[1] == "acme/api"
    assert resolve("api: x", declared, "")[0] == "ambiguous-repo"
    assert resolve("nope/repo: x", declared, "")[:3] == ("unknown-repo", "", "nope/repo")
    assert resolve("word: prose", declared, "")[0] == "no-target"
    assert resolve("word: prose", declared, "octo/api")[:2] == ("fallback", "octo/api")
    assert resolve("octo/api:", declared, "")[0] == "empty-message"
    assert resolve("   \n ", declared, "octo/api")[0] == "empty-message"
    assert title_of("\n## " + "t" * 100) == "t" * 80
    many = [f"o/r{n}" for n in range(15)]
    assert refusal("no-target", "", many).count("`o/r") == 12 and "…and 3 more" in refusal("no-target", "", many)


def test_a_top_level_message_pushed_over_socket_mode_kicks_off_too(kick: tuple[Loop, FakeGitHub]) -> None:
    import threading

    from the_loop import channels
    from the_loop.testing import wait_for

    loop, gh = kick
    loop.server.start_socket()
    loop.reload(read={"mode": "socket"})
    rewrite(loop, {"repositories": REPOS, **gh.config()})
    baseline(loop)  # else the connect-time catch-up would baseline at the clock, past the fake's old ts
    stop = threading.Event()
    thread = threading.Thread(target=channels.listen, args=(loop.config, loop.channel(), stop.is_set), daemon=True)
    thread.start()
    try:
        socket = loop.server.socket
        assert socket is not None
        wait_for(lambda: socket.clients, timeout=10)
        ts = loop.slack.add_message(CHANNEL, user=DANA, text="slim-gym: pushed")
        event = {"type": "message", "channel": CHANNEL, "user": DANA, "text": "slim-gym: pushed", "ts": ts}
        assert socket.wait_acked(socket.send_event(event))
        wait_for(lambda: loop.events("channel.created"), timeout=10)
        assert [v.title for k, v in gh.items.items() if k[0] == "octo/slim-gym"] == ["pushed"]  # once, either way
    finally:
        stop.set()
        thread.join(10)
