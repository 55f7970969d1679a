"""The normalizer over real GitHub payloads (``@octokit/webhooks-examples``, adapted): filters, every kind, the
excerpt allow-list, dedupe keys, acks and refs, including GitHub Enterprise hosts. Whether a repository is declared
is the router's question, not the normalizer's."""

from __future__ import annotations

import json
from typing import Any

import gh_payloads as g
import pytest

from the_loop.models import InboundEvent
from the_loop.sessions.prompts import TRUNCATED, render_excerpt
from the_loop_github.normalize import Drop, normalize


def norm(event: str, payload: dict[str, Any], **kwargs: Any) -> InboundEvent:
    result = normalize(event, "delivery-1", payload, **kwargs)
    assert isinstance(result, InboundEvent), result
    return result


def keys_in(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {key for item in value.values() for key in keys_in(item)}
    if isinstance(value, list):
        return {key for item in value for key in keys_in(item)}
    return set()


# --------------------------------------------------------------------------------------------------- filters


def test_a22_a_pushed_provider_key_is_forged() -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15)
    payload["x-the-loop-provider"] = "jira"
    assert normalize("issue_comment", "d", payload) == Drop("forged-provider")


@pytest.mark.parametrize("event", ["ping", "push"])
def test_a3_ping_and_push_are_disabled_events(event: str) -> None:
    assert normalize(event, "d", g.adapt(g.load(event))) == Drop("disabled-event")


def test_an_explicit_event_list_replaces_the_default_set() -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15)
    assert normalize("issue_comment", "d", payload, events=["issues"]) == Drop("disabled-event")
    assert isinstance(normalize("issue_comment", "d", payload, events=["issue_comment"]), InboundEvent)


@pytest.mark.parametrize(
    ("name", "event"),
    [
        ("issues.edited", "issues"),
        ("pull_request.synchronize", "pull_request"),
    ],
)
def test_f6_unlisted_actions_are_ignored(name: str, event: str) -> None:
    assert normalize(event, "d", g.adapt(g.load(name))) == Drop("ignored-action")


def test_f6_deleted_and_edited_comments_are_ignored() -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15)
    for action in ("edited", "deleted"):
        payload["action"] = action
        assert normalize("issue_comment", "d", payload) == Drop("ignored-action")


def test_f6_a_review_without_a_body_is_ignored_and_with_one_is_routed() -> None:
    payload = g.adapt(g.load("pull_request_review.submitted"))
    assert payload["review"]["body"] is None  # as GitHub sends an approval with no text
    assert normalize("pull_request_review", "d", payload) == Drop("ignored-action")
    payload["review"]["body"] = "   "
    assert normalize("pull_request_review", "d", payload) == Drop("ignored-action")
    payload["review"]["body"] = "Please rename the helper."
    assert norm("pull_request_review", payload).kind == "review"


# ----------------------------------------------------------------------------------------------------- kinds


def test_issue_comment_is_a_comment_on_that_issue() -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15, body="please add tests", login="octocat")
    event = norm("issue_comment", payload, received_at="2026-01-01T00:00:00.000Z")
    comment = payload["comment"]
    assert event.kind == "comment"
    assert event.provider == "github" and event.transport == "webhook"
    assert (event.event, event.action, event.delivery_id) == ("issue_comment", "created", "delivery-1")
    assert event.entity == "github:octo/repo#15"
    assert event.work_items == ("github:octo/repo#15",)  # X2: an issue event yields only that issue
    assert event.pull_request is None
    assert event.repository == "octo/repo"
    assert event.actor is not None and (event.actor.provider, event.actor.id) == ("github", "octocat")
    assert event.body == "please add tests"
    assert event.labels == ("bug",)
    assert event.url == comment["html_url"]
    assert event.dedupe_key == f"github:comment:{comment['node_id']}"
    assert event.ack == {"kind": "issue-comment", "repository": "octo/repo", "id": str(comment["id"])}
    assert event.received_at == "2026-01-01T00:00:00.000Z"
    assert event.closed is None and event.label_added is None


def test_g2_the_comment_author_is_the_actor_not_the_sender() -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15, login="octocat", sender="someone-else")
    assert norm("issue_comment", payload).actor.id == "octocat"  # type: ignore[union-attr]


def test_a_comment_on_a_pull_request_names_the_pr_itself() -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=20, pull_request=True)
    event = norm("issue_comment", payload)
    assert event.work_items == ("github:octo/repo#20",)
    assert event.pull_request == "github:octo/repo#20"
    assert event.ack["kind"] == "issue-comment"


