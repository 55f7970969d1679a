"""The Jira poll source through core's poll loop (J10-J12; E2, E3, E11, E16), real ``jira`` library, fake REST API."""

from __future__ import annotations

from typing import Any

import pytest
from jira_world import JiraWorld

from the_loop.interfaces import ServiceContext
from the_loop.refs import parse_ref
from the_loop_jira.poll import JiraPollSource


def test_e2_search_jql_is_built_from_config_with_basic_auth(world: JiraWorld) -> None:
    result = world.cycle()
    searches = world.fake.seen("GET", r"^/rest/api/3/search/jql$")
    assert len(searches) == 1 and result["scopesPolled"] == 1 and result["itemsSeen"] == 1
    assert searches[0].query["jql"] == (
        'project = "PROJ" AND labels = "the-loop:auto-execute" AND statusCategory != Done ORDER BY updated DESC'
    )
    assert searches[0].headers["authorization"].startswith("Basic ")
    assert not any("OPS" in r.query.get("jql", "") for r in world.fake.requests)


def test_a7_issue_381_every_arming_label_is_a_clause(world: JiraWorld) -> None:
    world.load(routing={"autoExecuteLabels": ["the-loop: auto-execute", 'team "a"']})
    world.cycle()
    jql = world.fake.seen("GET", "search/jql")[0].query["jql"]
    assert 'labels = "the-loop:auto-execute" AND labels = "team-\\"a\\""' in jql
    assert world.fake.seen("GET", "comment") == []  # PROJ-12 lacks the second label: not listed


def test_e3_first_sight_baselines_the_thread(world: JiraWorld) -> None:
    first = world.fake.add_comment("PROJ-12", "hello", "acc-x")
    second = world.fake.add_comment("PROJ-12", "anyone?", "acc-x")
    result = world.cycle()
    assert world.portable()["poll"]["seenComments"] == [first, second]
    assert result["commentsForwarded"] == 0 and world.inbox_keys() == []


def test_new_comments_after_the_baseline_are_forwarded_once(world: JiraWorld) -> None:
    world.cycle()
    comment = world.fake.add_comment("PROJ-12", "please look at the tests", "acc-ok")
    assert world.cycle()["commentsForwarded"] == 1
    assert world.inbox_keys() == [f"jira-comment-jira.test-{comment}"]
    assert world.cycle()["commentsForwarded"] == 0
    entry = world.inbox()[0]
    assert entry["excerpt"]["x-the-loop-provider"] == "jira"
    assert entry["excerpt"]["comment"]["user"] == {"login": "acc-ok"}
    assert entry["labels"] == ["the-loop:auto-execute", "the-loop: auto-execute"]
    assert entry["shared_dedupe"] is True


def test_first_sight_keeps_a_pending_control_comment(world: JiraWorld) -> None:
    world.fake.add_comment("PROJ-12", "old chatter", "acc-x")
    start = world.fake.add_comment("PROJ-12", "the-loop start", "acc-ok")
    world.cycle()
    assert world.inbox_keys() == [f"jira-comment-jira.test-{start}"]


def test_e8_self_comments_are_settled_and_relays_forwarded(world: JiraWorld) -> None:
    world.cycle()
    relay = world.fake.add_comment("PROJ-12", "the-loop pause\n\n[the-loop:relay]", "acc-bot")
    world.fake.add_comment("PROJ-12", "status update", "acc-bot")
    typed = world.fake.add_comment("PROJ-12", "the-loop pause\n\n[the-loop:relay]", "acc-x")
    world.cycle()
    assert world.inbox_keys() == sorted([f"jira-comment-jira.test-{relay}", f"jira-comment-jira.test-{typed}"])
    actors = {e["dedupe_key"]: e["actor"] for e in world.inbox()}
    assert actors[f"jira-comment-jira.test-{relay}"] == {"provider": "jira-relay", "id": "operator", "name": ""}
    assert actors[f"jira-comment-jira.test-{typed}"]["provider"] == "jira"  # a typed marker grants nothing
    assert [e["reason"] for e in world.events("poll.comment_settled")] == ["self-authored"]


