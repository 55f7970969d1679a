"""The API under ``/api/v1/`` against the real control plane, the real receiver, the fake GitHub and the fake harness
on a private tmux server: reads, filters, paging, the live stream, questions, and every action through the same
operations the CLI runs, logged with the acting principal."""

from __future__ import annotations

import json
import threading
from typing import Any
from urllib.parse import quote

import httpx
from gh_world import REF
from web_world import ITEM, WebWorld

from the_loop.testing import wait_for


def write_record(world: WebWorld, ref: str, **sections: Any) -> None:
    """A portable record for ``ref`` with ``sections`` (what a poller or a control comment would have written)."""
    from the_loop.state import StateLayout
    from the_loop.state.slugs import slug_of

    world.gh.add_sections(slug_of(StateLayout(world.env.root), ref), ref=ref, **sections)


def control(command: str) -> dict[str, str]:
    return {"command": command, "source": "github", "actor": "octocat", "requestedAt": "2026-12-01T10:00:00Z"}


def test_health_instance_and_the_openapi_document(web_world: Any) -> None:
    world = web_world()
    assert world.api("GET", "/api/v1/health", token=None).json() == {"status": "ok"}
    instance = world.api("GET", "/api/v1/instance").json()
    assert instance["role"] == "gateway-worker" and instance["version"] and instance["name"]
    document = world.api("GET", "/api/v1/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert {"/api/v1/work-items", "/api/v1/work-items/{ref}/say", "/api/v1/events/stream"} <= set(document["paths"])


def test_the_list_shows_a_running_item_with_its_harness_and_filters_and_pages(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    write_record(world, "github:octo/other#3", control=control("pause"))
    write_record(world, "jira:acme.atlassian.net/ABC-9", control=control("start"))
    listed = world.api("GET", "/api/v1/work-items").json()
    assert listed["total"] == 3
    rows = {row["ref"]: row for row in listed["items"]}
    running = rows[REF]
    assert running["state"] == "running" and running["harness"] == "fake" and running["status"] == "active"
    assert running["tmuxTarget"] == "loop-github-octo-repo-15" and running["lastActivity"]
    assert running["waiting"] is False and running["stale"] is False
    assert rows["github:octo/other#3"]["state"] == "paused"
    assert rows["jira:acme.atlassian.net/ABC-9"]["state"] == "armed"
    assert listed["items"][0]["ref"] == REF  # the newest activity first

    def refs(query: str) -> list[str]:
        return [row["ref"] for row in world.api("GET", f"/api/v1/work-items?{query}").json()["items"]]

    assert refs("state=paused,armed") == ["github:octo/other#3", "jira:acme.atlassian.net/ABC-9"]
    assert refs("provider=jira") == ["jira:acme.atlassian.net/ABC-9"]
    assert refs("repository=octo/repo") == [REF]
    assert refs("waiting=true") == []
    page = world.api("GET", "/api/v1/work-items?limit=1&offset=1").json()
    assert page["total"] == 3 and page["limit"] == 1 and len(page["items"]) == 1
    assert page["items"][0]["ref"] == "github:octo/other#3"


def test_one_item_has_its_record_sessions_and_last_events(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    found = world.api("GET", ITEM).json()
    assert found["ref"] == REF and found["state"] == "running"
    assert found["record"]["control"]["command"] == "start"
    assert [session["tmuxTarget"] for session in found["sessions"]] == ["loop-github-octo-repo-15"]
    assert any(entry["event"] == "session.spawned" for entry in found["events"])
    assert all(entry.get("work_item") == REF or REF in entry.get("work_items", []) for entry in found["events"])
    # An unencoded slash in the ref still finds it; a ref nobody tracks is 404.
    assert world.api("GET", "/api/v1/work-items/github:octo/repo%2315").status_code == 200
    assert world.api("GET", "/api/v1/work-items/" + quote("github:octo/repo#99", safe="")).status_code == 404
    assert world.api("GET", "/api/v1/work-items/not-a-ref").status_code == 404


def test_say_reaches_the_session_through_the_dispatcher_and_is_logged_with_the_principal(web_world: Any) -> None:
    world = web_world()
    harness = world.gh.start_work()
    said = world.api("POST", f"{ITEM}/say", token=world.operator, json={"text": "use the blue widget"})
    assert said.status_code == 200, said.text
    assert said.json()["ok"] is True and said.json()["tmuxTarget"] == "loop-github-octo-repo-15"
    wait_for(lambda: any("use the blue widget" in text for text in harness.submitted()), timeout=10)
    delivered = [e for e in world.gh.events("dispatch.succeeded") if e["delivery_id"].startswith("web-say-")]
    assert delivered and delivered[-1]["work_item"] == REF
    action = world.gh.events("web.action")[-1]
    assert action["principal"] == "operator" and action["action"] == "say" and action["ok"] is True
    # Bad bodies are 400 and deliver nothing.
    for body in ({}, {"text": "  "}, {"text": 7}):
        assert world.api("POST", f"{ITEM}/say", token=world.operator, json=body).status_code == 400
    assert world.api("POST", f"{ITEM}/say", token=world.operator, content=b"{not json").status_code == 400
    big = {"text": "x" * (70 * 1024)}
    assert world.api("POST", f"{ITEM}/say", token=world.operator, json=big).status_code == 413


def test_pause_resume_stop_and_cleanup_take_the_cli_paths(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    paused = world.api("POST", f"{ITEM}/pause", token=world.operator, json={"comment": False})
    assert paused.status_code == 200 and paused.json()["effect"] == "paused"
    assert world.gh.own()["status"] == "paused"
    assert world.gh.portable()["control"]["source"] == "web"
    assert world.gh.portable()["control"]["actor"] == "web:operator"
    again = world.api("POST", f"{ITEM}/pause", token=world.operator, json={"comment": False})
    assert again.json()["effect"] == "noop"
    said = world.api("POST", f"{ITEM}/say", token=world.operator, json={"text": "are you there"})
    assert said.status_code == 409 and said.json()["effect"] == "session-paused"
    resumed = world.api("POST", f"{ITEM}/resume", token=world.operator, json={})
    assert resumed.status_code == 200 and world.gh.own()["status"] == "active"
    comments = [c.body["body"] for c in world.gh.fake.calls("POST", r"/repos/octo/repo/issues/15/comments")]
    assert any("web:operator resumed this work item from the web control plane" in c for c in comments)
    stopped = world.api("POST", f"{ITEM}/stop", token=world.operator, json={"comment": False})
    assert stopped.status_code == 200 and stopped.json()["effect"] == "stopped"
    assert world.gh.portable()["control"]["command"] == "stop"
    assert world.gh.own()["status"] == "closed"
    cleaned = world.api("POST", f"{ITEM}/cleanup", token=world.operator, json={})
    assert cleaned.status_code == 200 and cleaned.json()["effect"] == "cleaned"
    assert world.gh.local() is None
    logged = [e for e in world.gh.events("control.command") if e["source"] == "web"]
    commands = [(e["command"], e["effect"], e["actor"]) for e in logged]
    assert commands == [
        ("pause", "paused", "web:operator"),
        ("pause", "noop", "web:operator"),
        ("resume", "resumed", "web:operator"),
        ("stop", "stopped", "web:operator"),
        ("cleanup", "cleaned", "web:operator"),
    ]
    assert world.api("POST", f"{ITEM}/pause", token=world.operator, json={"comment": "yes"}).status_code == 400


def test_questions_are_listed_until_answered_and_the_answer_reaches_the_session(web_world: Any) -> None:
    world = web_world()
    harness = world.gh.start_work()
    asked = world.env.run("ask", "--work-item", REF, "--question", "Which colour, <b>red</b> or blue?")
    assert asked.returncode == 0, asked.stderr
    found = world.api("GET", "/api/v1/questions").json()["questions"]
    assert [(q["workItem"], q["text"]) for q in found] == [(REF, "Which colour, <b>red</b> or blue?")]
    listed = world.api("GET", "/api/v1/work-items?waiting=true").json()["items"]
    assert [row["ref"] for row in listed] == [REF] and listed[0]["question"]["id"] == found[0]["id"]
    wrong = world.api("POST", f"{ITEM}/answer", token=world.operator, json={"text": "blue", "question": "nope"})
    assert wrong.status_code == 409 and wrong.json()["effect"] == "no-such-question"
    answered = world.api(
        "POST", f"{ITEM}/answer", token=world.operator, json={"text": "blue, please", "question": found[0]["id"]}
    )
    assert answered.status_code == 200, answered.text
    wait_for(lambda: any("blue, please" in text for text in harness.submitted()), timeout=10)
    assert world.api("GET", "/api/v1/questions").json()["questions"] == []
    closed = world.gh.events("question.answered")[-1]
    assert closed["question"] == found[0]["id"] and closed["actor"] == "web:operator"


def test_a_comment_on_the_ticket_answers_the_open_question_too(web_world: Any) -> None:
    world = web_world()
    harness = world.gh.start_work()
    assert world.env.run("ask", "--work-item", REF, "--question", "Ship it?").returncode == 0
    world.gh.comment("yes, ship it")
    world.gh.settled()
    wait_for(lambda: any("yes, ship it" in text for text in harness.submitted()), timeout=10)
    assert world.api("GET", "/api/v1/questions").json()["questions"] == []
    assert world.gh.events("question.answered")[-1]["source"] == "webhook"  # the WorkEvent's source


def test_events_take_the_cli_filters_and_the_stream_sends_what_is_appended(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    spawned = world.api("GET", "/api/v1/events?type=session.spawned").json()["events"]
    assert [entry["event"] for entry in spawned] == ["session.spawned"]
    assert world.api("GET", f"/api/v1/events?workItem={quote(REF)}&limit=2").json()["events"][-1]["work_item"] == REF
    assert world.api("GET", "/api/v1/events?since=yesterday-ish").status_code == 400
    assert world.api("GET", "/api/v1/events?level=loud").status_code == 400

    received: list[dict[str, Any]] = []
    connected = threading.Event()

    def listen() -> None:
        headers = {"authorization": f"Bearer {world.viewer}"}
        url = f"{world.url}/api/v1/events/stream?type=dispatch.succeeded"
        with httpx.stream("GET", url, headers=headers, timeout=30) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith(": connected"):
                    connected.set()  # the stream's starting point is taken: what is appended now is sent
                if line.startswith("data: "):
                    received.append(json.loads(line.removeprefix("data: ")))
                    return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert connected.wait(timeout=20), "the event stream never connected"
    world.gh.comment("one more thing")
    thread.join(timeout=20)
    assert received and received[0]["event"] == "dispatch.succeeded" and received[0]["work_item"] == REF


def test_sessions_lists_every_endpoint_with_its_pane(web_world: Any) -> None:
    world = web_world()
    world.gh.start_work()
    found = world.api("GET", "/api/v1/sessions").json()["sessions"]
    assert [(s["workItem"], s["endpoint"], s["pane"], s["status"]) for s in found] == [(REF, REF, "live", "active")]


def test_standing_sessions_are_listed_started_said_to_and_stopped_through_the_api(web_world: Any) -> None:
    """S15: the same calls as ``the-loop standing``; viewers read, operators act; the caller is the actor."""
    from the_loop.testing.harness import FakeHarness

    world = web_world()
    sessions = [{"name": "watcher", "prompt": "watch the work in flight", "autoStart": False}]
    world.env.edit_config(lambda config: config.update(standingSessions={"enabled": True, "sessions": sessions}))
    base = "/api/v1/standing-sessions"

    def listed() -> list[dict[str, Any]]:
        return world.api("GET", base).json()["sessions"]

    wait_for(lambda: [row["name"] for row in listed()] == ["watcher"], timeout=10)  # the service follows the edit
    assert listed()[0]["running"] is False and listed()[0]["status"] == "absent"
    assert world.api("GET", f"{base}/one", params={"name": "nobody"}).status_code == 404

    control = f"{base}/control"
    assert world.api("POST", control, json={"name": "watcher", "action": "start"}).status_code == 403  # a viewer
    started = world.api("POST", control, token=world.operator, json={"name": "watcher", "action": "start"})
    assert started.status_code == 200, started.text
    assert [row["outcome"] for row in started.json()["rows"]] == ["started"]
    row = world.api("GET", f"{base}/one", params={"name": "watcher"}).json()
    assert row["running"] is True and row["tmuxTarget"] == "loop-standing-watcher"
    harness = FakeHarness(world.gh.logs / f"{row['harnessSessionId']}.jsonl")

    said = world.api("POST", f"{base}/say", token=world.operator, json={"name": "watcher", "text": "status?"})
    assert said.status_code == 200, said.text
    wait_for(lambda: any("status?" in text for text in harness.submitted()), timeout=10)
    [text] = [text for text in harness.submitted() if "status?" in text]
    assert "web:operator" in text
    action = world.gh.events("web.action")[-1]
    assert (action["action"], action["standing"], action["principal"], action["ok"]) == (
        "standing.say",
        "watcher",
        "operator",
        True,
    )

    restarted = world.api("POST", control, token=world.operator, json={"name": "watcher", "action": "restart"})
    assert [row["outcome"] for row in restarted.json()["rows"]] == ["stopped", "resumed"], restarted.text
    stopped = world.api("POST", control, token=world.operator, json={"name": "watcher", "action": "stop"})
    assert [row["outcome"] for row in stopped.json()["rows"]] == ["stopped"]
    refused = world.api("POST", f"{base}/say", token=world.operator, json={"name": "watcher", "text": "hi"})
    assert refused.status_code == 409 and "the-loop standing start watcher" in refused.text  # never starts it
    for body in ({"name": "watcher", "action": "explode"}, {"name": "-x", "action": "start"}, {"action": "start"}):
        assert world.api("POST", control, token=world.operator, json=body).status_code == 400
    unknown = world.api("POST", control, token=world.operator, json={"name": "nobody", "action": "start"})
    assert unknown.status_code == 404


def test_standing_sessions_are_created_and_deleted_through_the_api(web_world: Any) -> None:
    world = web_world()
    base = "/api/v1/standing-sessions"
    body = {"name": "ops", "prompt": "keep the lights on", "autoStart": False, "start": False}
    assert world.api("POST", f"{base}/create", json=body).status_code == 403  # a viewer
    made = world.api("POST", f"{base}/create", token=world.operator, json=body)
    assert made.status_code == 200, made.text
    assert [row["outcome"] for row in made.json()["rows"]] == ["created"]
    row = world.api("GET", f"{base}/one", params={"name": "ops"}).json()
    assert (row["declared"], row["status"], row["autoStart"]) == (False, "stopped", False)
    assert world.api("POST", f"{base}/create", token=world.operator, json=body).status_code == 409  # it exists
    bad = world.api("POST", f"{base}/create", token=world.operator, json={"name": "x", "harnessArgs": "--y"})
    assert bad.status_code == 400
    broken = world.api("POST", f"{base}/create", token=world.operator, json={"name": "far", "cwd": "/nonexistent"})
    assert broken.status_code == 409 and [r["outcome"] for r in broken.json()["rows"]] == ["created", "failed"]
    assert world.api("GET", f"{base}/one", params={"name": "far"}).status_code == 404  # nothing half-made remains
    deleted = world.api("POST", f"{base}/delete", token=world.operator, json={"name": "ops"})
    assert [row["outcome"] for row in deleted.json()["rows"]] == ["not-running", "deleted"], deleted.text
    assert world.api("POST", f"{base}/delete", token=world.operator, json={"name": "ops"}).status_code == 404
