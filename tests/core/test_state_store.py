"""The portable work-item store: atomic writes, quarantine, locking across processes, crash safety, the index."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from the_loop import events, hookimpl
from the_loop.config import LoadedConfig, load_config
from the_loop.interfaces import TicketProvider
from the_loop.refs import WorkItemRef
from the_loop.state import GENERATED_PATHS, StateError, StateLayout, dump_json, gitignore_block
from the_loop.state.store import WorkItemStore
from the_loop.testing import gitignore_ignores

REF = "github:octo/repo#15"
SLUG = "github-octo-repo-15"
TEMP_NAME = re.compile(r"^\.[A-Za-z0-9._-]+\.[A-Za-z0-9_]+\.tmp$")  # what mkstemp(prefix=".<name>.", ".tmp") makes


def no_url(_ref: WorkItemRef) -> None:
    return None


@pytest.fixture
def layout(tmp_path: Path) -> StateLayout:
    return StateLayout(tmp_path / ".the-loop")


@pytest.fixture
def store(layout: StateLayout) -> WorkItemStore:
    return WorkItemStore(layout, url_for=no_url)


@pytest.fixture
def event_log(layout: StateLayout) -> Iterator[Path]:
    events.configure(layout.events_path, "cli")
    yield layout.events_path
    events.configure(None, "cli")


def logged(path: Path, event: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line for line in lines if line["event"] == event]


def index_of(layout: StateLayout) -> list[dict[str, Any]]:
    return json.loads(layout.index_path.read_text())["workItems"]


def run_child(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args], stdout=subprocess.PIPE, text=True, bufsize=1
    )


# ------------------------------------------------------------------------------------------------ writing


def test_write_is_atomic_readable_and_tracked_friendly(store: WorkItemStore, layout: StateLayout) -> None:
    for number in range(5):
        store.update_section(REF, "poll", {"seenComments": [str(n) for n in range(number)]})
    path = layout.portable_record(SLUG)
    record = json.loads(path.read_text())
    assert record == {"ref": REF, "poll": {"seenComments": ["0", "1", "2", "3"]}}
    assert path.read_bytes() == dump_json(record)  # indent=2 and a trailing newline
    assert path.read_bytes().endswith(b"}\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in layout.portable_dir.iterdir() if p.name.endswith(".tmp")] == []
    assert sorted(p.name for p in layout.locks_dir.iterdir()) == ["github-octo-repo-15.lock", "index.lock"]
    assert json.loads(layout.marker_path.read_text()) == {"layout": 1}


def test_callable_gets_the_current_value_and_none_removes_a_section(store: WorkItemStore) -> None:
    seen: list[Any] = []

    def bump(poll: dict[str, Any] | None) -> dict[str, Any]:
        seen.append(poll)
        return {"count": (poll or {}).get("count", 0) + 1}

    store.update_section(REF, "poll", bump)
    store.update_section(REF, "poll", bump)
    store.update_section(REF, "control", {"command": "start"})
    assert seen == [None, {"count": 1}]
    assert store.read(REF) == {"ref": REF, "poll": {"count": 2}, "control": {"command": "start"}}
    assert store.update_section(REF, "poll", None) == {"ref": REF, "control": {"command": "start"}}
    assert "poll" not in (store.read(REF) or {})


def test_unchanged_write_leaves_the_file_alone(store: WorkItemStore, layout: StateLayout) -> None:
    store.update_section(REF, "control", {"command": "start"})
    before = layout.portable_record(SLUG).stat()
    store.update_section(REF, "control", {"command": "start"})
    after = layout.portable_record(SLUG).stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_unknown_keys_are_preserved_and_identity_comes_first(store: WorkItemStore, layout: StateLayout) -> None:
    path = layout.portable_record(SLUG)
    path.parent.mkdir(parents=True)
    hand_written = {
        "zeta": {"fromANewerRelease": [1, 2]},
        "graph": {"frozen": True},
        "control": {"command": "stop", "extra": "kept"},
        "ref": REF,
    }
    path.write_text(json.dumps(hand_written))
    store.update_section(REF, "poll", {"seenComments": ["1"]})
    record = json.loads(path.read_text())
    assert list(record) == ["ref", "zeta", "graph", "control", "poll"]
    assert record["zeta"] == hand_written["zeta"]
    assert record["graph"] == hand_written["graph"]
    assert record["control"] == hand_written["control"]
    store.update_section(REF, "control", None)
    assert list(json.loads(path.read_text())) == ["ref", "zeta", "graph", "poll"]


def test_undeclared_section_names_are_refused(store: WorkItemStore, layout: StateLayout) -> None:
    for name in ("sessions", "bogus", "ref", "url", "sealed", "version"):
        with pytest.raises(ValueError, match=name):
            store.update_section(REF, name, {"x": 1})
    with pytest.raises(ValueError, match="bogus"):
        store.clear_sections(REF, ["control", "bogus"])
    assert not layout.root.exists()


def test_a_root_of_another_layout_is_refused(store: WorkItemStore, layout: StateLayout) -> None:
    layout.root.mkdir(parents=True)
    layout.marker_path.write_text('{"layout": 99}\n')
    with pytest.raises(StateError, match="layout 99"):
        store.update_section(REF, "control", {"command": "start"})
    assert not layout.portable_record(SLUG).exists()


# -------------------------------------------------------------------------------------------------- url


class _FakeProvider(TicketProvider):
    def validate(self, ref: WorkItemRef) -> None: ...

    def post_comment(self, ref: WorkItemRef, body: str) -> str:
        raise NotImplementedError

    def item_state(self, ref: WorkItemRef) -> Any:
        return "unknown"

    def labels(self, ref: WorkItemRef) -> list[str]:
        return []

    def is_self_authored(self, text: str) -> bool:
        return False

    def mark(self, text: str) -> str:
        return text


class _GitHubUrls(_FakeProvider):
    scheme = "github"

    def url(self, ref: WorkItemRef) -> str | None:
        return f"https://github.com/{ref.owner}/{ref.repo}/issues/{ref.number}"


class _BrokenUrls(_FakeProvider):
    scheme = "github"

    def url(self, ref: WorkItemRef) -> str | None:
        raise RuntimeError("boom")


class _Ticketing:
    def __init__(self, provider: type[TicketProvider]) -> None:
        self.provider = provider

    @hookimpl
    def loop_register_ticketing(self) -> list[type[TicketProvider]]:
        return [self.provider]


def loaded(layout: StateLayout, host: Any, extra: str = "") -> LoadedConfig:
    """A config beside ``layout`` loaded with ``host``: the store asks that host for providers, never a global one."""
    path = layout.root / "cli-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'version: "0.12.0"\n{extra}', encoding="utf-8")
    return load_config(path, host, load_env=False)


def test_url_comes_from_the_ticket_provider_right_after_ref(plugin_host: Any, layout: StateLayout) -> None:
    plugin_host.register(_Ticketing(_GitHubUrls), "fake-github")
    store = WorkItemStore(layout, config=loaded(layout, plugin_host))
    store.update_section(REF, "control", {"command": "start"})
    record = json.loads(layout.portable_record(SLUG).read_text())
    assert list(record) == ["ref", "url", "control"]
    assert record["url"] == "https://github.com/octo/repo/issues/15"
    assert index_of(layout) == [
        {"ref": REF, "url": record["url"], "file": f"{SLUG}.json", "sections": ["control"]},
    ]


class _ConfiguredUrls(_FakeProvider):
    scheme = "github"

    def url(self, ref: WorkItemRef) -> str | None:
        return f"{self.config.raw['server']}/{ref.owner}/{ref.repo}/issues/{ref.number}"


def test_the_provider_is_built_with_the_stores_config(plugin_host: Any, layout: StateLayout) -> None:
    plugin_host.register(_Ticketing(_ConfiguredUrls), "fake-github")
    config = loaded(layout, plugin_host, "server: https://ghe.example\n")
    WorkItemStore(layout, config=config).update_section(REF, "control", {"command": "start"})
    assert WorkItemStore(layout).read(REF) == {
        "ref": REF,
        "url": "https://ghe.example/octo/repo/issues/15",
        "control": {"command": "start"},
    }
    WorkItemStore(layout).update_section(REF, "poll", {"n": 1})  # no config: the provider cannot say, so no url
    assert list(WorkItemStore(layout).read(REF) or {}) == ["ref", "control", "poll"]


@pytest.mark.parametrize("provider", [None, _BrokenUrls], ids=["no-provider", "provider-fails"])
def test_no_url_when_none_can_be_derived(plugin_host: Any, layout: StateLayout, provider: Any) -> None:
    if provider is not None:
        plugin_host.register(_Ticketing(provider), "fake-github")
    WorkItemStore(layout).update_section(REF, "control", {"command": "start"})
    assert json.loads(layout.portable_record(SLUG).read_text()) == {"ref": REF, "control": {"command": "start"}}


# ------------------------------------------------------------------------------------------- corruption


def test_corrupt_record_reads_as_none_warns_once_then_is_moved_aside(
    store: WorkItemStore, layout: StateLayout, event_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = layout.portable_record(SLUG)
    path.parent.mkdir(parents=True)
    path.write_text("{bad")
    assert store.read(REF) is None
    assert store.read(REF) is None
    assert capsys.readouterr().err.count(f"skipping unreadable state file {path}") == 1

    store.update_section(REF, "control", {"command": "start"})
    moved = sorted(layout.portable_dir.glob(f"{SLUG}.json.corrupt-*"))
    assert len(moved) == 1
    assert moved[0].read_text() == "{bad"
    assert store.read(REF) == {"ref": REF, "control": {"command": "start"}}
    quarantined = logged(event_log, "state.quarantined")
    assert [(e["path"], e["moved_to"], e["level"]) for e in quarantined] == [(str(path), str(moved[0]), "warning")]
    assert "moved it aside" in capsys.readouterr().err

    path.write_text("[1, 2]")  # parses, but is not a record: corrupt too, and the first copy is never overwritten
    store.update_section(REF, "control", {"command": "stop"})
    moved_again = sorted(layout.portable_dir.glob(f"{SLUG}.json.corrupt-*"))
    assert len(moved_again) == 2
    assert sorted(p.read_text() for p in moved_again) == ["[1, 2]", "{bad"]
    assert len(logged(event_log, "state.quarantined")) == 2
    assert [e["file"] for e in index_of(layout)] == [f"{SLUG}.json"]  # quarantined copies are never indexed


def test_clearing_a_corrupt_record_moves_it_aside_instead_of_deleting_it(
    store: WorkItemStore, layout: StateLayout, event_log: Path
) -> None:
    path = layout.portable_record(SLUG)
    path.parent.mkdir(parents=True)
    path.write_text('{"ref": ')
    assert store.clear_sections(REF, ["control"]) == []
    assert not path.exists()
    assert [p.read_text() for p in layout.portable_dir.glob("*.corrupt-*")] == ['{"ref": ']
    assert len(logged(event_log, "state.quarantined")) == 1


# ------------------------------------------------------------------------------------------ concurrency

_WRITER = """
import os, sys, time
from pathlib import Path
from the_loop.state import StateLayout
from the_loop.state.store import WorkItemStore
from the_loop.testing import gitignore_ignores