def test_e16_a_failing_comment_page_leaves_the_cursor(world: JiraWorld) -> None:
    world.cycle()
    before = world.portable()["poll"]["seenComments"]
    for n in range(250):
        world.fake.add_comment("PROJ-12", f"comment {n}", "acc-x")
    calls = {"n": 0}
    original = world.fake.answer

    def second_page_fails(request: Any) -> Any:
        if request.path.endswith("/comment") and request.query.get("startAt") == "100":
            calls["n"] += 1
            return 503, {"errorMessages": ["busy"]}
        return original(request)

    world.fake.answer = second_page_fails  # type: ignore[method-assign]  # page 1 answers, page 2 fails
    result = world.cycle()
    assert calls["n"] >= 1 and result["failures"] == 1
    errors = world.events("poll.item_error")
    assert errors and errors[-1]["will_retry"] is True and "503" in errors[-1]["error"]
    assert world.portable()["poll"]["seenComments"] == before
    assert world.inbox_keys() == []


def test_j11_a_failing_search_is_one_failed_scope(world: JiraWorld) -> None:
    config = world.document()
    config["polling"]["sources"] = [{"provider": "jira", "projects": ["PROJ", "OPS", "NOPE"]}]
    world.fake.fail("GET", "search/jql", 500)
    world.load(config)
    result = world.cycle()
    scopes = {entry["scope"]: entry for entry in result["scopesFailed"]}
    assert set(scopes) == {"jira:jira.test/PROJ", "jira:jira.test/OPS", "jira:jira.test/NOPE"}
    assert "mirror-only" in scopes["jira:jira.test/OPS"]["error"] and scopes["jira:jira.test/OPS"]["permanent"]
    assert "500" in scopes["jira:jira.test/PROJ"]["error"]
    assert len(world.fake.seen("GET", "search")) == 1  # OPS and NOPE failed preflight: nothing sent for them
    assert len(world.events("poll.scope_error")) == 3


