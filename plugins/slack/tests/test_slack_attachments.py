"""Attachments on a Slack reply (channels-slack.md §2.9 item 50, issue-416): metadata carried through the inbox,
fetched only when the reply is delivered, saved under ``local/attachments/<slug>/`` and pasted as kinds + paths.
Real slack-sdk against the fake Slack, real tmux, the fake harness; the host checks also against a mock transport."""

from __future__ import annotations

import httpx
import pytest
from fake_slack import Server
from slack_world import BOT_TOKEN, DANA, REF, Loop

from the_loop.channels import attachments
from the_loop.interfaces import ChannelError
from the_loop.refs import parse_ref
from the_loop_slack.files import allowed, fetch

STRANGER = "U0STRANGER"


def folder(loop: Loop):  # type: ignore[no-untyped-def]
    return attachments.directory(loop.config, parse_ref(REF))


def reply_with(loop: Loop, files: list[dict], user: str = DANA, text: str = "see attached") -> None:
    channel, thread = loop.thread()
    loop.slack.add_message(channel, user=user, text=text, thread_ts=thread, files=files)


def test_a_slack_reply_with_two_files_puts_both_paths_in_the_pane_and_the_files_on_disk(loop: Loop) -> None:
    harness = loop.spawn()
    png = loop.server.add_file("F0SHOT01", "screen shot.png", b"\x89PNG-bytes", "image/png")
    log = loop.server.add_file("F0LOG002", "build.log", b"line 1\nline 2\n", "text/plain")
    reply_with(loop, [png, log])
    assert loop.poll()["accepted"] == 1
    assert loop.route() == 1
    pasted = harness.wait_for_submitted(2)[-1]
    shot, build = folder(loop) / "F0SHOT01-screen shot.png", folder(loop) / "F0LOG002-build.log"
    assert shot.read_bytes() == b"\x89PNG-bytes" and build.read_bytes() == b"line 1\nline 2\n"
    assert "Attached files (untrusted, saved by the-loop, not opened)" in pasted
    assert f"image/png {shot}" in pasted and f"text/plain {build}" in pasted
    mirrored = loop.comments()[-1]
    assert "screen shot.png (https://example.slack.com/files/F0SHOT01)" in mirrored and "build.log" in mirrored
    [event] = loop.events("channel.attachments")
    assert (event["count"], event["fetched"], event["refused"], event["work_item"]) == (2, 2, 0, REF)
    assert "screen shot.png" not in str(event) and BOT_TOKEN not in str(loop.events())
    assert all(call.token == BOT_TOKEN for call in loop.slack.downloads)


def test_a_file_seen_twice_is_fetched_once(loop: Loop) -> None:
    harness = loop.spawn()
    png = loop.server.add_file("F0TWICE1", "a.png", b"png", "image/png")
    reply_with(loop, [png], text="first")
    loop.poll()
    loop.route()
    reply_with(loop, [png], text="again")
    loop.poll()
    loop.route()
    pasted = harness.wait_for_submitted(3)
    assert all(str(folder(loop) / "F0TWICE1-a.png") in text for text in pasted[1:])
    assert len(loop.slack.downloads) == 1


def test_more_than_ten_files_fetches_ten_and_names_the_rest(loop: Loop) -> None:
    harness = loop.spawn()
    files = [loop.server.add_file(f"F0MANY{n:02d}", f"f{n}.txt", b"x", "text/plain") for n in range(12)]
    reply_with(loop, files)
    loop.poll()
    loop.route()
    pasted = harness.wait_for_submitted(2)[-1]
    assert len(loop.slack.downloads) == 10 and len(list(folder(loop).iterdir())) == 10
    assert "not fetched (more than 10 files): f10.txt" in pasted and "f11.txt" in pasted
    [event] = loop.events("channel.attachments")
    assert (event["count"], event["fetched"], event["named"]) == (12, 10, 2)


