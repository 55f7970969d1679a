"""The GitHub webhook route over real HTTP: ``the-loop daemon run gh-webhook`` in a subprocess, signed deliveries of
real payloads sent with httpx (raw sockets where httpx would refuse the bytes), the inbox read from disk."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

import gh_payloads as g
import httpx
from fake_github import FakeGitHub

from the_loop.testing import free_port, wait_for

if TYPE_CHECKING:
    from gh_receiver import Receiver


def comment(number: int = 15, body: str = "please add tests", login: str = "octocat", **kwargs: Any) -> dict[str, Any]:
    return g.adapt(g.load("issue_comment.created"), number=number, body=body, login=login, **kwargs)


def raw_post(port: int, path: str, head: list[bytes], body: bytes) -> tuple[int, dict[str, Any]]:
    """One request written byte by byte (for header values httpx will not send); the status and JSON body."""
    lines = [f"POST {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", f"Content-Length: {len(body)}".encode()]
    request = b"\r\n".join([*lines, *head, b"Connection: close", b"", b""]) + body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_part, _, payload = data.partition(b"\r\n\r\n")
    return int(head_part.split(b" ", 2)[1]), json.loads(payload)


# ----------------------------------------------------------------------------------------------- signatures


def test_a1_a_wrong_signature_is_401_and_nothing_happens(receiver: Receiver, fake_github: FakeGitHub) -> None:
    response = receiver.post("issue_comment", comment(), delivery="d-a1", secret="not-the-secret")
    assert response.status_code == 401
    assert response.json() == {"status": "invalid signature"}
    [rejected] = receiver.events("webhook.rejected")
    assert (rejected["reason"], rejected["gh_event"], rejected["delivery_id"]) == (
        "invalid-signature",
        "issue_comment",
        "d-a1",
    )
    assert receiver.events("webhook.received") == []
    assert receiver.accepted_keys() == []
    assert fake_github.requests == []


def test_a1_missing_and_malformed_signatures_are_401(receiver: Receiver) -> None:
    body = g.encode(comment())
    good = g.headers("issue_comment", body)["X-Hub-Signature-256"]
    for value in (None, "", good.replace("sha256=", "sha1="), good.upper(), good[:-1], good + "0", "sha256="):
        response = receiver.post("issue_comment", body, headers={"X-Hub-Signature-256": value})
        assert response.status_code == 401, value
    assert receiver.accepted_keys() == []


def test_a2_a_non_ascii_signature_is_401_not_500(receiver: Receiver) -> None:
    body = g.encode(comment())
    head = [
        b"X-GitHub-Event: issue_comment",
        b"X-GitHub-Delivery: d-a2",
        b"X-Hub-Signature-256: sha256=\xff\xfe\xc3\xa9",
    ]
    status, answer = raw_post(receiver.port, "/gh-webhook", head, body)
    assert (status, answer) == (401, {"status": "invalid signature"})
    # the same length as a real signature, but not ASCII: compare_digest on str would raise
    valid = g.headers("issue_comment", body)["X-Hub-Signature-256"].encode()
    forged = valid[:-2] + "é".encode()
    status, _ = raw_post(receiver.port, "/gh-webhook", [*head[:2], b"X-Hub-Signature-256: " + forged], body)
    assert status == 401
    assert httpx.get(f"{receiver.url}/health").status_code == 200
    assert receiver.accepted_keys() == []
    assert not [r for r in receiver.events("server.rejected") if r.get("status") == 500]


def test_the_secret_is_read_from_the_configured_variable(start_receiver: Any, gh_env: Any) -> None:
    gh_env.env["OUR_HOOK_SECRET"] = "another-secret"
    receiver = start_receiver(secretEnv="OUR_HOOK_SECRET")
    assert receiver.post("issue_comment", comment()).status_code == 401  # signed with the default s3cret
    assert receiver.post("issue_comment", comment(), secret="another-secret").status_code == 202


def test_unsigned_deliveries_are_refused_unless_allowed(start_receiver: Any, gh_env: Any) -> None:
    receiver = start_receiver()
    assert receiver.post("issue_comment", comment(), secret=None).status_code == 401
    del gh_env.env["THE_LOOP_GH_WEBHOOK_SECRET"]
    receiver.process.terminate()
    receiver.process.wait(timeout=15)
    unsigned = start_receiver(allowUnsigned=True)
    response = unsigned.post("issue_comment", comment(), delivery="d-unsigned", secret=None)
    assert response.status_code == 202
    [received] = [r for r in unsigned.events("webhook.received") if r["delivery_id"] == "d-unsigned"]
    assert received["verified"] is False
    assert len(unsigned.accepted_keys()) == 1


# -------------------------------------------------------------------------------------------- bad requests


def test_a3_a_signed_body_that_is_not_json_is_400(receiver: Receiver) -> None:
    for body in (b"not json", b"\xff\xfe{}", b"[1, 2]", b'"text"', b"[" * 100_000, b'{"a": "\\ud800"}'):
        response = receiver.post("issue_comment", body)
        assert response.status_code == 400, body[:20]
        assert response.json() == {"status": "invalid payload"}
    rejected = receiver.events("webhook.rejected")
    assert {r["reason"] for r in rejected} == {"invalid-payload"}
    assert all(r["level"] == "error" for r in rejected)
    assert receiver.accepted_keys() == []
    assert receiver.healthy()


def test_a3_a_signed_ping_is_accepted_and_dropped(receiver: Receiver) -> None:
    response = receiver.post("ping", g.adapt(g.load("ping")), delivery="d-ping")
    assert response.status_code == 202
    assert response.json() == {"status": "accepted"}
    [dropped] = receiver.events("routing.dropped")
    assert (dropped["reason"], dropped["gh_event"], dropped["delivery_id"]) == ("disabled-event", "ping", "d-ping")
    assert dropped["level"] == "debug"
    assert receiver.accepted_keys() == []


def test_a_missing_delivery_id_is_400(receiver: Receiver) -> None:
    response = receiver.post("issue_comment", comment(), headers={"X-GitHub-Delivery": None})
    assert response.status_code == 400
    assert response.json() == {"status": "missing delivery id"}
    assert receiver.events("webhook.rejected")[0]["reason"] == "missing-delivery-id"
    assert receiver.accepted_keys() == []


def test_a_delivery_id_that_is_not_a_printable_token_is_400(receiver: Receiver) -> None:
    response = receiver.post("issue_comment", comment(), headers={"X-GitHub-Delivery": "two words"})
    assert response.status_code == 400
    assert response.json() == {"status": "invalid delivery id"}
    assert receiver.accepted_keys() == []


def test_an_empty_body_is_an_empty_payload(receiver: Receiver) -> None:
    response = receiver.post("issue_comment", b"")
    assert response.status_code == 202
    assert receiver.events("routing.dropped")[0]["reason"] == "ignored-action"  # {} has no action


def test_a22_a_forged_provider_is_dropped(receiver: Receiver) -> None:
    payload = comment()
    payload["x-the-loop-provider"] = "jira"
    response = receiver.post("issue_comment", payload, delivery="d-forged")
    assert response.status_code == 202
    [dropped] = receiver.events("routing.dropped")
    assert (dropped["reason"], dropped["delivery_id"], dropped["level"]) == ("forged-provider", "d-forged", "warning")
    assert receiver.accepted_keys() == []


def test_f6_an_ignored_action_is_accepted_and_dropped(receiver: Receiver) -> None:
    response = receiver.post("issues", g.adapt(g.load("issues.edited"), number=15))
    assert response.status_code == 202
    assert receiver.events("routing.dropped")[0]["reason"] == "ignored-action"
    assert receiver.accepted_keys() == []


def test_a_configured_event_list_filters(start_receiver: Any) -> None:
    receiver = start_receiver(events=["issues"])
    assert receiver.post("issue_comment", comment()).status_code == 202
    assert receiver.events("routing.dropped")[0]["reason"] == "disabled-event"
    assert receiver.post("issues", g.adapt(g.load("issues.opened"), number=15)).status_code == 202
    assert len(receiver.accepted_keys()) == 1


def test_the_route_path_is_configurable_and_a_trailing_slash_ignored(start_receiver: Any) -> None:
    receiver = start_receiver(path="/hooks/github/")
    assert receiver.post("issue_comment", comment(), path="/hooks/github").status_code == 202
    assert receiver.post("issue_comment", comment(), path="/gh-webhook").status_code == 404


# ------------------------------------------------------------------------------------------- the inbox


def test_an_accepted_delivery_is_in_the_inbox_before_the_202(receiver: Receiver) -> None:
    payload = comment()
    response = receiver.post("issue_comment", payload, delivery="d-accepted")
    entries = receiver.inbox()  # read right after the answer: the entry must already be on disk
    assert response.status_code == 202
    assert response.json() == {"status": "accepted"}
    [entry] = entries
    assert entry["key"] == f"github:comment:{payload['comment']['node_id']}"
    assert entry["entry"]["type"] == "inbound"
    assert (entry["entry"]["delivery_id"], entry["entry"]["work_items"]) == ("d-accepted", ["github:octo/repo#15"])
    event = entry["entry"]["event"]
    assert event["delivery_id"] == "d-accepted"
    assert event["work_items"] == ["github:octo/repo#15"]
    assert event["actor"]["id"] == "octocat" and event["body"] == "please add tests"
    assert "sender" not in json.dumps(event) and "user" not in event["excerpt"]["comment"]
    [received] = receiver.events("webhook.received")
    assert received == {
        **received,
        "gh_event": "issue_comment",
        "action": "created",
        "delivery_id": "d-accepted",
        "verified": True,
        "source": "gh-webhook",
    }


def test_a6_a_duplicate_delivery_makes_one_inbox_entry(receiver: Receiver) -> None:
    payload = comment()
    first = receiver.post("issue_comment", payload, delivery="d-dup")
    again = receiver.post("issue_comment", payload, delivery="d-dup")  # GitHub's "redeliver"
    other_id = receiver.post("issue_comment", payload, delivery="d-dup-2")  # the same comment, another delivery
    assert [r.status_code for r in (first, again, other_id)] == [202, 202, 202]
    assert len(receiver.accepted_keys()) == 1
    dropped = receiver.events("routing.dropped")
    assert [(r["reason"], r["delivery_id"]) for r in dropped] == [
        ("duplicate-delivery", "d-dup"),
        ("duplicate-delivery", "d-dup-2"),
    ]
    assert dropped[0]["dedupe_key"] == f"github:comment:{payload['comment']['node_id']}"
    assert len(receiver.events("webhook.received")) == 3


def test_events_without_an_object_are_keyed_by_delivery(receiver: Receiver) -> None:
    labeled = g.adapt(g.load("issues.labeled"), number=15, sender="octocat")
    receiver.post("issues", labeled, delivery="d-label-1")
    receiver.post("issues", labeled, delivery="d-label-2")
    assert sorted(receiver.accepted_keys()) == ["d-label-1", "d-label-2"]


def test_concurrent_deliveries_are_all_stored(receiver: Receiver) -> None:
    results: list[int] = []

    def send(start: int) -> None:
        with httpx.Client() as client:
            for number in range(start, start + 10):
                payload = g.new_comment(comment(number=number), 10_000 + number)
                results.append(receiver.post("issue_comment", payload, client=client).status_code)

    threads = [threading.Thread(target=send, args=(100 + 10 * i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [202] * 80
    assert len(set(receiver.accepted_keys())) == 80


def test_a17_the_receiver_names_the_repository_for_the_bound_and_calls_no_api(
    receiver: Receiver, fake_github: FakeGitHub
) -> None:
    # The `repositories` bound itself is the router's (undeclared-repository); the receiver's part is to name the
    # repository exactly and never reach the API on the request path.
    assert receiver.post("issue_comment", comment(repo="Octo/Other")).status_code == 202
    [entry] = receiver.inbox()
    assert entry["entry"]["event"]["repository"] == "octo/other"  # refs have one spelling (issue 16)
    assert entry["entry"]["event"]["work_items"] == ["github:octo/other#15"]
    assert fake_github.requests == []


def test_a18_an_enterprise_delivery_names_its_host(receiver: Receiver) -> None:
    payload = g.adapt(g.load("issue_comment.created"), host="ghe.example", number=15, login="octocat")
    assert receiver.post("issue_comment", payload).status_code == 202
    [entry] = receiver.inbox()
    assert entry["entry"]["event"]["work_items"] == ["github:ghe.example/octo/repo#15"]
    assert entry["entry"]["event"]["repository"] == "ghe.example/octo/repo"


def test_a19_a_hostile_body_is_stored_whole_and_parseable(receiver: Receiver) -> None:
    hostile = "\x1b[201~\rrm -rf /" + "x" * 10_000
    assert receiver.post("issue_comment", comment(body=hostile)).status_code == 202
    [entry] = receiver.inbox()
    assert entry["entry"]["event"]["body"] == hostile


def test_the_secret_never_reaches_the_event_log(receiver: Receiver) -> None:
    receiver.post("issue_comment", comment())
    receiver.post("issue_comment", comment(), secret="wrong")
    wait_for(lambda: receiver.events("webhook.rejected"))
    assert g.SECRET not in (receiver.env.root / "logs" / "events.jsonl").read_text()


# ------------------------------------------------------------------------------------------------ one receiver


def _run_receiver(env: Any, port: int) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "the_loop", "-c", str(env.config_path), "daemon", "run", "gh-webhook"]
    return subprocess.run(argv, cwd=env.cwd, env=env.env, capture_output=True, text=True, timeout=30)


def test_issue_228_a_second_receiver_on_the_same_state_root_is_refused(start_receiver: Any, gh_env: Any) -> None:
    first = start_receiver()
    from gh_receiver import github_config

    second_port = free_port()
    github_config(gh_env, None, enabled=True, port=second_port)  # another port, the same state root
    second = _run_receiver(gh_env, second_port)
    assert second.returncode == 1
    assert "gh-webhook is already running" in second.stderr and "Traceback" not in second.stderr
    assert first.healthy() and first.process.poll() is None
    assert [e["service"] for e in first.events("daemon.blocked")] == ["gh-webhook"]


def test_issue_142_routing_nested_under_the_webhook_is_refused_not_ignored(gh_env: Any) -> None:
    gh_env.write_config(
        {
            "version": "0.12.0",
            "webhooks": {"ghWebhook": {"enabled": True, "port": free_port(), "routing": {"enabled": True}}},
        }
    )
    result = _run_receiver(gh_env, 0)
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "webhooks.ghWebhook.routing" in line and "migrate-config" in line
    assert "Traceback" not in result.stderr
