"""The router claims a shared-dedupe control comment before executing it (J19, J20; E5 at the router, A.7 R2-2)."""

from __future__ import annotations

from typing import Any

from fake_jira import FakeJira

from the_loop import control, control_claims
from the_loop.dispatcher import Outcome
from the_loop.refs import parse_ref
from the_loop.router import Router
from the_loop.testing import LoopEnv
from the_loop_jira.client import JiraComment, JiraIssue
from the_loop_jira.normalize import comment_event

REF = parse_ref("jira:jira.test/PROJ-12")
LABELS = ["the-loop:auto-execute", "the-loop: auto-execute"]


def pause_comment(comment_id: str = "10012", author: str = "acc-ok") -> Any:
    issue = JiraIssue(key="PROJ-12", summary="s", labels=tuple(LABELS[:1]), status_category="new")
    comment = JiraComment(id=comment_id, author_id=author, body_md="the-loop pause", created="", url="")
    return comment_event(REF, issue, comment, LABELS, "poll")


def test_e5_a_control_comment_executes_once(load: Any, fake_jira: FakeJira, jira_env: LoopEnv) -> None:
    config = load()
    router = Router(config)
    event = pause_comment()
    assert router.handle(event).reason == "control-executed"
    assert control.recorded(config, REF) == "pause"
    assert Router(config).handle(event.model_copy(update={"transport": "webhook"})).reason == "already-processed"
    assert control_claims.claimed(config.state) == ["jira-comment-jira.test-10012"]
    dropped = [e for e in jira_env.events() if e["event"] == "dispatch.dropped"]
    assert dropped[-1]["reason"] == "already-processed"
    assert [e["event"] for e in jira_env.events()].count("control.command") == 1


def test_j19_control_record_names_the_jira_account(load: Any, fake_jira: FakeJira) -> None:
    config = load()
    Router(config).handle(pause_comment())
    from the_loop.store import WorkItemStore

    recorded = (WorkItemStore(config.state, config=config).read(REF) or {})["control"]
    assert recorded["actor"] == "acc-ok" and recorded["source"] == "comment"


def test_a7_r2_2_a_failed_command_releases_its_claim(load: Any, fake_jira: FakeJira, mocker: Any) -> None:
    config = load()
    router = Router(config)
    failing = mocker.patch.object(Router, "_command", return_value=Outcome("failed", error="boom", will_retry=True))
    assert router.handle(pause_comment()).status == "failed"
    assert control_claims.claimed(config.state) == []
    failing.return_value = Outcome("dropped", reason="control-executed")
    assert router.handle(pause_comment()).reason == "control-executed"
    assert control_claims.claimed(config.state) == ["jira-comment-jira.test-10012"]


def test_unauthorized_jira_actor_claims_nothing(load: Any, fake_jira: FakeJira) -> None:
    config = load()
    assert Router(config).handle(pause_comment(author="acc-x")).reason == "unauthorized-actor"
    assert control_claims.claimed(config.state) == []


def test_e8_a_relay_acts_as_the_operator(load: Any, fake_jira: FakeJira) -> None:
    config = load()
    issue = JiraIssue(key="PROJ-12", summary="s", labels=tuple(LABELS[:1]), status_category="new")
    relay = JiraComment(
        id="10040", author_id="acc-bot", body_md="the-loop pause\n\n[the-loop:relay]", created="", url="", is_self=True
    )
    typed = JiraComment(id="10041", author_id="acc-x", body_md=relay.body_md, created="", url="")
    assert Router(config).handle(comment_event(REF, issue, relay, LABELS, "poll")).reason == "control-executed"
    assert control.recorded(config, REF) == "pause"
    assert Router(config).handle(comment_event(REF, issue, typed, LABELS, "poll")).reason == "unauthorized-actor"
