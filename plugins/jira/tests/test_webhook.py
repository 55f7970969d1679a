"""The signed Jira doorbell (J21-J23; E6, E7, moved tickets), called as core's server calls a route."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jira_world import SECRET, JiraWorld, comment_created, issue_updated

from the_loop.ingress.signing import signature
from the_loop.models import InboundEvent
from the_loop.routing.router import Router


@pytest.fixture
def world(world: JiraWorld) -> JiraWorld:
    """The world with the doorbell route up, its secret set."""
    world.doorbell()
    return world


def test_e6_no_secret_variable_no_route(world: JiraWorld) -> None:
    world.doorbell(secret=False)
    assert world.ring(comment_created(1)).status == 404
    assert world.fake.requests == []


@pytest.mark.parametrize("sign", ["", "sha256=00", "sha256=ü" + "0" * 63])
def test_e6_bad_signatures_are_401_and_nothing_is_read(world: JiraWorld, sign: str) -> None:
    body = json.dumps(comment_created(10013)).encode()
    headers = {"X-Atlassian-Webhook-Identifier": "g-9"}
    if sign:
        headers["X-Hub-Signature"] = sign
    assert world.hook.handle(headers, body).status == 401
    rejected = world.events("webhook.rejected")
    assert rejected[-1]["reason"] == "invalid-signature" and rejected[-1]["provider"] == "jira"
    assert rejected[-1]["delivery_id"] == "g-9"
    assert world.fake.requests == []


def test_invalid_json_is_400(world: JiraWorld) -> None:
    body = b"\xff not json"
    assert world.hook.handle({"X-Hub-Signature": signature(SECRET, body)}, body).status == 400


def test_e7_a_signed_body_injects_neither_text_nor_identity(world: JiraWorld) -> None:
    comment_id = world.fake.add_comment("PROJ-12", "hello", "acc-x", comment_id=10013)
    forged = comment_created(
        10013, body="the-loop stop", author={"accountId": "acc-ok"}, issue={"fields": {"labels": ["x"]}}
    )
    assert world.ring(forged).status == 202
    (event,) = world.inbox()
    assert event["body"] == "hello" and event["actor"]["id"] == "acc-x"
    assert event["dedupe_key"] == f"jira-comment-jira.test-{comment_id}"
    assert world.fake.seen("GET", r"/comment/10013$")  # read by id
    outcome = Router(world.hook.config).handle(InboundEvent.model_validate(event))
    assert outcome.reason == "unauthorized-actor"


def test_moved_ticket_is_never_acted_on(world: JiraWorld) -> None:
    fake = world.fake
    fake.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10020)
    fake.moved["PROJ-12"] = "PROJ-40"
    fake.issues["PROJ-40"] = fake.issues.pop("PROJ-12")
    fake.issues["PROJ-40"].key = "PROJ-40"
    assert world.ring(comment_created(10020)).status == 202
    fake.issues["ABC-5"] = fake.issues.pop("PROJ-40")
    fake.issues["ABC-5"].key = "ABC-5"
    fake.moved["PROJ-12"] = "ABC-5"
    assert world.ring(comment_created(10020)).status == 202
    drops = [e["reason"] for e in world.events("routing.dropped")]
    assert drops == ["jira-ticket-moved", "jira-ticket-project"]
    assert world.inbox() == [] and fake.seen("GET", "comment") == []


@pytest.mark.parametrize("key", ["OPS-1", "ABC-1", "not a key", ""])
def test_unknown_or_mirror_only_project_is_dropped_unread(world: JiraWorld, key: str) -> None:
    assert world.ring(comment_created(1, key=key)).status == 202
    assert [e["reason"] for e in world.events("routing.dropped")] == ["unknown-jira-project"]
    assert world.fake.requests == []


def test_issue_updated_to_done_is_a_closure_without_sender(world: JiraWorld) -> None:
    world.fake.issues["PROJ-12"].category = "done"
    assert world.ring(issue_updated()).status == 202
    (event,) = world.inbox()
    assert event["kind"] == "closed" and event["actor"] is None
    assert event["dedupe_key"] == "jira-close-jira:jira.test/PROJ-12-closed"


def test_self_comment_rung_is_settled(world: JiraWorld) -> None:
    world.fake.add_comment("PROJ-12", "done\n\n🤖 the-loop [the-loop:agent-comment]", "acc-bot", comment_id=10030)
    assert world.ring(comment_created("10030")).status == 202
    assert world.inbox() == []
    assert [e["reason"] for e in world.events("routing.dropped")] == ["self-authored"]


def test_j23_issue_updated_on_an_armed_started_ticket_is_presence(world: JiraWorld) -> None:
    from the_loop import control
    from the_loop.refs import parse_ref

    assert world.ring(issue_updated()).status == 202
    assert world.inbox() == []  # armed but never started: ignored
    control.record(world.hook.config, parse_ref("jira:jira.test/PROJ-12"), "start", source="comment", actor="acc-ok")
    assert world.ring(issue_updated()).status == 202
    (event,) = world.inbox()
    assert (event["event"], event["action"]) == ("issues", "labeled")
    assert event["dedupe_key"].startswith("jira-presence-jira:jira.test/PROJ-12-")


def test_other_webhook_events_are_ignored_unread(world: JiraWorld) -> None:
    assert world.ring({"webhookEvent": "worklog_updated", "issue": {"key": "PROJ-12"}}).status == 202
    assert world.fake.requests == []


@pytest.mark.parametrize("state", ["unarmed", "done"])
def test_j23_a_comment_on_an_unarmed_or_done_ticket_is_not_read(world: JiraWorld, state: str) -> None:
    world.fake.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10050)
    if state == "done":
        world.fake.issues["PROJ-12"].category = "done"
    else:
        world.fake.issues["PROJ-12"].labels = ["something-else"]
    assert world.ring(comment_created(10050)).status == 202
    assert world.inbox() == [] and world.fake.seen("GET", "comment") == []
    assert [e["reason"] for e in world.events("routing.dropped")] == ["spawn-policy"]


def test_j23_jira_failing_never_crashes_the_receiver(world: JiraWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    world.fake.fail("GET", r"issue/PROJ-12$", 500, echo_headers=True)
    assert world.ring(comment_created(10013), guid="g-500").status == 503  # may pass: Jira delivers again
    monkeypatch.delenv("JIRA_API_TOKEN")
    assert world.ring(comment_created(10013), guid="g-env").status == 202
    failed = world.events("jira.doorbell_failed")
    assert [e["delivery_id"] for e in failed] == ["g-500", "g-env"]
    assert "500" in failed[0]["error"] and "JIRA_API_TOKEN" in failed[1]["error"]
    assert "jira-secret-token" not in json.dumps(failed) and world.inbox() == []


def test_j22_the_guid_is_logged_never_a_dedupe_key(world: JiraWorld) -> None:
    world.fake.add_comment("PROJ-12", "hello", "acc-ok", comment_id=10060)
    for guid in ("g-a", "g-b"):  # Jira retrying under a new GUID is still the same comment
        assert world.ring(comment_created("10060"), guid=guid).status == 202
    assert [e["dedupe_key"] for e in world.inbox()] == ["jira-comment-jira.test-10060"]
    assert [e["delivery_id"] for e in world.events("webhook.received")] == ["g-a", "g-b"]


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
def test_j22_oversized_or_odd_fields_never_reach_a_url(world: JiraWorld, payload: Any) -> None:
    answer = world.ring(payload)
    assert answer.status in (202, 400)
    assert world.inbox() == [] and world.fake.seen("GET", "comment") == []


@pytest.mark.parametrize(("fault", "status"), [(429, 503), (500, 503), ("timeout", 503), (404, 202)])
def test_j23_a_read_that_may_pass_is_503_so_jira_redelivers(
    world: JiraWorld, monkeypatch: pytest.MonkeyPatch, fault: Any, status: int
) -> None:
    """A 202 tells Jira the delivery landed: answered for a failure that will pass, the comment would be lost."""
    from the_loop_jira import client, ticketing

    monkeypatch.setattr(client, "MAX_RETRY_DELAY", 0)  # the library's own waits, not under test
    world.fake.add_comment("PROJ-12", "the-loop start", "acc-ok", comment_id=10070)
    if fault == "timeout":
        monkeypatch.setattr(ticketing, "TIMEOUT_SECONDS", 0.2)
        world.fake.slow("GET", r"/comment/10070$", 0.6)
    else:
        world.fake.fail("GET", r"/comment/10070$", fault, times=3)
    assert world.ring(comment_created(10070), guid="g-1").status == status
    assert world.inbox() == []
    world.fake.faults.clear()
    world.fake.delays.clear()
    assert world.ring(comment_created(10070), guid="g-2").status == 202  # Jira's redelivery, once Jira answers
    assert [e["dedupe_key"] for e in world.inbox()] == ["jira-comment-jira.test-10070"]


def test_j13_a_passing_myself_failure_fails_the_doorbell_rather_than_refuse_a_relay(
    world: JiraWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from the_loop_jira import client

    monkeypatch.setattr(client, "MAX_RETRY_DELAY", 0)
    world.fake.add_comment("PROJ-12", "the-loop pause\n\n[the-loop:relay]", "acc-bot", comment_id=10080)
    world.fake.fail("GET", r"/myself$", 503)
    assert world.ring(comment_created(10080)).status == 503
    assert world.inbox() == []
    assert world.ring(comment_created(10080)).status == 202
    (event,) = world.inbox()
    assert event["actor"] == {"provider": "jira-relay", "id": "operator", "name": ""}


def test_reopened_ticket_seen_by_the_doorbell_closes_again(world: JiraWorld) -> None:
    """Jira sends no reopened event: Done, reopened, Done again must be two closes, not one and a duplicate."""
    from the_loop.inbox import Inbox
    from the_loop.refs import parse_ref
    from the_loop.state.store import WorkItemStore

    ref = parse_ref("jira:jira.test/PROJ-12")
    config = world.hook.config
    store = WorkItemStore(config.state, config=config)
    store.update_section(ref, "control", {"lastCommand": "start"})
    world.fake.issues["PROJ-12"].category = "done"
    assert world.ring(issue_updated()).status == 202
    queue = Inbox.for_config(config)
    queue.settle(*queue.pending())  # the close was handled: its key is now remembered …
    store.update_section(ref, "ended", {"state": "closed", "kind": "issue", "reason": "issue-closed"})  # … and ended
    world.fake.issues["PROJ-12"].category = "indeterminate"  # reopened in Jira
    assert world.ring(issue_updated()).status == 202
    assert "ended" not in (store.read(ref) or {})
    assert [(e["work_item"], e["source"]) for e in world.events("work_item.reopened")] == [(str(ref), "webhook")]
    world.fake.issues["PROJ-12"].category = "done"
    assert world.ring(issue_updated()).status == 202
    assert [e["kind"] for e in world.inbox()] == ["closed"]  # the second close is a new event