@pytest.mark.parametrize(
    ("name", "event_name", "kind"),
    [
        ("issues.opened", "issues", "opened"),
        ("issues.labeled", "issues", "labeled"),
        ("issues.reopened", "issues", "reopened"),
    ],
)
def test_issue_lifecycle_events(name: str, event_name: str, kind: str) -> None:
    payload = g.adapt(g.load(name), number=15, sender="octocat", labels=["the-loop: auto-execute"])
    event = norm(event_name, payload)
    assert event.kind == kind
    assert event.work_items == ("github:octo/repo#15",)
    assert event.actor.id == "octocat"  # type: ignore[union-attr]
    assert event.body is None  # an issue body never travels
    assert event.labels == ("the-loop: auto-execute",)
    assert event.dedupe_key == "delivery-1"  # no object of its own (decision 6)
    assert event.ack == {"kind": "issue", "repository": "octo/repo", "id": "15"}
    assert event.url == "https://github.com/octo/repo/issues/15"


def test_labeled_carries_the_label_added() -> None:
    payload = g.adapt(g.load("issues.labeled"), number=15)
    payload["label"]["name"] = "the-loop: auto-execute"
    assert norm("issues", payload).label_added == "the-loop: auto-execute"


def test_issue_closed_is_a_close_keyed_by_ref_and_state() -> None:
    payload = g.adapt(g.load("issues.reopened"), number=15, sender="octocat")
    payload["action"] = "closed"
    payload["issue"]["state"] = "closed"
    event = norm("issues", payload)
    assert event.kind == "closed"
    assert event.closed == "issue-closed"
    assert event.dedupe_key == "github:close:github:octo/repo#15:closed"
    assert event.actor.id == "octocat"  # type: ignore[union-attr]


@pytest.mark.parametrize(("merged", "reason", "state"), [(True, "pr-merged", "merged"), (False, "pr-closed", "closed")])
def test_pull_request_closed(merged: bool, reason: str, state: str) -> None:
    payload = g.adapt(g.load("pull_request.closed"), number=20, merged=merged)
    event = norm("pull_request", payload)
    assert event.closed == reason
    assert event.dedupe_key == f"github:close:github:octo/repo#20:{state}"
    assert event.pull_request == "github:octo/repo#20" and event.work_items == ("github:octo/repo#20",)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("pull_request.opened", "opened"),
        ("pull_request.labeled", "labeled"),
        ("pull_request.reopened", "reopened"),
        ("pull_request.ready_for_review", "other"),
    ],
)
def test_pull_request_events_name_the_pr(name: str, kind: str) -> None:
    payload = g.adapt(g.load(name), number=20, sender="octocat", labels=["x"])
    event = norm("pull_request", payload)
    assert event.kind == kind
    assert event.entity == event.pull_request == "github:octo/repo#20"
    assert event.work_items == ("github:octo/repo#20",)  # linkage to the issues it delivers comes later
    assert event.body is None  # never the PR body
    assert event.labels == ("x",)
    assert event.ack == {"kind": "issue", "repository": "octo/repo", "id": "20"}


def test_a_review_is_keyed_by_its_node_and_acked_on_the_pr() -> None:
    payload = g.adapt(g.load("pull_request_review.submitted"), number=20, body="Looks off", login="octocat")
    event = norm("pull_request_review", payload)
    assert event.kind == "review"
    assert event.body == "Looks off"
    assert event.actor.id == "octocat"  # type: ignore[union-attr]
    assert event.dedupe_key == f"github:review:{payload['review']['node_id']}"
    assert event.url == payload["review"]["html_url"]
    assert event.ack == {"kind": "issue", "repository": "octo/repo", "id": "20"}  # reviews take no reactions
    assert event.pull_request == "github:octo/repo#20"


def test_a_review_comment_keeps_path_and_line_first() -> None:
    payload = g.adapt(g.load("pull_request_review_comment.created"), number=20, body="nit: rename", login="octocat")
    event = norm("pull_request_review_comment", payload)
    comment = payload["comment"]
    assert event.kind == "review-comment"
    assert event.dedupe_key == f"github:review-comment:{comment['node_id']}"
    assert event.ack == {"kind": "review-comment", "repository": "octo/repo", "id": str(comment["id"])}
    assert list(event.excerpt["comment"]) == ["path", "line", "body", "html_url", "author"]
    assert event.excerpt["comment"]["path"] == "README.md"