def test_an_oversized_file_is_refused_by_declared_size_or_by_its_body(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attachments, "MAX_BYTES", 8)
    harness = loop.spawn()
    declared = loop.server.add_file("F0BIG001", "big.bin", b"0123456789")
    liar = {**loop.server.add_file("F0LIAR01", "liar.bin", b"0123456789abc"), "size": 4}
    reply_with(loop, [declared, liar])
    loop.poll()
    loop.route()
    pasted = harness.wait_for_submitted(2)[-1]
    assert [call.method for call in loop.slack.downloads] == ["/files/F0LIAR01/liar.bin"]  # the declared one: never
    assert "not fetched (refused): big.bin" in pasted and "not fetched (refused): liar.bin" in pasted
    assert not folder(loop).exists() or not list(folder(loop).iterdir())
    [event] = loop.events("channel.attachments")
    assert (event["fetched"], event["refused"]) == (0, 2)


def test_a_redirect_to_another_host_is_refused(loop: Loop) -> None:
    harness = loop.spawn()
    moved = loop.server.add_file("F0MOVED1", "moved.png", b"png", "image/png")
    loop.slack.redirects["/files/F0MOVED1/moved.png"] = "https://evil.example/steal"
    reply_with(loop, [moved])
    loop.poll()
    loop.route()
    assert "not fetched (refused): moved.png" in harness.wait_for_submitted(2)[-1]
    assert len(loop.slack.downloads) == 1


def test_a_hostile_name_is_sanitised_inside_the_directory(loop: Loop) -> None:
    harness = loop.spawn()
    hostile = loop.server.add_file("F0EVIL01", "../../.bashrc\x00\n.sh", b"echo hi", "text/x-sh")
    bad_id = {**loop.server.add_file("F0OK0001", "x.txt", b"x"), "id": "../../escape"}
    reply_with(loop, [hostile, bad_id])
    loop.poll()
    loop.route()
    pasted = harness.wait_for_submitted(2)[-1]
    [saved] = list(folder(loop).iterdir())
    assert saved.parent == folder(loop) and saved.name.startswith("F0EVIL01-") and ".." not in saved.name
    assert "\x00" not in saved.name and "\n" not in saved.name and saved.read_bytes() == b"echo hi"
    assert f"text/x-sh {saved}" in pasted and "not fetched (refused): x.txt" in pasted


def test_a_reply_from_an_unauthorized_member_fetches_nothing(loop: Loop) -> None:
    loop.spawn()
    reply_with(loop, [loop.server.add_file("F0STRNG1", "a.png", b"png")], user=STRANGER)
    assert loop.poll()["accepted"] == 0
    assert loop.route() == 0
    assert loop.slack.downloads == [] and not folder(loop).exists()
    assert loop.events("channel.attachments") == []


def test_attachment_metadata_survives_the_inbox_round_trip(loop: Loop) -> None:
    from the_loop.inbox import Inbox
    from the_loop.models import InboundEvent

    loop.spawn()
    reply_with(loop, [loop.server.add_file("F0TRIP01", "a.png", b"png", "image/png")])
    loop.poll()
    [entry] = Inbox.for_config(loop.config).pending()
    [file] = InboundEvent.model_validate(entry.data["event"]).attachments
    assert file["id"] == "F0TRIP01" and file["mimetype"] == "image/png" and file["size"] == 3
    assert file["url"].endswith("/files/F0TRIP01/a.png?download=1") and loop.slack.downloads == []


# ------------------------------------------------------------------------------------ the transport's checks


def recorder(answer: httpx.Response | None = None) -> tuple[list[httpx.Request], httpx.MockTransport]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer if answer is not None else httpx.Response(200, content=b"ok")

    return seen, httpx.MockTransport(handle)


BASE = "https://slack.com/api/"


@pytest.mark.parametrize(
    "url",
    [
        "https://evil.example/files/F1/a.png",
        "http://files.slack.com/files-pri/T1-F1/a.png",  # http only for the configured base's host
        "https://files.slack.com.evil.example/a.png",
        "https://user:pw@files.slack.com/a.png",
        "ftp://files.slack.com/a.png",
    ],
)
def test_an_off_host_url_is_refused_before_any_request(url: str) -> None:
    seen, transport = recorder()
    with pytest.raises(ChannelError):
        fetch(url, BOT_TOKEN, 100, BASE, transport)
    assert seen == []


