"""The provider-neutral router over normalized events, on real tmux with the fake harness and the fake ticket
provider (scheme ``fake``). Scenario ids are ingress-routing.md §6 (A…), adapted to normalized events: the GitHub
plugin's tests cover the same scenarios from signed HTTP deliveries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from the_loop.refs import parse_ref
from the_loop.sessions.dispatcher import Outcome
from the_loop.state.slugs import tmux_name_of
from the_loop.testing import fake_plugin, wait_for
from the_loop.testing.harness import FakeHarness
from the_loop.testing.world import LABEL, REF, World

ROUTER = {
    "repositories": ["octo/repo"],
    "routing": {
        "enabled": True,
        "spawnOnUnmatched": "labeled",
        "authorizedUsers": ["octocat", {"name": "Dana", "github": "Dana-GH"}],
        "tmux": {"resumeProbeSeconds": 0.3},
    },
}


@pytest.fixture
def world(world: World) -> World:
    world.configure(defaults=ROUTER)
    return world


def handle(world: World, *args: Any, **kwargs: Any) -> Outcome:
    """Route one event made by ``world.inbound_event(*args, **kwargs)``."""
    return world.router.handle(world.inbound_event(*args, **kwargs))


def started(world: World) -> FakeHarness:
    outcome = handle(world, "the-loop start")
    assert outcome.reason == "control-executed", outcome
    harness = world.harness()
    harness.wait_ready(screen=lambda: world.runner.capture(world.own().tmux_target))
    return harness


def test_a4_an_authorized_start_spawns_records_control_announces_and_reacts(world: World) -> None:
    harness = started(world)
    assert world.own().tmux_target == "loop-fake-octo-repo-15"
    boot = harness.submitted()[0]
    assert "fake:octo/repo#15" in boot and '"body": "the-loop start"' in boot
    control = world.control()
    assert control is not None and control["command"] == "start" and control["source"] == "comment"
    assert control["actor"] == "octocat" and control["note"].startswith("https://tickets.example/")
    ticket = world.ticket()
    assert sum("attach -t loop-fake-octo-repo-15" in c for c in ticket["comments"]) == 1
    assert [r["reaction"] for r in ticket["reactions"]] == ["eyes", "hooray"]
    assert world.events("control.command")[0]["effect"] == "started"


def test_a5_a_comment_reaches_the_live_session_as_one_message_with_a_clean_excerpt(world: World) -> None:
    harness = started(world)
    assert handle(world, "please add tests").status == "delivered"
    message = harness.wait_for_submitted(2)[-1]
    fenced = message.split("```json\n", 1)[1].rsplit("\n```", 1)[0]
    assert json.loads(fenced) == {"comment": {"body": "please add tests", "author": "octocat"}}
    assert "untrusted" in message


def test_a6_the_same_object_is_delivered_once_even_after_a_restart(world: World) -> None:
    harness = started(world)
    assert handle(world, "once", key="fake:comment:dup").status == "delivered"
    world.configure()  # a restart: a new router and dispatcher
    assert handle(world, "once", key="fake:comment:dup").reason == "already-processed"
    harness.wait_for_submitted(2)
    assert sum("once" in text for text in harness.submitted()) == 1


def test_a7_strangers_and_self_authored_comments_are_dropped_first(world: World) -> None:
    started(world)
    assert handle(world, "hi", actor="mallory").reason == "unauthorized-actor"
    marked = f"done\n\n{fake_plugin.MARKER}"
    assert handle(world, marked, actor="mallory").reason == "self-authored"  # before the actor is even read
    assert handle(world, None, actor=None).reason == "unauthorized-actor"  # actor-less content fails closed
    reasons = [e["reason"] for e in world.events("routing.dropped")]
    assert reasons == ["unauthorized-actor", "self-authored", "unauthorized-actor"]
    assert world.events("routing.dropped")[0]["level"] == "warning"


def test_authorized_users_match_by_provider_id_case_insensitively(world: World) -> None:
    assert handle(world, "the-loop start", actor="dana-gh").reason == "control-executed"


def test_a8_unstarted_items_suppress_comments_and_a_later_start_does_not_replay_them(world: World) -> None:
    assert handle(world, "hello").reason == "awaiting-start"
    assert world.endpoint() is None
    harness = started(world)
    assert all("hello" not in text for text in harness.submitted())


def test_a9_an_unlabeled_start_is_refused_and_arms_nothing(world: World) -> None:
    assert handle(world, "the-loop start", labels=()).error == "spawn-policy"
    assert world.control() is None
    assert world.events("control.rejected")[0]["reason"] == "spawn-policy"
    assert handle(world, "now labelled", labels=(LABEL,)).reason == "awaiting-start"
    assert world.endpoint() is None


def test_a10_prose_and_quotes_are_conversation_and_two_commands_execute_nothing(world: World) -> None:
    harness = started(world)
    for body in ("I will say the-loop start later", "> the-loop stop", "the-loop start\nthe-loop stop"):
        assert handle(world, body).status == "delivered"
    harness.wait_for_submitted(4)
    assert world.events("control.ambiguous")[0]["commands"] == ["start", "stop"]
    assert world.own().status == "active"


def test_a11_pause_suppresses_and_resume_does_not_replay(world: World) -> None:
    harness = started(world)
    assert handle(world, "the-loop pause").reason == "control-executed"
    assert world.own().status == "paused"
    assert handle(world, "while paused").reason == "session-paused"
    assert handle(world, "the-loop resume").reason == "control-executed"
    handle(world, "after resume")
    assert harness.wait_for_submitted(2)[1:] == [harness.submitted()[-1]]
    assert "after resume" in harness.submitted()[-1]
    assert all("while paused" not in text for text in harness.submitted())
    assert handle(world, "the-loop resume").error == "nothing-to-resume"


def test_a12_stop_closes_and_a_later_comment_waits_for_a_new_start(world: World) -> None:
    harness = started(world)
    assert handle(world, "the-loop stop").reason == "control-executed"
    assert world.own().status == "closed"
    harness.wait_for("exit")
    assert world.runner.probe("loop-fake-octo-repo-15") == "dead"  # retained, readable
    assert handle(world, "are you there").reason == "awaiting-start"
    assert world.control()["command"] == "stop"


def test_a17_an_undeclared_repository_is_dropped_before_anything_else(world: World) -> None:
    outcome = handle(world, "the-loop start", repository="octo/other", ref="fake:octo/other#1", actor="mallory")
    assert outcome.reason == "undeclared-repository"
    assert world.events("routing.dropped")[0]["repository"] == "octo/other"
    assert not world.tickets.exists()  # no API call at all


def test_a_collaborator_is_input_only(world: World) -> None:
    from the_loop.state.store import WorkItemStore

    WorkItemStore(world.config.state).update_section(REF, "collaborators", {"users": [{"login": "dana"}]})
    assert handle(world, "the-loop start", actor="Dana").error == "unauthorized-actor"  # no control
    assert handle(world, "hello", actor="dana").reason == "collaborator-no-spawn"  # no spawn
    harness = started(world)
    assert handle(world, "from a collaborator", actor="dana").status == "delivered"
    assert "from a collaborator" in harness.wait_for_submitted(2)[-1]
    assert world.events("routing.routed")[-1]["collaborator"] is True


def test_closes_never_spawn_or_prompt_and_an_untracked_close_writes_nothing(world: World) -> None:
    assert handle(world, None, actor="octocat", kind="closed", closed="issue-closed").reason == "untracked"
    assert world.endpoint() is None
    assert world.control() is None
    assert not world.config.state.portable_dir.exists()


def _portable(world: World) -> dict[str, Any]:
    return json.loads(world.config.state.portable_record("fake-octo-repo-15").read_text())


def test_a16_an_authorized_close_ends_the_item_and_cleans_up(world: World) -> None:
    harness = started(world)
    assert handle(world, None, actor="octocat", kind="closed", closed="issue-closed").reason == "work-item-ended"
    assert world.events("session.autoclosed")[0]["reason"] == "issue-closed"
    assert world.endpoint() is None  # cleanup deleted the local record
    assert world.runner.probe("loop-fake-octo-repo-15") == "absent"  # decision 3: cleanup kills the tmux session
    harness.wait_for("exit")
    portable = _portable(world)
    ended = portable["ended"]
    assert (ended["state"], ended["kind"], ended["reason"], ended["source"], ended["actor"]) == (
        "closed",
        "issue",
        "issue-closed",
        "webhook",
        "octocat",
    )
    assert portable["control"]["command"] == "cleanup"  # cleanup records it last: no re-spawn
    assert "lifecycle" not in portable
    assert handle(world, "are you there?").reason == "awaiting-start"
    assert all("are you there" not in text for text in harness.submitted())


@pytest.mark.parametrize(("actor", "reason"), [("mallory", "unauthorized-actor"), (None, "no-actor")])
def test_a16_an_unattributed_or_unauthorized_close_closes_but_defers_cleanup(
    world: World, actor: str | None, reason: str
) -> None:
    started(world)
    assert handle(world, None, actor=actor, kind="closed", closed="pr-merged").reason == "work-item-ended"
    assert world.own().status == "closed"  # kept, readable
    assert world.runner.probe("loop-fake-octo-repo-15") in ("dead", "live")  # not killed
    deferred = world.events("cleanup.deferred")[0]
    assert deferred["reason"] == reason and deferred["closed_as"] == "pr-merged"
    portable = _portable(world)
    assert portable["ended"]["state"] == "merged" and "control" not in portable  # disarmed


def test_a_second_close_of_an_ended_item_runs_nothing_again(world: World) -> None:
    """Two ingresses (or a redelivery) can each report the same close under different keys: the close path runs
    once — one autoclose, one ended stamp, one cleanup decision, one lifecycle round."""
    started(world)
    handle(world, None, actor="mallory", kind="closed", closed="issue-closed")
    first = _portable(world)["ended"]
    handle(world, None, actor="octocat", kind="closed", closed="issue-closed")  # later, and by someone authorized
    assert _portable(world)["ended"] == first  # the first close stands; no cleanup on the second
    assert len(world.events("session.autoclosed")) == 1 and len(world.events("cleanup.deferred")) == 1
    assert not world.events("session.cleaned")
    assert world.events("work_item.already_ended")[0]["work_item"] == REF


def test_a_reopened_item_clears_its_ended_stamp_and_routes_normally(world: World) -> None:
    started(world)
    handle(world, None, actor="mallory", kind="closed", closed="issue-closed")
    assert "ended" in _portable(world)
    assert handle(world, "reopened", actor="octocat", kind="reopened").reason == "awaiting-start"
    path = world.config.state.portable_record("fake-octo-repo-15")
    assert not path.exists() or "ended" not in _portable(world)  # nothing else was left: the record is gone
    assert world.events("work_item.reopened")[0]["work_item"] == REF


def test_requiring_no_start_command_lets_the_label_alone_spawn(world: World) -> None:
    world.configure(control={"requireStartCommand": False})
    assert handle(world, "just a comment").status == "spawned"
    assert "just a comment" in world.harness().wait_for_submitted(1)[0]


def test_a26_through_the_inbox_a_comment_queued_before_a_stop_is_delivered_first(world: World) -> None:
    from the_loop.inbox import Inbox
    from the_loop.inbox.worker import InboxWorker
    from the_loop.routing.service import inbox_handler

    harness = started(world)
    inbox = Inbox.for_config(world.config)
    comment, stop = world.inbound_event("C1: one more thing"), world.inbound_event("the-loop stop")
    assert inbox.put(comment.dedupe_key, comment.inbox_entry())
    assert inbox.put(stop.dedupe_key, stop.inbox_entry())
    assert not inbox.put(comment.dedupe_key, comment.inbox_entry())  # the same object from another ingress
    worker = InboxWorker(inbox, inbox_handler(world.router))
    assert worker.run_once() == 2
    assert "C1: one more thing" in harness.wait_for_submitted(2)[-1]
    assert world.own().status == "closed"
    assert inbox.pending() == []


def test_e25_an_input_received_hook_can_refuse_a_command(world: World, plugin_host: Any) -> None:
    from the_loop import hookimpl
    from the_loop.hooks.lifecycle import Decision

    harness = started(world)

    class NoCommands:
        @hookimpl
        def loop_input_received(self, ctx: Any) -> Decision | None:
            return Decision(proceed=False, reason="commands are off") if ctx.kind == "command" else None

    plugin_host.register(NoCommands(), "no-commands")
    assert handle(world, "the-loop stop").error == "input-refused"
    assert world.own().status == "active"
    assert world.events("control.rejected")[-1]["reason"] == "input-refused"
    assert handle(world, "still a comment").status == "delivered"
    assert "still a comment" in harness.wait_for_submitted(2)[-1]


def test_issue_381_every_auto_execute_label_is_required_and_an_empty_list_arms_nothing(world: World) -> None:
    world.configure(autoExecuteLabels=[LABEL, "team-a"])
    assert handle(world, "the-loop start", labels=(LABEL,)).error == "spawn-policy"  # another instance's label only
    assert world.control() is None and world.endpoint() is None
    routed = world.events("routing.routed")[-1]
    assert routed["labeled"] is False
    world.configure(autoExecuteLabels=[])
    assert handle(world, "the-loop start", labels=(LABEL, "team-a")).error == "spawn-policy"
    assert world.control() is None and world.endpoint() is None
    world.configure(autoExecuteLabels=[LABEL, "team-a"])
    assert handle(world, "the-loop start", labels=("team-a", LABEL, "bug")).reason == "control-executed"
    assert world.events("routing.routed")[-1]["labeled"] is True and world.endpoint() is not None


def test_issue_135_the_default_keywords_are_the_spaced_form_and_the_old_colon_form_is_prose(world: World) -> None:
    harness = started(world)
    assert handle(world, "the-loop:stop-execution").status == "delivered"  # the pre-issue-135 form is conversation
    assert world.own().status == "active"
    assert handle(world, "The-Loop   PAUSE").reason == "control-executed"
    assert world.own().status == "paused"
    assert len(harness.wait_for_submitted(2)) == 2


def test_c5_each_command_reports_its_effect_and_disarming_commands_always_record(world: World) -> None:
    def effect(body: str) -> tuple[str, str | None]:
        assert handle(world, body).reason == "control-executed"
        last = world.events("control.command")[-1]
        return last["effect"], (world.control() or {}).get("command")

    assert effect("the-loop pause") == ("noop", "pause")  # no session: recorded, nothing flipped
    assert effect("the-loop stop") == ("noop", "stop")  # disarms even without a session
    assert effect("the-loop cleanup") == ("nothing-to-clean", "cleanup")
    assert handle(world, "the-loop resume").error == "nothing-to-resume"
    assert world.control()["command"] == "cleanup"  # a refused resume records nothing
    started(world)
    assert effect("the-loop start") == ("noop", "start")  # already running
    assert effect("the-loop pause") == ("paused", "pause")
    assert effect("the-loop pause") == ("noop", "pause")
    assert effect("the-loop start") == ("resumed", "start")  # a start resumes a paused session
    assert world.own().status == "active"
    assert effect("the-loop stop") == ("stopped", "stop")
    assert effect("the-loop stop") == ("noop", "stop")
    command = world.events("control.command")[-1]
    assert (command["work_item"], command["command"], command["source"], command["actor"]) == (
        REF,
        "stop",
        "comment",
        "octocat",
    )


def test_c2_an_issue_or_pull_request_body_is_never_parsed_for_commands(world: World) -> None:
    assert handle(world, "the-loop start", kind="opened").reason == "awaiting-start"
    assert world.events("control.command") == [] and world.control() is None and world.endpoint() is None


# ------------------------------------------------------------------------------ issue 16: look-alike repositories

_owner = st.from_regex(r"[aAb][aAb-]{0,3}", fullmatch=True)  # GitHub logins: letters, digits and -
_repo = st.from_regex(r"[aAb][aAb._-]{0,4}", fullmatch=True)  # repository names add . and _


def _resplit(first: tuple[str, str]) -> tuple[str, str]:
    """The same characters split at another ``-`` (``acme/web-app`` → ``acme-web/app``), else the same name."""
    owner, repo = first
    joined = f"{owner}-{repo}"
    for cut in (i for i, c in enumerate(joined) if c == "-" and i != len(owner)):
        head, tail = joined[:cut], joined[cut + 1 :]
        if head and tail and not head.endswith("-") and not set(head) & {".", "_"} and tail[0] not in "-":
            return head, tail
    return first


def _alias(first: tuple[str, str]) -> tuple[str, str]:
    """A name tmux spells alike (``a.b`` and ``a_b``)."""
    owner, repo = first
    return owner, repo.replace(".", "_") if "." in repo else repo.replace("_", ".")


def _recased(first: tuple[str, str]) -> tuple[str, str]:
    return first[0].swapcase(), first[1].swapcase()


_pairs = st.tuples(_owner, _repo).flatmap(
    lambda first: st.tuples(
        st.just(first),
        st.one_of(  # mostly look-alikes: split otherwise, spelled alike by tmux, in another case, or all of these
            st.tuples(_owner, _repo),
            st.just(_resplit(first)),
            st.just(_alias(first)),
            st.just(_recased(first)),
            st.just(_recased(_alias(_resplit(first)))),
        ),
    )
)


def _files(directory: Path) -> dict[str, str]:
    """record file → the ref it names."""
    found = {}
    for path in sorted(directory.glob("*.json")) if directory.exists() else []:
        data = json.loads(path.read_text())
        if "ref" in data or "workItem" in data:
            found[path.name] = data.get("ref") or data.get("workItem")
    return found


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=_pairs)
def test_issue_16_two_work_items_never_share_a_record_file_an_index_entry_or_a_tmux_name(
    pair: tuple[tuple[str, str], tuple[str, str]], tmp_path_factory: Any, world: World
) -> None:
    """Through the real router and dispatcher on real tmux: whatever the two repositories are called, two work
    items get two record files, two index entries and two tmux sessions, and one item spelled twice gets one."""
    world.runner.kill_server()
    here = World(tmp_path_factory.mktemp("example"), world.runner, world.host)
    names = [f"{owner}/{repo}" for owner, repo in pair]
    here.configure(defaults=ROUTER, repositories=tuple(names))
    refs = [f"fake:{name}#1" for name in names]
    outcomes = [handle(here, "the-loop start", ref=ref, repository=name) for ref, name in zip(refs, names, strict=True)]
    canonical = [str(parse_ref(ref)) for ref in refs]
    state = here.config.state
    local, portable = _files(state.local_dir), _files(state.portable_dir)
    index = json.loads(state.index_path.read_text())["workItems"]
    assert [o.reason for o in outcomes] == ["control-executed"] * 2, outcomes
    spawned = [event["work_item"] for event in here.events("session.spawned")]
    if canonical[0] == canonical[1]:  # one work item, however it was spelled
        assert spawned == [canonical[0]]
        assert list(local.values()) == list(portable.values()) == [canonical[0]] and len(index) == 1
        assert len(here.runner.list_sessions()) == 1
        return
    assert spawned == canonical
    assert sorted(local.values()) == sorted(portable.values()) == sorted(canonical)  # one file each, its own
    assert len({entry["file"] for entry in index}) == 2 and sorted(e["ref"] for e in index) == sorted(canonical)
    targets = [here.own(ref).tmux_target for ref in canonical]
    assert len(set(targets)) == 2 and sorted(here.runner.list_sessions()) == sorted(targets)


def test_issue_16_a_tmux_name_another_items_record_points_at_is_never_cleared_or_reused(world: World) -> None:
    """Records from before slugs were owned can still share a tmux name (``a.b`` and ``a_b``): the second item's
    spawn fails loudly with the remedy, and the first item's retained pane is left as it is."""
    world.configure(repositories=("octo/a.b", "octo/a_b"))
    dotted, underscored = "fake:octo/a.b#1", "fake:octo/a_b#1"
    assert handle(world, "the-loop start", ref=dotted, repository="octo/a.b").reason == "control-executed"
    target = world.own(dotted).tmux_target
    listed = [*world.runner.command_prefix, "list-panes", "-t", f"={target}", "-F", "#{pane_pid}"]
    [pid] = subprocess.run(listed, capture_output=True, text=True, check=True).stdout.split()
    os.kill(int(pid), signal.SIGKILL)  # its harness dies; remain-on-exit keeps the dead pane under the name
    wait_for(lambda: world.runner.probe(target) == "dead")
    legacy = world.config.state.local_record("fake-octo-a_b-1")  # a_b's own record, under the plain name
    legacy.write_text(json.dumps({"version": 2, "workItem": underscored, "sessions": {}}))
    assert tmux_name_of(world.config.state, underscored) == target

    outcome = handle(world, "the-loop start", ref=underscored, repository="octo/a_b")

    assert (outcome.status, outcome.will_retry) == ("failed", False), outcome
    [failed] = [e for e in world.events("session.spawn_failed") if e["work_item"] == underscored]
    assert f"belongs to {dotted}" in failed["error"] and "sessions reset --work-item" in failed["error"]
    assert failed["will_retry"] is False
    assert world.runner.probe(target) == "dead" and world.runner.list_sessions() == [target]  # never cleared
    assert not (world.endpoint(underscored) or None) and world.own(dotted).tmux_target == target
    assert handle(world, "hello", ref=underscored, repository="octo/a_b").reason != "delivered"