def test_ci_events_name_their_pull_requests_and_have_no_actor() -> None:
    run = norm("check_run", g.adapt(g.load("check_run.completed")))
    assert run.kind == "ci"
    assert run.actor is None  # G2: none for CI
    assert run.work_items == ("github:octo/repo#2",)  # check_run.pull_requests and its suite's, deduplicated
    assert run.excerpt == {
        "check_run": {
            "name": "Octocoders-linter",
            "status": "completed",
            "conclusion": "failure",
            "html_url": "https://github.com/octo/repo/runs/128620228",
            "details_url": "https://octocoders.io",
        }
    }
    assert run.ack == {}
    suite = norm("check_suite", g.adapt(g.load("check_suite.completed")))
    assert suite.work_items == ("github:octo/repo#2",)
    assert set(suite.excerpt["check_suite"]) == {"status", "conclusion", "head_branch", "head_sha"}
    workflow = norm("workflow_run", g.adapt(g.load("workflow_run.completed")))
    assert workflow.work_items == () and set(workflow.excerpt) == {"workflow_run"}
    status = norm("status", g.adapt(g.load("status")))
    assert status.kind == "ci" and status.action == ""
    assert status.excerpt == {"state": "success", "context": "default"}  # P3: root fields; nulls left out


def test_check_run_output_keeps_only_title_and_summary() -> None:
    payload = g.adapt(g.load("check_run.completed"))
    payload["check_run"]["output"].update(title="2 failures", summary="tests failed", text="raw log")
    excerpt = norm("check_run", payload).excerpt
    assert excerpt["check_run"]["output"] == {"title": "2 failures", "summary": "tests failed"}


# --------------------------------------------------------------------------------------------------- excerpt


@pytest.mark.parametrize(
    ("name", "event_name"),
    [
        ("issue_comment.created", "issue_comment"),
        ("issues.opened", "issues"),
        ("issues.labeled", "issues"),
        ("pull_request.opened", "pull_request"),
        ("pull_request.closed", "pull_request"),
        ("pull_request_review_comment.created", "pull_request_review_comment"),
        ("check_run.completed", "check_run"),
        ("check_suite.completed", "check_suite"),
        ("workflow_run.completed", "workflow_run"),
        ("status", "status"),
    ],
)
def test_p3_the_excerpt_is_an_allow_list(name: str, event_name: str) -> None:
    payload = g.adapt(g.load(name), number=15 if "issue" in name else None)
    for key in ("issue", "pull_request"):
        if isinstance(payload.get(key), dict):
            payload[key]["body"] = "SECRET ITEM BODY"
    excerpt = norm(event_name, payload).excerpt
    text = json.dumps(excerpt)
    assert excerpt, "a known event always shows something"
    assert not keys_in(excerpt) & {"user", "sender", "owner", "repository", "head", "base"}
    assert "SECRET ITEM BODY" not in text  # no issue or PR body
    assert "api.github.com" not in text  # no API URLs
    assert len(text) < 4000


def test_p3_excerpts_per_event() -> None:
    comment = norm("issue_comment", g.adapt(g.load("issue_comment.created"), number=15, body="hi", login="octocat"))
    assert comment.excerpt == {
        "comment": {"body": "hi", "html_url": comment.url, "author": "octocat"},
    }
    opened = norm("issues", g.adapt(g.load("issues.opened"), number=15, sender="octocat"))
    assert opened.excerpt == {
        "actor": "octocat",
        "issue": {
            "number": 15,
            "title": "Spelling error in the README file",
            "state": "open",
            "html_url": "https://github.com/octo/repo/issues/15",
        },
    }
    labeled = norm("pull_request", g.adapt(g.load("pull_request.labeled"), number=20, sender="octocat"))
    assert set(labeled.excerpt) == {"actor", "pull_request", "label"}
    assert set(labeled.excerpt["pull_request"]) == {"number", "title", "state", "draft", "merged", "html_url"}
    assert labeled.excerpt["label"] == {"name": "bug"}


def test_a5_the_rendered_excerpt_parses_and_names_the_author_without_user_objects() -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15, body="please add tests", login="octocat")
    rendered = json.loads(render_excerpt(norm("issue_comment", payload).excerpt))
    assert rendered["comment"]["body"] == "please add tests"
    assert rendered["comment"]["author"] == "octocat"
    assert not keys_in(rendered) & {"sender", "user"}