def test_slack_hosts_and_the_configured_base_are_allowed() -> None:
    assert allowed("https://files.slack.com/files-pri/T1-F1/a.png", BASE)
    assert allowed("https://acme.slack.com/files/a.png", BASE)
    assert allowed("http://127.0.0.1:5000/files/F1/a", "http://127.0.0.1:5000/api/")
    assert not allowed("http://127.0.0.1:5001/files/F1/a", "http://127.0.0.1:5000/api/")


def test_a_redirect_is_followed_by_hand_with_the_host_rechecked() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/first":
            return httpx.Response(302, headers={"Location": "https://files.slack.com/second"})
        if request.url.path == "/second":
            return httpx.Response(302, headers={"Location": "https://evil.example/third"})
        return httpx.Response(200, content=b"never")

    with pytest.raises(ChannelError, match="not allowed"):
        fetch("https://files.slack.com/first", BOT_TOKEN, 100, BASE, httpx.MockTransport(handle))
    assert [r.url.path for r in seen] == ["/first", "/second"]
    assert all(r.headers["Authorization"] == f"Bearer {BOT_TOKEN}" for r in seen)


def test_more_than_five_redirects_are_refused() -> None:
    seen, transport = recorder(httpx.Response(302, headers={"Location": "https://files.slack.com/loop"}))
    with pytest.raises(ChannelError, match="redirects"):
        fetch("https://files.slack.com/loop", BOT_TOKEN, 100, BASE, transport)
    assert len(seen) == 6


def test_a_body_beyond_the_cap_is_refused() -> None:
    _, transport = recorder(httpx.Response(200, content=b"x" * 11))
    with pytest.raises(ChannelError, match="cap"):
        fetch("https://files.slack.com/a", BOT_TOKEN, 10, BASE, transport)
    _, transport = recorder(httpx.Response(200, content=b"x" * 10))
    assert fetch("https://files.slack.com/a", BOT_TOKEN, 10, BASE, transport) == b"x" * 10


def test_the_channel_refuses_an_off_host_url_without_reading_the_token(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("THE_LOOP_SLACK_BOT_TOKEN")
    with pytest.raises(ChannelError, match="not allowed"):
        loop.channel().fetch_attachment("https://evil.example/a", 10)


def test_server_fixture_serves_files(fake_slack: Server) -> None:
    entry = fake_slack.add_file("F0SERVE1", "a.txt", b"abc")
    assert httpx.get(entry["url_private"], headers={"Authorization": f"Bearer {BOT_TOKEN}"}).content == b"abc"


def test_cleanup_keeps_the_saved_files(loop: Loop) -> None:
    from the_loop.sessions.operations import cleanup

    harness = loop.spawn()
    reply_with(loop, [loop.server.add_file("F0KEEP01", "keep.png", b"png", "image/png")])
    loop.poll()
    loop.route()
    harness.wait_for_submitted(2)
    cleanup(loop.config, parse_ref(REF), source="cli", actor="test", comment=False)
    assert (folder(loop) / "F0KEEP01-keep.png").read_bytes() == b"png"


def test_a_reply_to_a_paused_session_fetches_nothing(loop: Loop) -> None:
    from the_loop.sessions.operations import pause

    loop.spawn()
    assert pause(loop.config, parse_ref(REF), source="cli", actor="test", comment=False).ok
    reply_with(loop, [loop.server.add_file("F0PAUSE1", "a.png", b"png")])
    assert loop.poll()["accepted"] == 1
    loop.route()
    assert loop.slack.downloads == [] and not folder(loop).exists()  # a dropped reply has its files left alone
    assert any(e["reason"] == "undeliverable" for e in loop.events("channel.dropped"))
