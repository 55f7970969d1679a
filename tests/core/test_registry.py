"""The session registry: v2 records, v1 read compatibility, tmux-name healing, caps, listing rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from the_loop.state import StateLayout
from the_loop.state.registry import Endpoint, SessionRegistry

REF = "github:octo/repo#15"


@pytest.fixture
def registry(tmp_path: Path) -> SessionRegistry:
    return SessionRegistry(StateLayout(root=tmp_path / ".the-loop"))


def test_update_creates_a_v2_record_with_the_seed_shape(registry: SessionRegistry) -> None:
    def spawn(record):
        record.sessions[REF] = Endpoint(
            harness="claude",
            harness_session_id="abc",
            cwd="/w",
            created_at="t0",
            tmux_target="loop-github-octo-repo-15",
        )

    registry.update(REF, spawn)
    path = registry.path(REF)
    assert path.name == "github-octo-repo-15.json"
    data = json.loads(path.read_text())
    assert data["version"] == 2
    assert data["workItem"] == REF
    assert data["sessions"][REF] == {
        "harness": "claude",
        "harnessSessionId": "abc",
        "cwd": "/w",
        "status": "active",
        "createdAt": "t0",
        "lastEventAt": None,
        "tmuxTarget": "loop-github-octo-repo-15",
        "recentDeliveries": [],
    }
    assert "runner" not in data["sessions"][REF]
    assert path.stat().st_mode & 0o777 == 0o600


def test_v1_record_is_read_and_rewritten_as_v2_with_the_tmux_spelling(registry: SessionRegistry) -> None:
    ref = "github:octo/foo.js#15"
    path = registry.path(ref)
    path.parent.mkdir(parents=True)
    v1 = {
        "workItem": {"ref": ref, "provider": "github", "owner": "octo", "repo": "foo.js", "number": 15},
        "harness": "claude",
        "harnessSessionId": "s1",
        "cwd": "/w",
        "status": "active",
        "tmuxTarget": "loop-github-octo-foo.js-15",
        "recentDeliveries": ["d1"],
        "runner": "process",
        "pullRequests": [{"workItem": {"ref": "github:octo/lib#7"}, "harness": "claude", "tmuxTarget": ""}],
    }
    path.write_text(json.dumps(v1))
    record = registry.load(ref)
    assert record is not None
    assert record.own is not None and record.own.tmux_target == "loop-github-octo-foo_js-15"
    assert set(record.sessions) == {ref, "github:octo/lib#7"}
    registry.update(ref, lambda r: None)
    data = json.loads(path.read_text())
    assert data["version"] == 2
    assert data["sessions"][ref]["tmuxTarget"] == "loop-github-octo-foo_js-15"
    assert "runner" not in data["sessions"][ref]
    assert data["sessions"][ref]["recentDeliveries"] == ["d1"]


def test_recent_deliveries_keep_the_last_fifty(registry: SessionRegistry) -> None:
    endpoint = Endpoint(harness="claude")
    for n in range(60):
        endpoint.remember(f"d{n}")
    endpoint.remember("d59")  # a repeat is not appended twice
    assert endpoint.recent_deliveries == [f"d{n}" for n in range(10, 60)]


def test_unknown_keys_survive_a_rewrite(registry: SessionRegistry) -> None:
    path = registry.path(REF)
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "version": 2,
                "workItem": REF,
                "futureKey": 1,
                "sessions": {REF: {"harness": "claude", "tmuxTarget": "loop-x", "custom": "kept"}},
            }
        )
    )
    registry.update(REF, lambda r: None)
    data = json.loads(path.read_text())
    assert data["futureKey"] == 1
    assert data["sessions"][REF]["custom"] == "kept"


def test_listing_ignores_unrelated_files_and_skips_unreadable_ones(
    registry: SessionRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.update(REF, lambda r: r.sessions.setdefault(REF, Endpoint(harness="claude")))
    local = registry.layout.local_dir
    (local / "github-octo-repo-16.json").write_text("{bad")
    (local / "notes.json").write_text("{bad")
    (local / "poll-clocks.json").write_text("{}")
    refs = [record.work_item for record in registry.records()]
    assert refs == [REF]
    err = capsys.readouterr().err
    assert "github-octo-repo-16.json" in err
    assert "notes.json" not in err


def test_an_unreadable_pull_request_entry_degrades_to_unrecorded(registry: SessionRegistry) -> None:
    path = registry.path(REF)
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps({"version": 2, "workItem": REF, "sessions": {REF: {"harness": "claude"}, "github:o/r#7": "junk"}})
    )
    record = registry.load(REF)
    assert record is not None and set(record.sessions) == {REF}


def test_forget_deletes_only_the_record(registry: SessionRegistry) -> None:
    registry.update(REF, lambda r: r.sessions.setdefault(REF, Endpoint(harness="claude")))
    assert registry.forget(REF) is True
    assert not registry.path(REF).exists()
    assert registry.forget(REF) is False