def test_e11_missing_token_fails_the_cycle_naming_it(world: JiraWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    world.load()
    monkeypatch.delenv("JIRA_API_TOKEN")
    result = world.cycle()
    assert result["errors"] == 1 and "JIRA_API_TOKEN" in result["scopesFailed"][0]["error"]
    assert world.fake.requests == []


def test_data_center_search_pages_by_start_at(world: JiraWorld) -> None:
    for n in range(13, 13 + 120):
        world.fake.add_issue(f"PROJ-{n}", labels=["the-loop:auto-execute"])
    source = JiraPollSource(world.load(deployment="data-center"))
    issues = source.client.search("PROJ", ["the-loop: auto-execute"])
    searches = world.fake.seen("GET", r"^/rest/api/2/search$")
    assert len(issues) == 121 and [s.query["startAt"] for s in searches] == ["0", "100"]


def test_e15_a_mirror_ticket_never_arms(world: JiraWorld) -> None:
    world.fake.add_issue("PROJ-13", labels=["the-loop:auto-execute", "the-loop-mirror"])
    world.fake.add_comment("PROJ-13", "the-loop start", "acc-ok")
    world.cycle()
    refused = world.events("arm.refused")
    assert [(e["reason"], e["work_item"]) for e in refused] == [("mirror", "jira:jira.test/PROJ-13")]
    assert world.inbox_keys() == []
    assert not world.record_path("local", "PROJ-13").exists()


def test_e11_a_500_echoing_headers_leaves_no_credential_in_the_trail(world: JiraWorld) -> None:
    import base64
    import json

    from jira_world import EMAIL, TOKEN

    world.fake.fail("GET", "search/jql", 500, echo_headers=True)
    result = world.cycle()
    error = result["scopesFailed"][0]["error"]
    assert "500" in error and "injected 500" in error  # the server's answer, not the library's exception text
    trail = json.dumps(result) + world.events_text()
    for secret in (TOKEN, EMAIL, base64.b64encode(f"{EMAIL}:{TOKEN}".encode()).decode()):
        assert secret not in trail


def test_j7_poll_reads_wait_longer_than_other_calls(world: JiraWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    """The library takes one timeout per session, so the poller reads through a client of its own (60 s vs 30 s);
    scaled down here: a 0.6 s answer is fine for a poll read and a timeout for any other call."""
    from the_loop_jira import poll, ticketing
    from the_loop_jira.client import JiraError

    monkeypatch.setattr(ticketing, "TIMEOUT_SECONDS", 0.2)
    monkeypatch.setattr(poll, "POLL_TIMEOUT_SECONDS", 5)
    config = world.load()
    world.fake.slow("GET", r"search/jql$|issue/PROJ-12$", 0.6)
    result = world.cycle()
    assert result["scopesPolled"] == 1 and result["itemsSeen"] == 1 and not result["scopesFailed"]
    with pytest.raises(JiraError, match=r"unreachable \(ReadTimeout\)"):
        ticketing.client_for(config).issue(parse_ref("jira:jira.test/PROJ-12"))


def test_j10_cloud_search_pages_by_token_caps_at_200_and_rechecks_each_hit(world: JiraWorld) -> None:
    for n in range(13, 13 + 250):
        world.fake.add_issue(f"PROJ-{n}", labels=["the-loop:auto-execute"])
    original = world.fake.answer

    def with_strays(request: Any) -> Any:
        status, body = original(request)
        if request.path.endswith("/search/jql") and "nextPageToken" not in request.query:
            stray = {"summary": "s", "labels": ["the-loop:auto-execute"], "status": {"statusCategory": {"key": "new"}}}
            body["issues"][:0] = [
                {"key": "PROJ-900", "fields": {**stray, "status": {"statusCategory": {"key": "done"}}}},
                {"key": "PROJ-901", "fields": {**stray, "labels": ["other"]}},
                {"key": "ABC-1", "fields": stray},
                {"key": "proj-2", "fields": stray},
            ]
        return status, body

    world.fake.answer = with_strays  # type: ignore[method-assign]  # a search answering more than it was asked
    issues = JiraPollSource(world.load()).client.search("PROJ", ["the-loop: auto-execute"])
    searches = world.fake.seen("GET", r"^/rest/api/3/search/jql$")
    assert [s.query.get("nextPageToken") for s in searches] == [None, "100"]
    assert all(s.query["maxResults"] == "100" and s.query["fields"] == "summary,labels,status" for s in searches)
    keys = [issue.key for issue in issues]
    assert len(keys) == 196 and not {"PROJ-900", "PROJ-901", "ABC-1", "proj-2"} & set(keys)


def test_j10_no_arming_label_fails_preflight(world: JiraWorld) -> None:
    world.load(routing={"autoExecuteLabels": []})
    result = world.cycle()
    assert "no arming label" in result["scopesFailed"][0]["error"]
    assert world.fake.seen("GET", "search") == []


def test_j12_beyond_5000_comments_the_newest_5000_are_kept_with_a_warning(world: JiraWorld) -> None:
    ids = [world.fake.add_comment("PROJ-12", f"c{n}", "acc-x") for n in range(5001)]
    result = world.cycle()
    assert result["failures"] == 0
    assert world.portable()["poll"]["seenComments"] == ids[1:]
    pages = world.fake.seen("GET", r"/issue/PROJ-12/comment$")
    assert len(pages) == 51 and all(p.query["maxResults"] == "100" for p in pages)
    warned = world.events("poll.item_error")
    assert warned and "more than 5000 comments" in warned[-1]["error"]


def test_j13_without_myself_there_are_no_relays_and_only_the_marker_is_self(world: JiraWorld) -> None:
    world.fake.fail("GET", r"/myself$", 403, times=100)  # refused for good: J13's marker-only mode
    world.load()
    world.cycle()
    relay = world.fake.add_comment("PROJ-12", "the-loop pause\n\n[the-loop:relay]", "acc-bot")
    unmarked = world.fake.add_comment("PROJ-12", "status update", "acc-bot")
    world.fake.add_comment("PROJ-12", "done\n\n[the-loop:agent-comment]", "acc-bot")
    world.cycle()
    entries = {e["dedupe_key"]: e for e in world.inbox()}
    assert set(entries) == {f"jira-comment-jira.test-{relay}", f"jira-comment-jira.test-{unmarked}"}
    assert all(e["actor"]["provider"] == "jira" and "x-the-loop-relay" not in e["excerpt"] for e in entries.values())
    settled = [e["reason"] for e in world.events("poll.comment_settled")]
    assert settled == ["self-authored"]


def test_one_tickets_unexpected_failure_leaves_the_others_polled(
    world: JiraWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state error on one ticket (its record cannot be written) is that ticket's ``poll.item_error``, not the
    cycle's: the tickets after it are still polled."""
    from the_loop.state import StateError
    from the_loop.state.store import WorkItemStore

    world.fake.add_issue("PROJ-13", labels=["the-loop:auto-execute"])
    comment = world.fake.add_comment("PROJ-13", "hello", "acc-x")
    write = WorkItemStore.update_section

    def failing_for_proj_12(self: Any, ref: Any, section: str, value: Any) -> Any:
        if str(ref).endswith("/PROJ-12"):
            raise StateError("injected: the record cannot be written")
        return write(self, ref, section, value)

    monkeypatch.setattr(WorkItemStore, "update_section", failing_for_proj_12)  # an injected fault
    result = world.cycle()
    assert result["itemsSeen"] == 2 and result["failures"] == 1 and not result["scopesFailed"]
    errors = world.events("poll.item_error")
    assert [(e["work_item"], e["will_retry"]) for e in errors] == [("jira:jira.test/PROJ-12", True)]
    assert world.portable("PROJ-13")["poll"]["seenComments"] == [comment]


def test_a_stop_request_is_heeded_between_tickets(world: JiraWorld) -> None:
    world.fake.add_issue("PROJ-13", labels=["the-loop:auto-execute"])
    asked = {"n": 0}

    def stop_after_the_first_ticket() -> bool:
        asked["n"] += 1
        return bool(world.fake.seen("GET", r"/comment$"))

    source = JiraPollSource(world.load())
    result = source.poll_once(ServiceContext(config=source.config, should_stop=stop_after_the_first_ticket))
    assert result["interrupted"] is True and result["itemsSeen"] == 1
    assert [r.path for r in world.fake.seen("GET", r"/comment$")] == ["/rest/api/3/issue/PROJ-12/comment"]


def test_a_429_stops_asking_the_site_for_the_rest_of_the_cycle(
    world: JiraWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from the_loop_jira import client

    monkeypatch.setattr(client, "MAX_RETRY_DELAY", 0)  # the library's own waits, not under test
    world.fake.add_issue("PROJ-13", labels=["the-loop:auto-execute"])
    world.fake.fail("GET", r"/issue/PROJ-12/comment$", 429, times=3)
    source = JiraPollSource(world.load())
    result = source.poll_once(ServiceContext(config=source.config, should_stop=lambda: False))
    assert "429" in result["throttled"] and result["failures"] == 1
    assert len(world.fake.seen("GET", r"/issue/PROJ-12/comment$")) == 3  # the library's two retries, then no more
    assert world.fake.seen("GET", r"/issue/PROJ-13") == []  # not asked this cycle …
    assert world.cycle()["itemsSeen"] == 2  # … and polled as usual the next
    assert world.fake.seen("GET", r"/issue/PROJ-13/comment$")


def test_j13_a_passing_myself_failure_retries_the_ticket_rather_than_refuse_a_relay(world: JiraWorld) -> None:
    world.load()
    relay = world.fake.add_comment("PROJ-12", "the-loop pause\n\n[the-loop:relay]", "acc-bot")
    world.fake.fail("GET", r"/myself$", 500)
    assert world.cycle()["failures"] == 1 and world.inbox_keys() == []
    assert not world.record_path("portable").exists()  # nothing marked seen: the thread is judged next cycle
    world.cycle()
    (event,) = world.inbox()
    assert event["dedupe_key"] == f"jira-comment-jira.test-{relay}"
    assert event["actor"] == {"provider": "jira-relay", "id": "operator", "name": ""}


def test_a_reopened_ticket_seen_by_the_poller_closes_again(world: JiraWorld) -> None:
    """Jira sends no reopened event: a ticket that ended by closing and is listed again was reopened, so the inbox
    forgets its close keys and the next Done is a new close rather than a duplicate of the first."""
    from the_loop.inbox import Inbox
    from the_loop_jira.normalize import closure_event

    config = world.load()
    ref = parse_ref("jira:jira.test/PROJ-12")
    source = JiraPollSource(config)
    world.fake.issues["PROJ-12"].category = "done"
    first = closure_event(ref, source.client.issue(ref), "poll")
    queue = Inbox.for_config(config)
    assert queue.put(first.dedupe_key, first.inbox_entry())
    queue.settle(*queue.pending())  # that close was handled: its key is remembered …
    source.store.update_section(ref, "ended", {"state": "closed", "kind": "issue", "reason": "issue-closed"})
    world.fake.issues["PROJ-12"].category = "indeterminate"  # … and the ticket reopened in Jira
    world.cycle()
    assert "ended" not in world.portable()
    reopened = world.events("work_item.reopened")
    assert [(e["work_item"], e["source"]) for e in reopened] == [(str(ref), "poll")]
    again = closure_event(ref, source.client.issue(ref), "webhook")
    assert again.dedupe_key == first.dedupe_key  # one key whichever ingress saw the close
    assert Inbox.for_config(config).put(again.dedupe_key, again.inbox_entry())  # a new close, not a duplicate


def test_a_pr_merge_that_ended_a_listed_ticket_is_no_reopen(world: JiraWorld) -> None:
    config = world.load()
    ref = parse_ref("jira:jira.test/PROJ-12")
    JiraPollSource(config).store.update_section(ref, "ended", {"state": "merged", "reason": "pr-merged"})
    world.cycle()
    assert world.portable()["ended"]["reason"] == "pr-merged"
    assert not world.events("work_item.reopened")