root, go, own, count = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
store = WorkItemStore(StateLayout(root), url_for=lambda ref: None)
while not go.exists():
    time.sleep(0.001)
for n in range(1, count + 1):
    store.update_section("github:octo/repo#15", "poll", lambda poll: {"count": (poll or {}).get("count", 0) + 1})
    store.update_section("github:octo/repo#15", own, {"writer": os.getpid(), "n": n})
print("done", flush=True)
"""


def test_two_processes_lose_no_read_modify_write(layout: StateLayout, tmp_path: Path) -> None:
    go = tmp_path / "go"
    writers = [run_child(_WRITER, str(layout.root), str(go), own, "500") for own in ("control", "lifecycle")]
    go.touch()
    for writer in writers:
        out, _ = writer.communicate(timeout=150)
        assert (writer.returncode, out.strip()) == (0, "done")
    record = json.loads(layout.portable_record(SLUG).read_text())
    assert record["poll"] == {"count": 1000}  # 2 x 500 increments, none lost
    assert record["control"]["n"] == 500
    assert record["lifecycle"]["n"] == 500  # neither writer's section was overwritten by the other
    assert index_of(layout) == [
        {"ref": REF, "file": f"{SLUG}.json", "sections": ["control", "poll", "lifecycle"]},
    ]
    assert sorted(p.name for p in layout.portable_dir.iterdir()) == [f"{SLUG}.json", "index.json"]


# ---------------------------------------------------------------------------------------- crash safety

_LOOPER = """
import sys
from pathlib import Path
from the_loop.state import StateLayout
from the_loop.state.store import WorkItemStore
from the_loop.testing import gitignore_ignores

