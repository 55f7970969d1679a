"""The kickoff repository picker (channels-slack §2.8 item 49, D22, issue-349): real slack-sdk over Socket Mode
against the fake Slack, real PyGithub against the fake GitHub."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import test_slack_kickoff
import yaml
from fake_github import FakeGitHub
from slack_world import CHANNEL, DANA, Loop
from test_slack_kickoff import REPOS, baseline, drops, replies, rewrite

from the_loop.config import load_config
from the_loop.interfaces import Press
from the_loop.testing import wait_for

ERIN = "U0ERIN"  # allow-listed too, but not the kickoff's author
kick = test_slack_kickoff.kick  # the fixture: the loop with GitHub, declared repositories and the create grant


def _allow_erin(loop: Loop) -> None:
    path = loop.config.ref.path
    document = yaml.safe_load(path.read_text())
    document["routing"]["authorizedUsers"].append({"name": "erin", "slack": ERIN})
    path.write_text(yaml.safe_dump(document))
    loop.config = load_config(path, loop.config.host)


@pytest.fixture
def repositories() -> list[str]:
    return REPOS  # a test parametrizes it to declare more


@pytest.fixture
def socket_kick(kick: tuple[Loop, FakeGitHub], repositories: list[str]) -> Iterator[tuple[Loop, FakeGitHub]]:
    """The kickoff loop in socket mode with its listener running (and erin on the allow-list)."""
    from the_loop import channels

    loop, gh = kick
    repos = repositories
    for repo in repos:
        gh.add_repo(repo)
    loop.server.start_socket()
    loop.reload(read={"mode": "socket"})
    rewrite(loop, {"repositories": repos, **gh.config()})
    _allow_erin(loop)
    baseline(loop)
    stop = threading.Event()
    thread = threading.Thread(target=channels.listen, args=(loop.config, loop.channel(), stop.is_set), daemon=True)
    thread.start()
    try:
        assert loop.server.socket is not None
        wait_for(lambda: loop.server.socket.clients, timeout=10)  # type: ignore[union-attr]
        yield loop, gh
    finally:
        stop.set()
        thread.join(10)


def _push(loop: Loop, text: str, **extra: Any) -> str:
    """A top-level message written and pushed over the socket; its ts once its picker (or answer) is posted."""
    socket = loop.server.socket
    assert socket is not None
    ts = loop.slack.add_message(CHANNEL, user=DANA, text=text, **extra)
    event = {"type": "message", "channel": CHANNEL, "user": DANA, "text": text, "ts": ts, **extra}
    assert socket.wait_acked(socket.send_event(event))
    wait_for(lambda: replies(loop, ts), timeout=10)
    return ts


def _picker(loop: Loop, ts: str) -> dict[str, Any]:
    [posted] = [m for m in loop.slack.channels[CHANNEL] if m.get("thread_ts") == ts and m.get("blocks")]
    return posted


def _pending(loop: Loop) -> dict[str, Any]:
    from the_loop.channels.conversations import _shared

    return _shared(loop.config, "slack").get("pending") or {}


def _press(loop: Loop, posted: dict[str, Any], user: str, value: str) -> None:
    socket = loop.server.socket
    assert socket is not None
    assert socket.wait_acked(socket.press(CHANNEL, posted, user, value))


def test_d22_a_picker_is_posted_another_member_is_refused_and_two_presses_open_one_issue(
    socket_kick: tuple[Loop, FakeGitHub],
) -> None:
    loop, gh = socket_kick
    ts = _push(loop, "flaky teardown on CI")
    posted = copy.deepcopy(_picker(loop, ts))  # as the members saw it: a second press may race the first's update
    [actions] = [b for b in posted["blocks"] if b["type"] == "actions"]
    ids = [(e["action_id"], e["value"]) for e in actions["elements"]]
    assert ids == [(f"the-loop:kickoff-repo:{i}", repo) for i, repo in enumerate(REPOS)]  # ≤5: buttons
    from the_loop.state import PENDING_FIELDS

    assert ts in _pending(loop) and _pending(loop)[ts]["author"] == DANA
    assert tuple(_pending(loop)[ts]) == PENDING_FIELDS  # exactly the declared shape
    [asked] = loop.events("channel.kickoff_asked")
    assert asked["message"] == ts and asked["options"] == 3 and "text" not in asked
    assert "kickoff-no-target" not in drops(loop)

    _press(loop, posted, ERIN, "octo/api")
    wait_for(lambda: "not-your-kickoff" in drops(loop), timeout=10)
    assert ts in _pending(loop) and not gh.calls("POST")

    _press(loop, posted, DANA, "octo/api")
    _press(loop, posted, DANA, "octo/api")
    wait_for(lambda: "no-pending-kickoff" in drops(loop), timeout=10)
    assert [v.title for k, v in gh.items.items() if k[0] == "octo/api"] == ["flaky teardown on CI"]  # once
    assert len(gh.items) == 1 and ts not in _pending(loop)
    [created] = loop.events("channel.created")
    assert created["outcome"] == "picked" and created["repository"] == "octo/api"
    assert loop.binding(created["work_item"])["thread"] == ts  # type: ignore[index]
    [update] = loop.slack.posts("chat.update")
    assert update.params["ts"] == posted["ts"] and created["work_item"] in update.params["text"]
    dropped = [d for d in loop.events("channel.dropped") if d["reason"] in ("not-your-kickoff", "no-pending-kickoff")]
    assert all("text" not in d and "value" not in d for d in dropped)  # ids only


MANY = [*REPOS, *(f"octo/r{n}" for n in range(4))]


@pytest.mark.parametrize("repositories", [MANY])
def test_more_than_five_repositories_are_one_select_and_a_kickoff_with_files_names_them_unfetched(
    socket_kick: tuple[Loop, FakeGitHub],
) -> None:
    loop, gh = socket_kick
    shared = loop.server.add_file("F1", "trace.log", b"secret bytes")
    ts = _push(loop, "octo/nope: broken build", files=[shared])
    [actions] = [b for b in _picker(loop, ts)["blocks"] if b["type"] == "actions"]
    [select] = actions["elements"]
    assert select["type"] == "static_select" and select["action_id"] == "the-loop:kickoff-repo"
    assert [o["value"] for o in select["options"]] == MANY
    _press(loop, _picker(loop, ts), DANA, "octo/r2")
    wait_for(lambda: loop.events("channel.created"), timeout=10)
    [item] = [v for k, v in gh.items.items() if k[0] == "octo/r2"]
    assert item.title == "broken build"
    assert "trace.log (https://example.slack.com/files/F1)" in item.body
    assert not loop.slack.downloads  # named, never fetched


# ---------------------------------------------------------------------------------- refusals, one by one


def _ask(loop: Loop, gh: FakeGitHub, monkeypatch: pytest.MonkeyPatch, text: str = "no repository named") -> str:
    """A picker asked through the poll path, with the channel claiming to be socket-read (a press can reach it)."""
    from the_loop_slack.channel import SlackChannel

    monkeypatch.setattr(SlackChannel, "read_mode", lambda self: "socket")
    baseline(loop)
    ts = loop.slack.add_message(CHANNEL, user=DANA, text=text)
    loop.poll()
    assert ts in _pending(loop)
    return ts


def _answer(loop: Loop, ts: str, value: str, user: str = DANA) -> str:
    from the_loop import channels

    return channels.answer_press(loop.config, loop.channel(), Press(CHANNEL, ts, "1.0", user, "kickoff-repo", value))


def test_an_expired_or_unreadable_question_is_refused_no_pending_kickoff(
    kick: tuple[Loop, FakeGitHub], monkeypatch: pytest.MonkeyPatch, mocker: Any
) -> None:
    from the_loop.channels import kickoff

    loop, gh = kick
    ts = _ask(loop, gh, monkeypatch)
    mocker.patch.object(kickoff, "clock", return_value=kickoff.clock() + 86400 + 1)
    assert _answer(loop, ts, "octo/api") == "no-pending-kickoff"
    assert ts not in _pending(loop) and not gh.calls("POST")  # forgotten once expired

    mocker.stopall()
    second = loop.slack.add_message(CHANNEL, user=DANA, text="another one")
    loop.poll()
    path = loop.config.state.root / "channels" / "slack.json"
    data = json.loads(path.read_text())
    data["pending"][second]["asked"] = "yesterday-ish"
    path.write_text(json.dumps(data))
    assert _answer(loop, second, "octo/api") == "no-pending-kickoff"  # fail closed
    assert not gh.calls("POST")


def test_a_value_not_offered_or_no_longer_declared_is_refused_undeclared_repository(
    kick: tuple[Loop, FakeGitHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, gh = kick
    ts = _ask(loop, gh, monkeypatch)
    assert _answer(loop, ts, "octo/elsewhere") == "undeclared-repository"
    rewrite(loop, {"repositories": ["octo/api"]})
    assert _answer(loop, ts, "acme/api") == "undeclared-repository"  # offered, but no longer declared
    assert ts in _pending(loop) and not gh.calls("POST")
    assert drops(loop)[-2:] == ["undeclared-repository", "undeclared-repository"]


def test_a_failed_create_restores_the_question_so_the_author_can_press_again(
    kick: tuple[Loop, FakeGitHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, gh = kick
    ts = _ask(loop, gh, monkeypatch)
    before = _pending(loop)[ts]
    gh.fault("POST", r".*/issues", status=422)
    assert _answer(loop, ts, "octo/api") == "create-failed"
    assert _pending(loop)[ts] == before
    gh.clear_faults()
    assert _answer(loop, ts, "octo/api") == "created" and ts not in _pending(loop)


def test_an_ask_that_cannot_be_posted_is_forgotten_and_a_second_ask_is_refused(
    kick: tuple[Loop, FakeGitHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    from the_loop.channels import kickoff

    loop, gh = kick
    ts = _ask(loop, gh, monkeypatch)
    message = kickoff.InboundMessage(CHANNEL, ts, ts, DANA, "again")
    assert kickoff._ask(loop.config, loop.channel(), message, "again", REPOS) == "kickoff-already-asked"
    loop.slack.fail("chat.postMessage", 500)
    later = loop.slack.add_message(CHANNEL, user=DANA, text="no repository here either")
    loop.poll()
    assert drops(loop)[-1] == "kickoff-ask-failed" and later not in _pending(loop)


def test_at_most_fifty_questions_wait_the_oldest_dropped(
    kick: tuple[Loop, FakeGitHub], monkeypatch: pytest.MonkeyPatch
) -> None:
    from the_loop.channels import picker

    loop, gh = kick
    first = _ask(loop, gh, monkeypatch)
    for n in range(picker.PENDING_CAP):
        message = picker.InboundMessage(CHANNEL, f"1800000000.{n:06d}", f"1800000000.{n:06d}", DANA, "")
        assert picker.park(loop.config, "slack", message, "x", REPOS)
    pending = _pending(loop)
    assert len(pending) == picker.PENDING_CAP and first not in pending and "1800000000.000049" in pending


def test_in_poll_mode_there_is_no_picker_only_the_fixed_refusal(kick: tuple[Loop, FakeGitHub]) -> None:
    loop, _ = kick
    baseline(loop)
    ts = loop.slack.add_message(CHANNEL, user=DANA, text="names no repository")
    loop.poll()
    [answer] = replies(loop, ts)
    assert "names no repository and no default is set" in answer
    assert drops(loop)[-1] == "kickoff-no-target" and not _pending(loop)
    assert not loop.events("channel.kickoff_asked")


def test_a_resolved_kickoff_with_files_names_them_and_fetches_nothing(kick: tuple[Loop, FakeGitHub]) -> None:
    loop, gh = kick
    baseline(loop)
    shared = loop.server.add_file("F9", "screen.png", b"pixels", "image/png")
    loop.slack.add_message(CHANNEL, user=DANA, text="slim-gym: layout broken", files=[shared])
    assert loop.poll()["kickoff_created"] == 1
    [item] = gh.items.values()
    assert "screen.png (https://example.slack.com/files/F9)" in item.body and item.title == "layout broken"
    assert not loop.slack.downloads


def test_a_press_on_another_control_or_a_payload_without_ids_is_no_kickoff_press() -> None:
    from the_loop_slack.picker import press_of

    base = {
        "type": "block_actions",
        "user": {"id": DANA},
        "channel": {"id": CHANNEL},
        "container": {"message_ts": "2.0"},
        "message": {"ts": "2.0", "thread_ts": "1.0"},
    }
    pick = {"action_id": "the-loop:kickoff-repo:1", "value": "octo/api"}
    assert press_of({**base, "actions": [pick]}) == Press(CHANNEL, "1.0", "2.0", DANA, "kickoff-repo", "octo/api")
    select = {"action_id": "the-loop:kickoff-repo", "selected_option": {"value": "acme/api"}}
    assert press_of({**base, "actions": [select]}).value == "acme/api"  # type: ignore[union-attr]
    assert press_of({**base, "actions": [{"action_id": "the-loop:approve", "value": "approved"}]}) is None
    assert press_of({**base, "message": {"ts": "2.0"}, "actions": [pick]}) is None  # no kickoff thread
    assert press_of({"type": "view_submission"}) is None