def test_a19_terminal_sequences_stay_escaped_and_long_bodies_are_capped() -> None:
    hostile = "\x1b[201~\rrm -rf /" + "x" * 10_000
    payload = g.adapt(g.load("issue_comment.created"), number=15, body=hostile, login="octocat")
    event = norm("issue_comment", payload)
    assert event.body == hostile  # the normalized event keeps the text; rendering escapes and caps it
    rendered = render_excerpt(event.excerpt)
    assert "\x1b" not in rendered and "\\u001b" in rendered
    assert "\r" not in rendered
    body = json.loads(rendered)["comment"]["body"]
    assert body.startswith("\x1b[201~\rrm -rf /") and body.endswith(TRUNCATED)


def test_short_fields_are_capped_in_the_excerpt() -> None:
    payload = g.adapt(g.load("issues.opened"), number=15)
    payload["issue"]["title"] = "t" * 10_000
    title = norm("issues", payload).excerpt["issue"]["title"]
    assert len(title) == 512


# ---------------------------------------------------------------------------------------------- refs, hosts


def test_a18_an_enterprise_host_comes_from_the_repository_url() -> None:
    payload = g.adapt(g.load("issue_comment.created"), host="ghe.example", number=15)
    event = norm("issue_comment", payload)
    assert event.entity == "github:ghe.example/octo/repo#15"
    assert event.repository == "ghe.example/octo/repo"
    assert event.ack["repository"] == "ghe.example/octo/repo"


def test_a18_a_real_enterprise_server_payload() -> None:
    payload = g.load("ghes-3.5/issue_comment.created")
    event = norm("issue_comment", payload)
    assert event.entity == "github:octocoders.github.io/codertocat/hello-world#1"  # one spelling (issue 16)
    assert event.repository == "octocoders.github.io/codertocat/hello-world"


def test_the_entity_url_gives_the_host_when_the_repository_has_none() -> None:
    payload = g.adapt(g.load("issue_comment.created"), host="ghe.example:8443", number=15)
    del payload["repository"]["html_url"]
    assert norm("issue_comment", payload).entity == "github:ghe.example:8443/octo/repo#15"
    del payload["issue"]["html_url"]
    assert norm("issue_comment", payload).entity == "github:octo/repo#15"  # else github.com


@pytest.mark.parametrize(
    ("full_name", "html_url"),
    [
        ("octo/re po", "https://github.com/octo/re po"),
        ("octo/../x", "https://github.com/octo/x"),
        ("../..", "https://github.com/x/y"),
        ("octo/repo", "https://evil@github.com/octo/repo"),
        ("octo/repo", "https://bare-host/octo/repo"),
    ],
)
def test_x1_bad_coordinates_yield_no_work_item(full_name: str, html_url: str) -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15)
    payload["repository"]["full_name"] = full_name
    payload["repository"]["html_url"] = html_url
    payload["issue"]["html_url"] = html_url
    event = norm("issue_comment", payload)
    assert event.work_items == () and event.entity is None
    assert event.repository == ""
    assert "repository" not in event.ack


@pytest.mark.parametrize("node_id", ["not a node id!", None, "", 42])
def test_a_comment_without_a_valid_node_id_is_keyed_by_its_numeric_id(node_id: object) -> None:
    """Issue 16 (6): never by the delivery id, which a replay changes."""
    payload = g.adapt(g.load("issue_comment.created"), number=15)
    payload["comment"]["node_id"] = node_id
    comment_id = payload["comment"]["id"]
    assert norm("issue_comment", payload).dedupe_key == f"github:comment:id:{comment_id}"
    payload["comment"].pop("node_id")
    assert norm("issue_comment", payload).dedupe_key == f"github:comment:id:{comment_id}"
    payload["comment"]["id"] = "12"  # no usable id at all: the delivery is its own key
    assert norm("issue_comment", payload).dedupe_key == "delivery-1"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda p: p.update(comment="not an object"),
        lambda p: p.update(issue=[1, 2]),
        lambda p: p["issue"].update(number="15"),
        lambda p: p["issue"].update(labels="bug"),
        lambda p: p["comment"].update(user=None, body=42, id=True),
        lambda p: p.update(repository=None),
        lambda p: p.update(action=7),
    ],
)
def test_wrong_shapes_read_as_absent(mangle: Any) -> None:
    payload = g.adapt(g.load("issue_comment.created"), number=15)
    mangle(payload)
    result = normalize("issue_comment", "d", payload)
    assert isinstance(result, InboundEvent | Drop)