store = WorkItemStore(StateLayout(Path(sys.argv[1])), url_for=lambda ref: None)
record = store.read("github:octo/repo#15") or {}
n = record.get("poll", {}).get("n", 0)
print("ready", flush=True)
while True:
    n += 1
    print(n, flush=True)  # announced before the write starts: the record must hold n - 1 or n
    store.update_section("github:octo/repo#15", "poll", {"n": n, "pad": "x" * (4096 * (n % 64))})
"""


def test_sigkill_during_writes_leaves_the_old_or_the_new_record(layout: StateLayout) -> None:
    block = gitignore_block(GENERATED_PATHS)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    last = 0
    for round_number in range(8):
        child = run_child(_LOOPER, str(layout.root))
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        first = int(child.stdout.readline())  # the timer starts once writing has begun, however slow the start
        try:
            child.wait(timeout=rng.uniform(0.005, 0.25))
        except subprocess.TimeoutExpired:
            pass
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL, f"seed {seed}"
        last = [first, *(int(line) for line in rest.split())][-1]
        path = layout.portable_record(SLUG)
        found = json.loads(path.read_text()) if path.exists() else None  # absent only before the first write
        written = found["poll"]["n"] if found else 0
        assert written in (last - 1, last), f"seed {seed}, round {round_number}: {written} after announcing {last}"
        if found:
            assert found["poll"]["pad"] == "x" * (4096 * (written % 64))
        if layout.index_path.exists():
            assert json.loads(layout.index_path.read_text())["workItems"][0]["ref"] == REF
        for directory in (layout.portable_dir, layout.root):
            for stray in directory.iterdir() if directory.exists() else ():
                if stray.name.endswith(".tmp"):
                    assert TEMP_NAME.match(stray.name), stray.name
                    relative = stray.relative_to(layout.root.parent).as_posix()
                    assert gitignore_ignores(block, relative), relative
        last = written
    # The store still works afterwards (no lock left held), and the temporaries never reach the index.
    WorkItemStore(layout, url_for=no_url).update_section(REF, "control", {"command": "start"})
    assert [entry["file"] for entry in index_of(layout)] == [f"{SLUG}.json"]


# ------------------------------------------------------------------------------------------------ index


def test_f33_index_is_rebuilt_after_a_hand_deleted_index_and_ignores_strays(
    store: WorkItemStore, layout: StateLayout
) -> None:
    store.update_section("github:octo/repo#20", "control", {"command": "pause", "source": "cli"})
    assert index_of(layout) == [
        {"ref": "github:octo/repo#20", "file": "github-octo-repo-20.json", "sections": ["control"]},
    ]
    layout.index_path.unlink()
    for stray in (
        "tmpab12.tmp",
        ".github-octo-repo-20.json.x1y2.tmp",
        "github-octo-repo-9.json.corrupt-20260101T000000Z",
    ):
        (layout.portable_dir / stray).write_text("{}")
    (layout.portable_dir / "notes.json").write_text('{"no": "ref"}')
    (layout.portable_dir / "broken.json").write_text("{")
    store.update_section("github:octo/repo#20", "collaborators", {"users": [{"login": "dana"}]})
    assert index_of(layout) == [
        {"ref": "github:octo/repo#20", "file": "github-octo-repo-20.json", "sections": ["control", "collaborators"]},
    ]


def test_index_lists_records_sorted_with_their_pull_requests(store: WorkItemStore, layout: StateLayout) -> None:
    store.update_section("github:octo/repo#9", "pullRequests", {"github:octo/lib#7": {}, "github:octo/lib#3": {}})
    store.update_section("github:octo/repo#10", "ended", {"state": "closed"})
    store.update_section("github:ghe.corp.example/octo/repo#15", "channels", {"slack": {"channel": "C1"}})
    assert index_of(layout) == [
        {"ref": "github:ghe.corp.example/octo/repo#15", "file": "github-ghe.corp.example-octo-repo-15.json",
         "sections": ["channels"]},
        {"ref": "github:octo/repo#10", "file": "github-octo-repo-10.json", "sections": ["ended"]},
        {"ref": "github:octo/repo#9", "file": "github-octo-repo-9.json", "sections": ["pullRequests"],
         "pullRequests": ["github:octo/lib#3", "github:octo/lib#7"]},
    ]  # fmt: skip
    assert [record["ref"] for record in store.list()] == [entry["ref"] for entry in index_of(layout)]


def test_index_follows_hand_edits_and_survives_a_broken_cache(store: WorkItemStore, layout: StateLayout) -> None:
    store.update_section(REF, "control", {"command": "start"})
    store.update_section("github:octo/repo#16", "poll", {"n": 1})
    path = layout.portable_record(SLUG)
    record = json.loads(path.read_text())
    record["ended"] = {"state": "merged"}
    with path.open("r+") as handle:  # edited in place: same inode, the cache must still notice
        handle.write(json.dumps(record))
        handle.truncate()
    store.rebuild_index()
    assert index_of(layout)[0]["sections"] == ["control", "ended"]
    layout.index_cache_path.write_text("{not json")
    (layout.portable_dir / "github-octo-repo-16.json").unlink()
    store.rebuild_index()
    assert [entry["ref"] for entry in index_of(layout)] == [REF]
    assert json.loads(layout.index_cache_path.read_text())["version"] == 1


def test_f30_clearing_the_last_section_deletes_the_record_and_the_index(
    store: WorkItemStore, layout: StateLayout
) -> None:
    store.update_section(REF, "control", {"command": "start"})
    store.update_section(REF, "poll", {"seenComments": ["1"]})
    store.update_section("github:octo/repo#16", "control", {"command": "start"})
    assert store.clear_sections("github:octo/repo#16", ["control", "poll", "ended"]) == ["control"]
    assert not layout.portable_record("github-octo-repo-16").exists()
    assert [entry["ref"] for entry in index_of(layout)] == [REF]
    assert store.clear_sections(REF, ["control", "poll", "collaborators", "collaborationChannels", "ended"]) == [
        "control",
        "poll",
    ]
    assert not layout.portable_record(SLUG).exists()
    assert not layout.index_path.exists()
    assert store.list() == []


def test_a_record_holding_only_unknown_keys_is_kept_and_one_holding_only_nulls_goes(
    store: WorkItemStore, layout: StateLayout
) -> None:
    path = layout.portable_record(SLUG)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"ref": REF, "graph": {"frozen": True}, "control": {"command": "start"}}))
    assert store.clear_sections(REF, ["control"]) == ["control"]
    assert json.loads(path.read_text()) == {"ref": REF, "graph": {"frozen": True}}
    assert index_of(layout) == [{"ref": REF, "file": f"{SLUG}.json", "sections": []}]
    path.write_text(json.dumps({"ref": REF, "poll": None, "control": {"command": "start"}}))
    store.update_section(REF, "control", None)
    assert not path.exists()
    assert not layout.index_path.exists()


def test_a_failed_index_write_is_logged_and_the_record_still_written(
    store: WorkItemStore, layout: StateLayout, event_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (layout.index_path / "in-the-way").mkdir(parents=True)  # index.json is a directory: it cannot be replaced
    store.update_section(REF, "control", {"command": "start"})
    assert store.read(REF) == {"ref": REF, "control": {"command": "start"}}
    failures = logged(event_log, "state.index_failed")
    assert len(failures) == 1
    assert failures[0]["path"] == str(layout.index_path)
    assert f"cannot rebuild {layout.index_path}" in capsys.readouterr().err
    assert [p.name for p in layout.portable_dir.iterdir() if p.name.endswith(".tmp")] == []


def test_list_returns_every_parsable_record_sorted_by_ref(store: WorkItemStore, layout: StateLayout) -> None:
    for number in (3, 1, 2):
        store.update_section(f"github:octo/repo#{number}", "control", {"command": "start"})
    (layout.portable_dir / "notes.json").write_text("{}")
    (layout.portable_dir / "github-octo-repo-4.json").write_text("{")
    assert [record["ref"] for record in store.list()] == [f"github:octo/repo#{n}" for n in (1, 2, 3)]


def test_records_on_one_machine_are_independent_files(store: WorkItemStore, layout: StateLayout) -> None:
    store.update_section(REF, "control", {"command": "start"})
    store.update_section("jira:acme.atlassian.net/PROJ-12", "control", {"command": "stop"})
    names = sorted(p.name for p in layout.portable_dir.iterdir())
    assert names == ["github-octo-repo-15.json", "index.json", "jira-acme.atlassian.net-PROJ-12.json"]
    assert os.listdir(layout.locks_dir) and not any(p.endswith(".lock") for p in names)


# ------------------------------------------------------------------------------------------ write order


def test_atomic_write_syncs_the_file_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F §3.5 R3 (upstream never fsynced): temp file in the same directory → fsync → os.replace → directory fsync.
    The real calls run; the wrappers only record their order."""
    from the_loop import state

    calls: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append(("fsync", "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"))
        real_fsync(fd)

    def replace(source: Any, target: Any) -> None:
        assert Path(source).parent == Path(target).parent  # the temporary sits beside its target
        calls.append(("replace", Path(target).name))
        real_replace(source, target)

    monkeypatch.setattr(state.os, "fsync", fsync)
    monkeypatch.setattr(state.os, "replace", replace)
    target = tmp_path / "local" / "record.json"

    state.atomic_write_json(target, {"a": 1}, mode=0o600)

    assert calls == [("fsync", "file"), ("replace", "record.json"), ("fsync", "dir")]
    assert json.loads(target.read_text()) == {"a": 1}
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_failed_rename_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from the_loop import state

    target = tmp_path / "record.json"
    state.atomic_write_json(target, {"old": True})

    def failing_replace(source: Any, target: Any) -> None:  # an injected fault: the disk refuses the rename
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(state.os, "replace", failing_replace)
    with pytest.raises(StateError, match=f"cannot write {re.escape(str(target))}: No space left on device"):
        state.atomic_write_json(target, {"new": True})

    assert json.loads(target.read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_write_parses_only_the_records_that_changed(
    store: WorkItemStore, layout: StateLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The derived index is rebuilt after every write from a directory scan, but entries are cached by (inode,
    mtime, size): 200 records do not mean 200 parses per write (10,000 in benchmarks/bench_state.py)."""
    for number in range(1, 201):
        store.update_section(f"github:octo/repo#{number}", "control", {"command": "start"})
    parsed: list[str] = []
    real_entry = WorkItemStore._entry

    def counting_entry(self: WorkItemStore, name: str, path: Path) -> Any:
        parsed.append(name)
        return real_entry(self, name, path)

    monkeypatch.setattr(WorkItemStore, "_entry", counting_entry)

    WorkItemStore(layout, url_for=no_url).update_section("github:octo/repo#7", "poll", {"n": 1})

    assert parsed == ["github-octo-repo-7.json"]
    assert len(index_of(layout)) == 200
    assert next(e for e in index_of(layout) if e["ref"] == "github:octo/repo#7")["sections"] == ["control", "poll"]


# ------------------------------------------------------------------------------- not a regular file (issue 16)


def _in_time(call: Any, seconds: float = 10.0) -> Any:
    """``call()`` in a thread; fails the test when it does not return within ``seconds`` (a blocked read)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result(timeout=seconds)


@pytest.mark.parametrize("kind", ["symlink-outside", "symlink-dev-zero", "fifo"])
def test_issue_16_a_record_path_that_is_no_regular_file_is_refused_reported_and_never_followed(
    store: WorkItemStore, layout: StateLayout, event_log: Path, tmp_path: Path, kind: str
) -> None:
    """Issue 16 (11): a link is never followed (outside content is never merged), /dev/zero never exhausts memory,
    a FIFO never blocks; the thing is moved aside on the next write, which makes a regular file in its place."""
    store.update_section(REF, "poll", {"seenComments": ["1"]})
    path = layout.portable_dir / f"{SLUG}.json"
    path.unlink()
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"ref": REF, "control": {"command": "start"}, "secret": "outside content"}))
    if kind == "symlink-outside":
        path.symlink_to(outside)
    elif kind == "symlink-dev-zero":
        path.symlink_to("/dev/zero")
    else:
        os.mkfifo(path)

    assert _in_time(lambda: store.read(REF)) is None
    _in_time(lambda: store.update_section(REF, "poll", {"seenComments": ["2"]}))

    assert path.is_file() and not path.is_symlink()
    written = json.loads(path.read_text())
    assert written["poll"] == {"seenComments": ["2"]} and "secret" not in written and "control" not in written
    assert json.loads(outside.read_text())["secret"] == "outside content"  # the link's target is untouched
    [moved] = list(layout.portable_dir.glob(f"{SLUG}.json.corrupt-*"))
    assert moved.is_symlink() or stat.S_ISFIFO(moved.lstat().st_mode)  # the thing itself, moved aside
    assert logged(event_log, "state.quarantined")


def test_issue_16_a_huge_record_is_refused_without_reading_it_whole(store: WorkItemStore, layout: StateLayout) -> None:
    from the_loop.state import MAX_STATE_FILE_BYTES

    store.update_section(REF, "poll", {"seenComments": ["1"]})
    path = layout.portable_dir / f"{SLUG}.json"
    with path.open("wb") as handle:
        handle.truncate(MAX_STATE_FILE_BYTES + 1)  # sparse: costs no disk
    assert store.read(REF) is None
