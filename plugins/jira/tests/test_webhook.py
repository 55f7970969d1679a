"""The signed Jira doorbell (J21-J23; E6, E7, moved tickets), called as core's server calls a route."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fake_jira import FakeJira
from jira_world import SECRET

from the_loop.ingress.signing import signature
from the_loop.models import InboundEvent
from the_loop.routing.router import Router
from the_loop.testing import LoopEnv
from the_loop_jira.webhook import JiraWebhook


@pytest.fixture
def hook(load: Any, monkeypatch: pytest.MonkeyPatch) -> JiraWebhook:
    monkeypatch.setenv("THE_LOOP_JIRA_WEBHOOK_SECRET", SECRET)
    return JiraWebhook(load(webhook={"secretEnv": "THE_LOOP_JIRA_WEBHOOK_SECRET"}))


def ring(hook: JiraWebhook, payload: dict[str, Any], *, sign: str | None = None, guid: str = "g-1") -> Any:
    body = json.dumps(payload).encode()
    headers = {"X-Atlassian-Webhook-Identifier": guid, "X-Hub-Signature": sign or signature(SECRET, body)}
    return hook.handle(headers, body)


def inbox(env: LoopEnv) -> list[dict[str, Any]]:
    directory = env.root / "local" / "inbox"
    return [json.loads(p.read_text())["entry"]["event"] for p in sorted(directory.glob("*.json"))]


def comment_created(comment_id: Any, key: str = "PROJ-12", **claims: Any) -> dict[str, Any]:
    return {"webhookEvent": "comment_created", "issue": {"key": key}, "comment": {"id": comment_id, **claims}}


def test_e6_no_secret_variable_no_route(load: Any, fake_jira: FakeJira, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("THE_LOOP_JIRA_WEBHOOK_SECRET", raising=False)
    hook = JiraWebhook(load(webhook={"secretEnv": "THE_LOOP_JIRA_WEBHOOK_SECRET"}))
    assert ring(hook, comment_created(1)).status == 404
    assert fake_jira.requests == []


@pytest.mark.parametrize("sign", ["", "sha256=00", "sha256=ü" + "0" * 63])
def test_e6_bad_signatures_are_401_and_nothing_is_read(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv, sign: str
) -> None:
    body = json.dumps(comment_created(10013)).encode()
    headers = {"X-Atlassian-Webhook-Identifier": "g-9"}
    if sign:
        headers["X-Hub-Signature"] = sign
    assert hook.handle(headers, body).status == 401
    rejected = [e for e in jira_env.events() if e["event"] == "webhook.rejected"]
    assert rejected[-1]["reason"] == "invalid-signature" and rejected[-1]["provider"] == "jira"
    assert rejected[-1]["delivery_id"] == "g-9"
    assert fake_jira.requests == []


def test_invalid_json_is_400(hook: JiraWebhook) -> None:
    body = b"\xff not json"
    assert hook.handle({"X-Hub-Signature": signature(SECRET, body)}, body).status == 400


def test_e7_a_signed_body_injects_neither_text_nor_identity(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv
) -> None:
    comment_id = fake_jira.add_comment("PROJ-12", "hello", "acc-x", comment_id=10013)
    forged = comment_created(
        10013, body="the-loop stop", author={"accountId": "acc-ok"}, issue={"fields": {"labels": ["x"]}}
    )
    assert ring(hook, forged).status == 202
    (event,) = inbox(jira_env)
    assert event["body"] == "hello" and event["actor"]["id"] == "acc-x"
    assert event["dedupe_key"] == f"jira-comment-jira.test-{comment_id}"
    assert fake_jira.seen("GET", r"/comment/10013$")  # read by id
    outcome = Router(hook.config).handle(InboundEvent.model_validate(event))
    assert outcome.reason == "unauthorized-actor"


def test_moved_ticket_is_never_acted_on(hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv) -> None:
    fake_jira.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10020)
    fake_jira.moved["PROJ-12"] = "PROJ-40"
    fake_jira.issues["PROJ-40"] = fake_jira.issues.pop("PROJ-12")
    fake_jira.issues["PROJ-40"].key = "PROJ-40"
    assert ring(hook, comment_created(10020)).status == 202
    fake_jira.issues["ABC-5"] = fake_jira.issues.pop("PROJ-40")
    fake_jira.issues["ABC-5"].key = "ABC-5"
    fake_jira.moved["PROJ-12"] = "ABC-5"
    assert ring(hook, comment_created(10020)).status == 202
    drops = [e["reason"] for e in jira_env.events() if e["event"] == "routing.dropped"]
    assert drops == ["jira-ticket-moved", "jira-ticket-project"]
    assert inbox(jira_env) == [] and fake_jira.seen("GET", "comment") == []


@pytest.mark.parametrize("key", ["OPS-1", "ABC-1", "not a key", ""])
def test_unknown_or_mirror_only_project_is_dropped_unread(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv, key: str
) -> None:
    assert ring(hook, comment_created(1, key=key)).status == 202
    assert [e["reason"] for e in jira_env.events() if e["event"] == "routing.dropped"] == ["unknown-jira-project"]
    assert fake_jira.requests == []


def test_issue_updated_to_done_is_a_closure_without_sender(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv
) -> None:
    fake_jira.issues["PROJ-12"].category = "done"
    assert ring(hook, {"webhookEvent": "jira:issue_updated", "issue": {"key": "PROJ-12"}}).status == 202
    (event,) = inbox(jira_env)
    assert event["kind"] == "closed" and event["actor"] is None
    assert event["dedupe_key"] == "jira-close-jira:jira.test/PROJ-12-closed"


def test_self_comment_rung_is_settled(hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv) -> None:
    fake_jira.add_comment("PROJ-12", "done\n\n🤖 the-loop [the-loop:agent-comment]", "acc-bot", comment_id=10030)
    assert ring(hook, comment_created("10030")).status == 202
    assert inbox(jira_env) == []
    assert [e["reason"] for e in jira_env.events() if e["event"] == "routing.dropped"] == ["self-authored"]


def test_j23_issue_updated_on_an_armed_started_ticket_is_presence(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv
) -> None:
    from the_loop import control
    from the_loop.refs import parse_ref

    updated = {"webhookEvent": "jira:issue_updated", "issue": {"key": "PROJ-12"}}
    assert ring(hook, updated).status == 202
    assert inbox(jira_env) == []  # armed but never started: ignored
    control.record(hook.config, parse_ref("jira:jira.test/PROJ-12"), "start", source="comment", actor="acc-ok")
    assert ring(hook, updated).status == 202
    (event,) = inbox(jira_env)
    assert (event["event"], event["action"]) == ("issues", "labeled")
    assert event["dedupe_key"].startswith("jira-presence-jira:jira.test/PROJ-12-")


def test_other_webhook_events_are_ignored_unread(hook: JiraWebhook, fake_jira: FakeJira) -> None:
    assert ring(hook, {"webhookEvent": "worklog_updated", "issue": {"key": "PROJ-12"}}).status == 202
    assert fake_jira.requests == []


@pytest.mark.parametrize("state", ["unarmed", "done"])
def test_j23_a_comment_on_an_unarmed_or_done_ticket_is_not_read(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv, state: str
) -> None:
    fake_jira.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10050)
    if state == "done":
        fake_jira.issues["PROJ-12"].category = "done"
    else:
        fake_jira.issues["PROJ-12"].labels = ["something-else"]
    assert ring(hook, comment_created(10050)).status == 202
    assert inbox(jira_env) == [] and fake_jira.seen("GET", "comment") == []
    assert [e["reason"] for e in jira_env.events() if e["event"] == "routing.dropped"] == ["spawn-policy"]


def test_j23_jira_failing_never_crashes_the_receiver(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_jira.fail("GET", r"issue/PROJ-12$", 500, echo_headers=True)
    assert ring(hook, comment_created(10013), guid="g-500").status == 503  # may pass: Jira delivers again
    monkeypatch.delenv("JIRA_API_TOKEN")
    assert ring(hook, comment_created(10013), guid="g-env").status == 202
    failed = [e for e in jira_env.events() if e["event"] == "jira.doorbell_failed"]
    assert [e["delivery_id"] for e in failed] == ["g-500", "g-env"]
    assert "500" in failed[0]["error"] and "JIRA_API_TOKEN" in failed[1]["error"]
    assert "jira-secret-token" not in json.dumps(failed) and inbox(jira_env) == []


def test_j22_the_guid_is_logged_never_a_dedupe_key(hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv) -> None:
    fake_jira.add_comment("PROJ-12", "hello", "acc-ok", comment_id=10060)
    for guid in ("g-a", "g-b"):  # Jira retrying under a new GUID is still the same comment
        assert ring(hook, comment_created("10060"), guid=guid).status == 202
    assert [e["dedupe_key"] for e in inbox(jira_env)] == ["jira-comment-jira.test-10060"]
    received = [e["delivery_id"] for e in jira_env.events() if e["event"] == "webhook.received"]
    assert received == ["g-a", "g-b"]


@pytest.mark.parametrize(
    "payload",
    [
        {"webhookEvent": "comment_created", "issue": {"key": "PROJ-12"}, "comment": {"id": "10/../1"}},
        {"webhookEvent": "comment_created", "issue": {"key": "PROJ-12"}, "comment": {"id": "1" * 33}},
        {"webhookEvent": "comment_created", "issue": {"key": "PROJ-12" + "0" * 30}, "comment": {"id": 1}},
        {"webhookEvent": "x" * 65, "issue": {"key": "PROJ-12"}},
        ["not", "an", "object"],
    ],
)
def test_j22_oversized_or_odd_fields_never_reach_a_url(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv, payload: Any
) -> None:
    answer = ring(hook, payload)
    assert answer.status in (202, 400)
    assert inbox(jira_env) == [] and fake_jira.seen("GET", "comment") == []


@pytest.mark.parametrize(("fault", "status"), [(429, 503), (500, 503), ("timeout", 503), (404, 202)])
def test_j23_a_read_that_may_pass_is_503_so_jira_redelivers(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv, monkeypatch: pytest.MonkeyPatch, fault: Any, status: int
) -> None:
    """A 202 tells Jira the delivery landed: answered for a failure that will pass, the comment would be lost."""
    from the_loop_jira import client, ticketing

    monkeypatch.setattr(client, "MAX_RETRY_DELAY", 0)  # the library's own waits, not under test
    fake_jira.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10070)
    if fault == "timeout":
        monkeypatch.setattr(ticketing, "TIMEOUT_SECONDS", 0.2)
        fake_jira.slow("GET", r"/comment/10070$", 0.6)
    else:
        fake_jira.fail("GET", r"/comment/10070$", fault, times=3)
    assert ring(hook, comment_created(10070), guid="g-1").status == status
    assert inbox(jira_env) == []
    fake_jira.faults.clear()
    fake_jira.delays.clear()
    assert ring(hook, comment_created(10070), guid="g-2").status == 202  # Jira's redelivery, once Jira answers
    assert [e["dedupe_key"] for e in inbox(jira_env)] == ["jira-comment-jira.test-10070"]


def test_j13_a_passing_myself_failure_fails_the_doorbell_rather_than_refuse_a_relay(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from the_loop_jira import client

    monkeypatch.setattr(client, "MAX_RETRY_DELAY", 0)
    fake_jira.add_comment("PROJ-12", "the-loop pause\n\n[the-loop:relay]", "acc-bot", comment_id=10080)
    fake_jira.fail("GET", r"/myself$", 503)
    assert ring(hook, comment_created(10080)).status == 503
    assert inbox(jira_env) == []
    assert ring(hook, comment_created(10080)).status == 202
    (event,) = inbox(jira_env)
    assert event["actor"] == {"provider": "jira-relay", "id": "operator", "name": ""}


def test_reopened_ticket_seen_by_the_doorbell_closes_again(
    hook: JiraWebhook, fake_jira: FakeJira, jira_env: LoopEnv
) -> None:
    """Jira sends no reopened event: Done, reopened, Done again must be two closes, not one and a duplicate."""
    from the_loop.inbox import Inbox
    from the_loop.refs import parse_ref
    from the_loop.state.store import WorkItemStore

    ref = parse_ref("jira:jira.test/PROJ-12")
    store = WorkItemStore(hook.config.state, config=hook.config)
    store.update_section(ref, "control", {"lastCommand": "start"})
    updated = {"webhookEvent": "jira:issue_updated", "issue": {"key": "PROJ-12"}}
    fake_jira.issues["PROJ-12"].category = "done"
    assert ring(hook, updated).status == 202
    queue = Inbox.for_config(hook.config)
    queue.settle(*queue.pending())  # the close was handled: its key is now remembered …
    store.update_section(ref, "ended", {"state": "closed", "kind": "issue", "reason": "issue-closed"})  # … and ended
    fake_jira.issues["PROJ-12"].category = "indeterminate"  # reopened in Jira
    assert ring(hook, updated).status == 202
    assert "ended" not in (store.read(ref) or {})
    reopened = [e for e in jira_env.events() if e["event"] == "work_item.reopened"]
    assert [(e["work_item"], e["source"]) for e in reopened] == [(str(ref), "webhook")]
    fake_jira.issues["PROJ-12"].category = "done"
    assert ring(hook, updated).status == 202
    assert [e["kind"] for e in inbox(jira_env)] == ["closed"]  # the second close is a new event
