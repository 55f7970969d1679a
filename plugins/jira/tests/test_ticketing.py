"""Writing to Jira through the real ``jira`` library against the fake REST API (J5-J9, J24-J29; E9, E10, E12, E14,
E16, E11's scrubbing)."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
from fake_jira import BOT
from jira_world import EMAIL, LABEL, TOKEN, JiraWorld

from the_loop.refs import parse_ref
from the_loop_jira.client import CredentialsMissing, JiraError, jira_label
from the_loop_jira.markup import AGENT_MARKER
from the_loop_jira.refs import PlacementError

REF = parse_ref("jira:jira.test/PROJ-12")


def texts(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["text"]] if node.get("type") == "text" else []
        return found + [t for child in node.get("content") or [] for t in texts(child)]
    return []


def test_e9_cloud_comment_is_adf_defanged_and_attributed(world: JiraWorld) -> None:
    jira = world.provider()
    comment_id = jira.post_comment(REF, jira.mark("The gate said: [the-loop:phase-selection] — pick one."))
    posts = world.fake.seen("POST", r"^/rest/api/3/issue/PROJ-12/comment$")
    assert comment_id and len(posts) == 1
    doc = posts[0].body["body"]
    assert doc["type"] == "doc"
    words = texts(doc)
    assert any("the\u2011loop:phase-selection" in t for t in words)
    assert not any("[the-loop:phase-selection]" in t for t in words)
    assert AGENT_MARKER in "".join(texts(doc["content"][-1]))
    assert posts[0].headers["authorization"].startswith("Basic ")


def test_e9_data_center_comment_is_wiki_with_bearer(world: JiraWorld) -> None:
    world.load(deployment="data-center")
    jira = world.provider()
    jira.post_comment(REF, jira.mark("**Done**: see `x`"))
    post = world.fake.seen("POST", r"^/rest/api/2/issue/PROJ-12/comment$")[0]
    assert isinstance(post.body["body"], str)
    assert post.body["body"].startswith("*Done*: see {{x}}")
    assert post.body["body"].rstrip().endswith(AGENT_MARKER)
    assert post.headers["authorization"] == f"Bearer {TOKEN}"


def test_mark_is_idempotent_and_replaces_the_github_stamp(world: JiraWorld) -> None:
    jira = world.provider()
    marked = jira.mark("hello\n\n🤖 _the-loop, autonomous comment_\n<!-- the-loop:agent-comment -->")
    assert marked.count(AGENT_MARKER) == 1 and "<!--" not in marked
    assert jira.mark(marked) == marked
    assert jira.mark_relay("the-loop pause").endswith("[the-loop:relay]")


def test_e10_ticked_checklist_reads_back_under_the_hidden_marker_only_for_the_service_account(world: JiraWorld) -> None:
    jira = world.provider()
    jira.post_comment(REF, jira.mark("<!-- the-loop:phase-selection -->\n\n- [ ] design\n- [ ] build"))
    posted = world.fake.issues["PROJ-12"].comments[-1]
    task_list = next(node for node in posted["body"]["content"] if node["type"] == "taskList")
    assert task_list["attrs"]["localId"].startswith("the-loop-tasks-")
    task_list["content"][0]["attrs"]["state"] = "DONE"  # ticked in Jira
    world.fake.add_comment("PROJ-12", posted["body"], "acc-x")  # the same body by someone else
    comments = jira.client.comments(REF)
    mine, theirs = comments[-2], comments[-1]
    assert mine.is_self and mine.body_md.startswith("<!-- the-loop:phase-selection -->")
    assert "- [x] design" in mine.body_md and "- [ ] build" in mine.body_md
    assert theirs.body_md.startswith("[the-loop:phase-selection]")


def test_e14_labels_are_added_in_jira_safe_form_in_one_put(world: JiraWorld) -> None:
    jira = world.provider()
    absent = jira.set_labels(REF, add=["the-loop: auto-execute", "team a"])
    puts = [r for r in world.fake.requests if r.method == "PUT"]
    assert absent == [] and len(puts) == 1
    assert puts[0].path == f"/rest/api/3/issue/{world.fake.issues['PROJ-12'].id}"  # the issue's `self` URL
    assert puts[0].body == {"update": {"labels": [{"add": "the-loop:auto-execute"}, {"add": "team-a"}]}}
    assert jira.set_labels(REF, remove=["nope"]) == ["nope"]


def test_jira_label_is_idempotent_and_refuses_empty() -> None:
    assert jira_label("the-loop: auto-execute") == "the-loop:auto-execute"
    assert jira_label(jira_label(" team  a ")) == "team-a"
    with pytest.raises(Exception, match="no Jira-safe form"):
        jira_label("   ")


def test_labels_carry_both_spellings(world: JiraWorld) -> None:
    assert world.provider().labels(REF) == [LABEL, "the-loop: auto-execute"]


def test_e16_two_done_transitions_without_close_transition_list_both_and_post_nothing(world: JiraWorld) -> None:
    world.fake.issues["PROJ-12"].transitions.append(
        {"id": "41", "name": "Won't do", "to": {"name": "Rejected", "statusCategory": {"key": "done"}}}
    )
    jira = world.provider()
    with pytest.raises(JiraError, match=r"Done.*Won't do") as caught:
        jira.close(REF)
    assert "nothing was transitioned" in str(caught.value)
    assert world.fake.seen("POST", "transitions") == []


def test_close_uses_the_configured_transition_case_insensitively(world: JiraWorld) -> None:
    world.load(closeTransition="done")
    jira = world.provider()
    assert jira.close(REF) == "Done"
    assert world.fake.seen("POST", "transitions")[0].body == {"transition": {"id": "31"}}
    assert jira.item_state(REF) == "closed"


def test_e12_unplaced_refs_send_nothing(world: JiraWorld) -> None:
    jira = world.provider()
    for text in ("jira:evil.example/PROJ-1", "jira:jira.test/ABC-1"):
        with pytest.raises(PlacementError, match="nothing was sent"):
            jira.post_comment(parse_ref(text), "hello")
    assert world.fake.requests == []


def test_item_state_and_moved_ticket(world: JiraWorld) -> None:
    jira = world.provider()
    assert jira.item_state(REF) == "open"
    assert jira.item_state(parse_ref("jira:jira.test/PROJ-99")) == "missing"
    world.fake.moved["PROJ-12"] = "PROJ-77"
    world.fake.issues["PROJ-77"] = world.fake.issues.pop("PROJ-12")
    world.fake.issues["PROJ-77"].key = "PROJ-77"
    assert jira.item_state(REF) == "missing"


def test_e11_missing_token_names_the_variable(world: JiraWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    jira = world.provider()
    monkeypatch.delenv("JIRA_API_TOKEN")
    with pytest.raises(CredentialsMissing, match="JIRA_API_TOKEN"):
        jira.post_comment(REF, "x")
    assert world.fake.requests == []


def test_credentials_are_read_at_call_time(world: JiraWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    jira = world.provider()
    jira.labels(REF)
    monkeypatch.setenv("JIRA_API_TOKEN", "rotated-token-123")
    jira.labels(REF)
    first, second = (r.headers["authorization"] for r in world.fake.requests[-2:])
    assert first != second
    assert second == "Basic " + base64.b64encode(f"{EMAIL}:rotated-token-123".encode()).decode()


def test_e11_failing_call_leaks_no_credential(world: JiraWorld, caplog: pytest.LogCaptureFixture) -> None:
    jira = world.provider()
    world.fake.fail("POST", "comment", 500, echo_headers=True)
    world.fake.fail("GET", "issue/PROJ-12$", 401, echo_headers=True)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(JiraError) as posted:
        jira.post_comment(REF, "hello")
    with pytest.raises(JiraError) as read:
        jira.client.issue(REF)
    assert posted.value.status == 500 and read.value.status == 401
    pair = base64.b64encode(f"{EMAIL}:{TOKEN}".encode()).decode()
    from the_loop import events

    events.emit("poll.item_error", work_item=str(REF), error=str(posted.value))
    log_file = world.events_text()
    for text in (str(posted.value), str(read.value), caplog.text, log_file, json.dumps(caplog.messages)):
        for secret in (TOKEN, EMAIL, pair, "Basic " + pair):
            assert secret not in text
    assert "injected 500" in str(posted.value)
    assert BOT  # the fake's service account exists


def test_j8_library_loggers_are_scrubbed(world: JiraWorld, caplog: pytest.LogCaptureFixture) -> None:
    jira = world.provider()
    jira.client.credentials()  # the client now knows which values to scrub
    pair = base64.b64encode(f"{EMAIL}:{TOKEN}".encode()).decode()
    caplog.set_level(logging.DEBUG)
    logging.getLogger("jira").warning("headers %s", {"Authorization": f"Basic {pair}"})
    logging.getLogger("jira.resilientsession").debug("JIRA(basic_auth=(%r, %r)) token_auth=%s", EMAIL, TOKEN, TOKEN)
    logging.getLogger("jira").error("user %s", EMAIL)
    assert caplog.records and all(secret not in caplog.text for secret in (TOKEN, EMAIL, pair))
    assert "[redacted]" in caplog.text


@pytest.mark.parametrize(("deployment", "kind", "version"), [("cloud", "Cloud", "3"), ("data-center", "Server", "2")])
def test_j7_the_sdk_is_built_without_probes_and_with_bounded_retries(
    world: JiraWorld, deployment: str, kind: str, version: str
) -> None:
    world.load(deployment=deployment)
    jira = world.provider()
    jira.labels(REF)
    sdk = jira.client.sdk()
    assert sdk._options["rest_api_version"] == version and sdk._options["check_update"] is False
    assert (sdk._session.max_retries, sdk._session.timeout, sdk.deploymentType) == (2, 30, kind)
    assert [r.path for r in world.fake.requests] == [f"/rest/api/{version}/issue/PROJ-12"]  # no serverInfo probe


def test_j29_an_unknown_close_transition_lists_what_is_available(world: JiraWorld) -> None:
    world.load(closeTransition="Ship it")
    jira = world.provider()
    with pytest.raises(JiraError, match=r"'Start' → In Progress, 'Done' → Done.*nothing was transitioned"):
        jira.close(REF)
    assert world.fake.seen("POST", "transitions") == []


@pytest.mark.parametrize(("path", "write"), [("comment", "post_comment"), ("transitions", "close")])
def test_j24_a_write_whose_answer_is_lost_is_sent_once(
    world: JiraWorld, monkeypatch: pytest.MonkeyPatch, path: str, write: str
) -> None:
    """The library retries a dropped connection for any verb; Jira may already have acted, so a write is sent once."""
    from the_loop_jira import client

    monkeypatch.setattr(client, "MAX_RETRY_DELAY", 0)  # the library's wait between retries, not under test
    jira = world.provider()
    world.fake.drop("POST", rf"/issue/PROJ-12/{path}$")
    args = (REF, "hello") if write == "post_comment" else (REF,)
    with pytest.raises(JiraError, match=r"unreachable \(ConnectionError\)"):
        getattr(jira.client, write)(*args)
    assert len(world.fake.seen("POST", rf"/issue/PROJ-12/{path}$")) == 1
    assert len(world.fake.issues["PROJ-12"].comments) == (1 if path == "comment" else 0)


def test_j24_a_read_whose_answer_is_lost_is_asked_again(world: JiraWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    from the_loop_jira import client

    monkeypatch.setattr(client, "MAX_RETRY_DELAY", 0)
    jira = world.provider()
    world.fake.drop("GET", r"/issue/PROJ-12$")
    assert jira.client.issue(REF).key == "PROJ-12"
    assert len(world.fake.seen("GET", r"/issue/PROJ-12$")) == 2


@pytest.mark.parametrize("origin", ["same", "longer-port", "userinfo"])
def test_j27_a_self_link_is_followed_only_on_the_configured_origin(world: JiraWorld, origin: str) -> None:
    """``self`` is a URL Jira answered; a bare prefix match would let ``…:80800`` or ``…:8080@evil.test`` through."""
    original = world.fake.answer
    base = {"same": world.fake.url, "longer-port": world.fake.url + "0", "userinfo": world.fake.url + "@evil.test"}

    def self_link(request: Any) -> Any:
        status, body = original(request)
        if request.method == "GET" and request.path.endswith("/issue/PROJ-12"):
            body["self"] = f"{base[origin]}/rest/api/3/issue/{body['id']}"
        return status, body

    world.fake.answer = self_link  # type: ignore[method-assign]
    world.provider().client.update_labels(REF, add=["extra"])
    (put,) = world.fake.seen("PUT", r"/issue/")
    issue_id = world.fake.issues["PROJ-12"].id
    assert put.path == (f"/rest/api/3/issue/{issue_id}" if origin == "same" else "/rest/api/3/issue/PROJ-12")
    assert "extra" in world.fake.issues["PROJ-12"].labels
