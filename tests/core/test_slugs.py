"""Issue 16 (3, 5): which slug a work item owns. Look-alike refs never share a record file; a record naming another
work item is never acted on; records written before refs were lower-cased are still found (real files)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from the_loop import events
from the_loop.refs import parse_ref, tmux_name
from the_loop.state import StateLayout, is_record_name
from the_loop.state.registry import Endpoint, SessionRegistry
from the_loop.state.slugs import SlugCollision, qualified_slug, slug_of, tmux_name_of
from the_loop.state.store import WorkItemStore

WEB_APP, ACME_WEB = "github:acme/web-app#1", "github:acme-web/app#1"  # both github-acme-web-app-1


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[StateLayout]:
    layout = StateLayout(tmp_path / ".the-loop")
    events.configure(layout.events_path, "cli")
    yield layout
    events.configure(None, "cli")


@pytest.fixture
def store(layout: StateLayout) -> WorkItemStore:
    return WorkItemStore(layout, url_for=lambda _ref: None)


def logged(layout: StateLayout, name: str) -> list[dict[str, Any]]:
    lines = layout.events_path.read_text().splitlines() if layout.events_path.exists() else []
    return [event for event in map(json.loads, lines) if event["event"] == name]


def test_the_second_of_two_look_alikes_gets_its_own_qualified_files_and_keeps_them(
    layout: StateLayout, store: WorkItemStore
) -> None:
    store.update_section(WEB_APP, "control", {"command": "start"})
    store.update_section(ACME_WEB, "control", {"command": "pause"})
    registry = SessionRegistry(layout)
    registry.update(ACME_WEB, lambda record: record.sessions.setdefault(ACME_WEB, Endpoint("fake")))

    qualified = qualified_slug(parse_ref(ACME_WEB))
    assert qualified.startswith("github-acme-web-app--") and is_record_name(f"{qualified}.json")
    assert slug_of(layout, WEB_APP) == "github-acme-web-app-1" and slug_of(layout, ACME_WEB) == qualified
    assert json.loads(layout.portable_record("github-acme-web-app-1").read_text())["ref"] == WEB_APP
    assert json.loads(layout.portable_record(qualified).read_text())["ref"] == ACME_WEB
    assert json.loads(layout.local_record(qualified).read_text())["workItem"] == ACME_WEB
    assert not layout.local_record("github-acme-web-app-1").exists()  # web-app has no session: nothing there
    assert (store.read(WEB_APP) or {})["control"] == {"command": "start"}
    assert (store.read(ACME_WEB) or {})["control"] == {"command": "pause"}
    assert tmux_name_of(layout, ACME_WEB) == tmux_name(qualified) != tmux_name_of(layout, WEB_APP)
    assert sorted(entry["file"] for entry in json.loads(layout.index_path.read_text())["workItems"]) == sorted(
        ["github-acme-web-app-1.json", f"{qualified}.json"]
    )

    store.update_section(WEB_APP, "control", None)  # web-app's record goes: the other keeps the name it has
    assert not layout.portable_record("github-acme-web-app-1").exists()
    assert slug_of(layout, ACME_WEB) == qualified and (store.read(ACME_WEB) or {})["control"]["command"] == "pause"


def test_a_name_tmux_spells_like_another_items_record_is_not_taken(layout: StateLayout, store: WorkItemStore) -> None:
    store.update_section("github:octo/a.b#1", "control", {"command": "start"})
    assert slug_of(layout, "github:octo/a_b#1") == qualified_slug(parse_ref("github:octo/a_b#1"))
    assert tmux_name_of(layout, "github:octo/a_b#1") != tmux_name_of(layout, "github:octo/a.b#1")


def test_a_record_that_names_another_work_item_is_reported_and_never_read_or_written(
    layout: StateLayout, store: WorkItemStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.update_section(WEB_APP, "control", {"command": "start"})
    path = layout.portable_record("github-acme-web-app-1")
    tampered = {"ref": ACME_WEB, "control": {"command": "start"}}
    path.write_text(json.dumps(tampered))  # hand-edited, or copied in from another tree
    assert store.read(WEB_APP) is None  # that file is acme-web's now: nothing of web-app's to act on
    store.update_section(WEB_APP, "control", {"command": "stop"})  # web-app writes under a name of its own
    assert slug_of(layout, WEB_APP) == qualified_slug(parse_ref(WEB_APP)) and json.loads(path.read_text()) == tampered

    # The race the check under the lock is for: the name was chosen before another process wrote its record there.
    monkeypatch.setattr("the_loop.state.store.slug_of", lambda _layout, _ref: "github-acme-web-app-1")
    monkeypatch.setattr("the_loop.state.registry.slug_of", lambda _layout, _ref: "github-acme-web-app-1")
    assert store.read(WEB_APP) is None
    with pytest.raises(SlugCollision, match="holds the record of github:acme-web/app#1"):
        store.update_section(WEB_APP, "control", {"command": "stop"})
    layout.local_record("github-acme-web-app-1").write_text(json.dumps({"version": 2, "workItem": ACME_WEB}))
    with pytest.raises(SlugCollision):
        SessionRegistry(layout).update(WEB_APP, lambda record: None)
    assert SessionRegistry(layout).load(WEB_APP) is None and not SessionRegistry(layout).forget(WEB_APP)
    assert json.loads(path.read_text()) == tampered and layout.local_record("github-acme-web-app-1").exists()
    reports = logged(layout, "state.record_foreign")
    assert reports and all((r["work_item"], r["found"], r["level"]) == (WEB_APP, ACME_WEB, "error") for r in reports)


def test_when_every_name_is_held_by_others_the_work_item_is_refused_not_given_theirs(
    layout: StateLayout, store: WorkItemStore
) -> None:
    qualified = qualified_slug(parse_ref(ACME_WEB))
    store.update_section(WEB_APP, "control", {"command": "start"})
    layout.portable_record(qualified).write_text(json.dumps({"ref": "github:someone/else#1", "control": {}}))
    with pytest.raises(SlugCollision, match="both held by other work items"):
        slug_of(layout, ACME_WEB)
    assert store.read(ACME_WEB) is None
    with pytest.raises(SlugCollision):
        store.update_section(ACME_WEB, "control", {"command": "start"})
    assert SessionRegistry(layout).load(ACME_WEB) is None


def test_records_written_before_refs_were_lower_cased_are_still_the_items_own(
    layout: StateLayout, store: WorkItemStore
) -> None:
    layout.portable_dir.mkdir(parents=True)
    layout.local_dir.mkdir(parents=True)
    old = {"ref": "github:Octo/Repo#1", "control": {"command": "start", "actor": "octocat"}}
    layout.portable_record("github-Octo-Repo-1").write_text(json.dumps(old))
    session = {"harness": "fake", "status": "active", "tmuxTarget": "loop-github-Octo-Repo-1"}
    local = {"version": 2, "workItem": "github:Octo/Repo#1", "sessions": {"github:Octo/Repo#1": session}}
    layout.local_record("github-Octo-Repo-1").write_text(json.dumps(local))

    ref = "github:OCTO/repo#1"  # however it is typed now
    assert slug_of(layout, ref) == "github-Octo-Repo-1"
    assert (store.read(ref) or {})["control"]["actor"] == "octocat"
    record = SessionRegistry(layout).load(ref)
    assert record is not None and record.work_item == "github:octo/repo#1"
    assert record.own is not None and record.own.tmux_target == "loop-github-Octo-Repo-1"  # the session kept its name
    store.update_section(ref, "control", {"command": "pause"})
    assert sorted(p.name for p in layout.portable_dir.glob("*.json")) == ["github-Octo-Repo-1.json", "index.json"]
    assert json.loads(layout.portable_record("github-Octo-Repo-1").read_text())["ref"] == "github:octo/repo#1"
