"""The router claims a shared-dedupe control comment before executing it (J19, J20; E5 at the router, A.7 R2-2)."""

from __future__ import annotations

from typing import Any

from jira_world import JiraWorld

from the_loop import control
from the_loop.control import claims as control_claims
from the_loop.refs import parse_ref
from the_loop.routing.router import Router
from the_loop.sessions.dispatcher import Outcome
from the_loop_jira.client import JiraComment, JiraIssue
from the_loop_jira.normalize import comment_event

REF = parse_ref("jira:jira.test/PROJ-12")
LABELS = ["the-loop:auto-execute", "the-loop: auto-execute"]


def pause_comment(comment_id: str = "10012", author: str = "acc-ok") -> Any:
    issue = JiraIssue(key="PROJ-12", summary="s", labels=tuple(LABELS[:1]), status_category="new")
    comment = JiraComment(id=comment_id, author_id=author, body_md="the-loop pause", created="", url="")
    return comment_event(REF, issue, comment, LABELS, "poll")


def test_e5_a_control_comment_executes_once(world: JiraWorld) -> None:
    config = world.load()
    router = Router(config)
    event = pause_comment()
    assert router.handle(event).reason == "control-executed"
    assert control.recorded(config, REF) == "pause"
    assert Router(config).handle(event.model_copy(update={"transport": "webhook"})).reason == "already-processed"
    assert control_claims.claimed(config.state) == ["jira-comment-jira.test-10012"]
    assert world.events("dispatch.dropped")[-1]["reason"] == "already-processed"
    assert len(world.events("control.command")) == 1


def test_j19_control_record_names_the_jira_account(world: JiraWorld) -> None:
    config = world.load()
    Router(config).handle(pause_comment())
    from the_loop.state.store import WorkItemStore

    recorded = (WorkItemStore(config.state, config=config).read(REF) or {})["control"]
    assert recorded["actor"] == "acc-ok" and recorded["source"] == "comment"


def test_a7_r2_2_a_failed_command_releases_its_claim(world: JiraWorld, mocker: Any) -> None:
    config = world.load()
    router = Router(config)
    failing = mocker.patch.object(Router, "_command", return_value=Outcome("failed", error="boom", will_retry=True))
    assert router.handle(pause_comment()).status == "failed"
    assert control_claims.claimed(config.state) == []
    failing.return_value = Outcome("dropped", reason="control-executed")
    assert router.handle(pause_comment()).reason == "control-executed"
    assert control_claims.claimed(config.state) == ["jira-comment-jira.test-10012"]


def test_unauthorized_jira_actor_claims_nothing(world: JiraWorld) -> None:
    config = world.load()
    assert Router(config).handle(pause_comment(author="acc-x")).reason == "unauthorized-actor"
    assert control_claims.claimed(config.state) == []


def test_e8_a_relay_acts_as_the_operator(world: JiraWorld) -> None:
    config = world.load()
    issue = JiraIssue(key="PROJ-12", summary="s", labels=tuple(LABELS[:1]), status_category="new")
    relay = JiraComment(
        id="10040", author_id="acc-bot", body_md="the-loop pause\n\n[the-loop:relay]", created="", url="", is_self=True
    )
    typed = JiraComment(id="10041", author_id="acc-x", body_md=relay.body_md, created="", url="")
    assert Router(config).handle(comment_event(REF, issue, relay, LABELS, "poll")).reason == "control-executed"
    assert control.recorded(config, REF) == "pause"
    assert Router(config).handle(comment_event(REF, issue, typed, LABELS, "poll")).reason == "unauthorized-actor"


def test_j26_a_channel_relayed_command_reaches_jira_as_a_relay_and_executes(world: JiraWorld) -> None:
    """A Slack grant relays ``the-loop pause`` onto the ticket unmarked, with core's envelope. On Jira the author is
    the service account, so only the relay line keeps the poller from settling it as the-loop's own."""
    import json

    from the_loop.channels import COMMAND_KIND, envelope
    from the_loop.models import InboundEvent
    from the_loop_jira.markup import RELAY_MARKER

    config = world.load()
    world.cycle()  # baseline
    body = "the-loop pause\n\n(relayed from Dana (slack:U1))\n\n" + envelope(COMMAND_KIND, "slack", "U1")
    world.provider().post_comment(REF, body)
    posted = world.fake.issues["PROJ-12"].comments[-1]
    assert RELAY_MARKER in json.dumps(posted["body"]) and "the-loop:event" not in json.dumps(posted["body"])
    world.cycle()
    (event,) = world.inbox()  # the poller forwarded it; route it as a worker would
    entry = InboundEvent.model_validate(event)
    assert entry.actor is not None and (entry.actor.provider, entry.actor.id) == ("jira-relay", "operator")
    assert Router(config).handle(entry).reason == "control-executed"
    assert control.recorded(config, REF) == "pause"


def test_j26_a_self_marked_mirror_is_not_turned_into_a_relay(world: JiraWorld) -> None:
    import json

    from the_loop.channels import envelope
    from the_loop_jira.markup import AGENT_MARKER, RELAY_MARKER

    jira = world.provider()
    jira.post_comment(REF, jira.mark("Dana said: hi\n\n" + envelope("comment.reply", "slack", "U1")))
    text = json.dumps(world.fake.issues["PROJ-12"].comments[-1]["body"])
    assert AGENT_MARKER in text and RELAY_MARKER not in text
