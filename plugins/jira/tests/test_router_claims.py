"""The router claims a shared-dedupe control comment before executing it (J19, J20; E5 at the router, A.7 R2-2)."""

from __future__ import annotations

from typing import Any

from fake_jira import FakeJira

from the_loop import control
from the_loop.control import claims as control_claims
from the_loop.refs import parse_ref
from the_loop.routing.router import Router
from the_loop.sessions.dispatcher import Outcome
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
    from the_loop.state.store import WorkItemStore

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


def test_j26_a_channel_relayed_command_reaches_jira_as_a_relay_and_executes(
    load: Any, fake_jira: FakeJira, jira_env: LoopEnv
) -> None:
    """A Slack grant relays ``the-loop pause`` onto the ticket unmarked, with core's envelope. On Jira the author is
    the service account, so only the relay line keeps the poller from settling it as the-loop's own."""
    import json

    from the_loop.channels import COMMAND_KIND, envelope
    from the_loop.ingress.poller import run_cycle
    from the_loop.interfaces import ServiceContext
    from the_loop.models import InboundEvent
    from the_loop_jira.markup import RELAY_MARKER
    from the_loop_jira.poll import JiraPollSource
    from the_loop_jira.ticketing import JiraTicketProvider

    config = load()
    context = ServiceContext(config=config, should_stop=lambda: False)
    run_cycle(context, [JiraPollSource(config)])  # baseline
    body = "the-loop pause\n\n(relayed from Dana (slack:U1))\n\n" + envelope(COMMAND_KIND, "slack", "U1")
    JiraTicketProvider(config).post_comment(REF, body)
    posted = fake_jira.issues["PROJ-12"].comments[-1]
    assert RELAY_MARKER in json.dumps(posted["body"]) and "the-loop:event" not in json.dumps(posted["body"])
    run_cycle(context, [JiraPollSource(config)])
    (path,) = (jira_env.root / "local" / "inbox").glob("*.json")  # the poller forwarded it; route it as a worker would
    entry = InboundEvent.model_validate(json.loads(path.read_text())["entry"]["event"])
    assert entry.actor is not None and (entry.actor.provider, entry.actor.id) == ("jira-relay", "operator")
    assert Router(config).handle(entry).reason == "control-executed"
    assert control.recorded(config, REF) == "pause"


def test_j26_a_self_marked_mirror_is_not_turned_into_a_relay(load: Any, fake_jira: FakeJira) -> None:
    import json

    from the_loop.channels import envelope
    from the_loop_jira.markup import AGENT_MARKER, RELAY_MARKER
    from the_loop_jira.ticketing import JiraTicketProvider

    jira = JiraTicketProvider(load())
    jira.post_comment(REF, jira.mark("Dana said: hi\n\n" + envelope("comment.reply", "slack", "U1")))
    text = json.dumps(fake_jira.issues["PROJ-12"].comments[-1]["body"])
    assert AGENT_MARKER in text and RELAY_MARKER not in text
