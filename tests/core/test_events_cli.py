"""``the-loop events`` (F21-F26): reading, filtering and following the decision log, run as a real process."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from the_loop import events
from the_loop.plugins import PluginHost
from the_loop.testing import LoopEnv

# Four valid records; the second is stored with spaces and a non-ASCII value so "unchanged" means byte-equal.
STORED = [
    b'{"ts":"2026-07-22T10:00:00.000Z","source":"gh-webhook","event":"webhook.received","level":"info","pid":1,'
    b'"delivery_id":"d-1","work_item":"github:octo/repo#15"}',
    '{"ts": "2026-07-22T10:30:00.000Z", "source": "poll", "event": "dispatch.dropped", "level": "warning", '
    '"pid": 2, "work_item": "github:octo/repo#15", "reason": "paused", "note": "café"}'.encode(),
    b'{"ts":"2026-07-22T11:00:00.000Z","source":"sessions","event":"session.spawned","level":"error","pid":3,'
    b'"work_items":["github:octo/repo#16","github:octo/repo#15"],"error":"boom","will_retry":true}',
    b'{"ts":"2026-07-22T12:00:00.000Z","source":"service","event":"session.reset","level":"info","pid":4,'
    b'"work_item":"github:octo/repo#16","removed":["session"]}',
]
BAD = [b"not json", b"[1, 2]", b'{"x":']  # a non-JSON line, a non-object line, a truncated last line


@pytest.fixture
def log(loop_env: LoopEnv) -> Path:
    """F21's log at the default place, ``<state.root>/logs/events.jsonl``; the truncated line is last."""
    loop_env.write_config('version: "0.12.0"\n')
    path = loop_env.root / "logs" / "events.jsonl"
    path.parent.mkdir(parents=True)
    lines = [STORED[0], BAD[0], STORED[1], BAD[1], STORED[2], STORED[3], BAD[2]]
    path.write_bytes(b"\n".join(lines))
    return path


def jsonl(result: subprocess.CompletedProcess[str]) -> list[bytes]:
    return [line.encode() for line in result.stdout.splitlines()]


def test_f21_events_reads_the_resolved_log_and_skips_bad_lines(loop_env: LoopEnv, log: Path) -> None:
    table = loop_env.run("events")
    lines = loop_env.run("events", "--format", "jsonl")

    assert table.returncode == 0, table.stderr
    rows = table.stdout.splitlines()
    assert rows[0].split()[:5] == ["Time", "Source", "Level", "Event", "Work"]
    assert [row.split()[3] for row in rows[1:]] == [
        "webhook.received",
        "dispatch.dropped",
        "session.spawned",
        "session.reset",
    ]
    assert "reason=paused" in rows[2]
    assert lines.returncode == 0
    assert jsonl(lines) == STORED


def test_f21_events_follows_a_relative_event_log_path_to_the_state_root(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\neventLog: {path: custom/ev.jsonl}\n')
    path = loop_env.root / "custom" / "ev.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(STORED[0] + b"\n")

    result = loop_env.run("events", "--format", "jsonl")

    assert jsonl(result) == [STORED[0]]


def test_f22_type_filter_prints_the_stored_line_byte_for_byte(loop_env: LoopEnv, log: Path) -> None:
    result = loop_env.run("events", "--type", "dispatch.*", "--format", "jsonl")

    assert result.returncode == 0
    assert jsonl(result) == [STORED[1]]


def test_f22_type_patterns_are_or_ed(loop_env: LoopEnv, log: Path) -> None:
    result = loop_env.run("events", "--type", "dispatch.*", "--type", "*.reset", "--format", "jsonl")

    assert jsonl(result) == [STORED[1], STORED[3]]


def test_f22_level_is_a_minimum_and_json_is_one_array_of_stored_records(loop_env: LoopEnv, log: Path) -> None:
    result = loop_env.run("events", "--level", "warning", "--format", "json")

    assert result.returncode == 0
    assert json.loads(result.stdout) == [json.loads(STORED[1]), json.loads(STORED[2])]


def test_f22_work_item_matches_work_items_and_limit_keeps_the_newest(loop_env: LoopEnv, log: Path) -> None:
    newest = loop_env.run("events", "--work-item", "github:octo/repo#15", "--limit", "1", "--format", "jsonl")
    every = loop_env.run("events", "--work-item", "github:octo/repo#15", "--format", "jsonl")

    assert jsonl(newest) == [STORED[2]]  # matched through work_items
    assert jsonl(every) == STORED[:3]


def test_delivery_id_and_limit_zero(loop_env: LoopEnv, log: Path) -> None:
    assert jsonl(loop_env.run("events", "--delivery-id", "d-1", "--format", "jsonl")) == [STORED[0]]
    assert jsonl(loop_env.run("events", "--limit", "0", "--format", "jsonl")) == STORED
    assert jsonl(loop_env.run("events", "--limit", "2", "--format", "jsonl")) == STORED[2:]


def test_f23_source_accepts_any_string(loop_env: LoopEnv, log: Path) -> None:
    cli_line = b'{"ts":"2026-07-22T12:30:00.000Z","source":"cli","event":"config.migrated","level":"info","pid":5}'
    with log.open("ab") as handle:
        handle.write(b"\n" + cli_line + b"\n")

    service = loop_env.run("events", "--source", "service", "--format", "jsonl")
    cli = loop_env.run("events", "--source", "cli", "--format", "jsonl")
    made_up = loop_env.run("events", "--source", "no-such-source")

    assert service.returncode == 0
    assert jsonl(service) == [STORED[3]]
    assert jsonl(cli) == [cli_line]
    assert made_up.returncode == 0
    assert "(no matching events)" in made_up.stderr


def test_f24_since_compares_instants_across_offsets(loop_env: LoopEnv, log: Path) -> None:
    # 13:00+02:00 is 11:00Z: the 11:00Z record counts (inclusive), the 12:00Z one too, nothing earlier.
    result = loop_env.run("events", "--since", "2026-07-22T13:00:00+02:00", "--format", "jsonl")
    later = loop_env.run("events", "--since", "2026-07-22T13:30:00+02:00", "--format", "jsonl")

    assert result.returncode == 0
    assert jsonl(result) == STORED[2:]
    assert jsonl(later) == [STORED[3]]


def test_f24_since_relative(loop_env: LoopEnv, log: Path) -> None:
    recent = json.dumps({"ts": events.timestamp(), "source": "cli", "event": "config.migrated", "level": "info"})
    with log.open("ab") as handle:
        handle.write(b"\n" + recent.encode() + b"\n")

    for since in ("90s", "5m", "2h", "1d"):
        assert jsonl(loop_env.run("events", "--since", since, "--format", "jsonl")) == [recent.encode()]


@pytest.mark.parametrize("since", ["yesterday-ish", "2026-13-45", "5w"])
def test_f24_unparseable_since_exits_2(loop_env: LoopEnv, log: Path, since: str) -> None:
    result = loop_env.run("events", "--since", since)

    assert result.returncode == 2
    assert "--since" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_match_and_missing_file_print_the_header_and_a_note(loop_env: LoopEnv, log: Path) -> None:
    no_match = loop_env.run("events", "--type", "nothing.*")
    missing = loop_env.run("events", "--file", str(loop_env.tmp / "absent.jsonl"), config=False)
    as_json = loop_env.run("events", "--type", "nothing.*", "--format", "json")

    for result in (no_match, missing):
        assert result.returncode == 0
        assert result.stdout.split()[:4] == ["Time", "Source", "Level", "Event"]
        assert len(result.stdout.splitlines()) == 1
        assert result.stderr.strip() == "(no matching events)"
    assert json.loads(as_json.stdout) == []


def test_file_option_reads_that_file_without_any_config(loop_env: LoopEnv, log: Path) -> None:
    loop_env.write_config("- broken config\n")  # --file never needs the config

    result = loop_env.run("events", "--file", str(log), "--format", "jsonl")

    assert result.returncode == 0, result.stderr
    assert jsonl(result) == STORED


def test_f25_types_lists_every_catalog_name_once_and_the_sources(loop_env: LoopEnv) -> None:
    result = loop_env.run("events", "--types", config=False)

    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.split("\n\n")[0].splitlines()]
    catalog = {t.name for t in PluginHost.create().event_types()}
    assert sorted(names) == sorted(catalog)
    assert len(names) == len(set(names))
    assert {"session.reset", "dispatch.dropped", "poller.blocked", "hello.said"} <= set(names)
    assert "service" in result.stdout.split("\n\n")[1]

    document = json.loads(loop_env.run("events", "--types", "--format", "json", config=False).stdout)
    assert {entry["name"] for entry in document["eventTypes"]} == catalog
    assert "gh-webhook" in document["sources"]


def test_f25_closed_pipe_exits_quietly(loop_env: LoopEnv, tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"".join(STORED[0] + b"\n" for _ in range(20000)))  # far more than a pipe buffer
    the_loop = f"{sys.executable} -m the_loop"
    first_type = min(t.name for t in PluginHost.create().event_types())
    for command, expected in (
        (f"{the_loop} events --types", first_type),
        (f"{the_loop} events --file {big} --limit 0 --format jsonl", STORED[0].decode()),
    ):
        result = subprocess.run(
            ["bash", "-c", f'{command} | head -1; echo "status=${{PIPESTATUS[0]}}"'],
            cwd=loop_env.cwd,
            env=loop_env.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        first, status = result.stdout.splitlines()
        assert first.split()[0] == expected
        assert result.stderr == ""  # no traceback, no "Exception ignored" note
        # click turns EPIPE into exit 1 inside its own main(); 0 when the writer finished before head closed.
        assert status in ("status=0", "status=1")


def _read_line(stream: int, timeout: float) -> bytes:
    """One line from a raw pipe fd, or b"" after ``timeout`` seconds."""
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
            return b""
        chunk = os.read(stream, 1)
        if not chunk:
            return data
        data += chunk
    return data


def _as_in_a_terminal() -> None:
    """Ctrl-C reaches the follower as it would in a terminal: an ignored or blocked SIGINT the test runner's process
    may pass down (a worker thread's mask is inherited across exec) is reset for the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_f26_follow_prints_appended_lines_within_a_second_and_exits_0_on_sigint(loop_env: LoopEnv, log: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "the_loop",
            "-c",
            str(loop_env.config_path),
            "events",
            "--follow",
            "--type",
            "session.*",
        ],
        cwd=loop_env.cwd,
        env=loop_env.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_as_in_a_terminal,
    )
    try:
        assert process.stdout is not None
        out = process.stdout.fileno()
        assert _read_line(out, 30).startswith(b"Time")  # the header: the follower has taken its starting point
        assert _read_line(out, 0.5) == b""  # nothing already in the log is replayed

        def append(line: bytes) -> float:
            subprocess.run(["sh", "-c", f"printf '%s\\n' '{line.decode()}' >> '{log}'"], check=True)
            return time.monotonic()

        log.write_bytes(log.read_bytes() + b"\n")  # end the truncated last line, as a writer's next append would
        append(b'{"ts":"2026-07-22T13:00:00.000Z","source":"poll","event":"dispatch.queued","level":"info"}')
        appended = append(
            b'{"ts":"2026-07-22T13:01:00.000Z","source":"sessions","event":"session.paused","level":"info",'
            b'"work_item":"github:octo/repo#20"}'
        )
        line = _read_line(out, 1.0)
        assert time.monotonic() - appended < 1.0
        assert b"session.paused" in line
        assert b"github:octo/repo#20" in line

        # A truncated (rotated by copytruncate) log is followed from its start.
        log.write_bytes(b"")
        append(b'{"ts":"2026-07-22T13:02:00.000Z","source":"sessions","event":"session.resumed","level":"info"}')
        assert b"session.resumed" in _read_line(out, 1.0)

        # A log moved away (rotated by rename) is followed into the new file at the same path.
        log.rename(log.with_name("events.jsonl.1"))
        append(b'{"ts":"2026-07-22T13:03:00.000Z","source":"sessions","event":"session.closed","level":"info"}')
        assert b"session.closed" in _read_line(out, 1.0)

        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0  # at once, but a loaded CI box may take its time to exit
        assert process.stderr is not None
        assert b"Traceback" not in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_follow_refuses_json_format(loop_env: LoopEnv, log: Path) -> None:
    result = loop_env.run("events", "--follow", "--format", "json")

    assert result.returncode == 2
    assert "--follow" in result.stderr


# ------------------------------------------------------------------------------------------------ writing

_EMITTER = """
import sys
from pathlib import Path
from the_loop import events

path, go, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
events.configure(path, "poll")
while not go.exists():
    pass
for n in range(count):
    # Lines up to ~9 KB: past PIPE_BUF, so only the whole-line write under the lock keeps them apart.
    events.emit("dispatch.queued", n=n, pad="x" * (97 * (n % 97)))
"""


def test_concurrent_processes_append_whole_lines(tmp_path: Path) -> None:
    """F §4.1: lines appended by several processes at once never interleave or go missing."""
    path, go = tmp_path / "logs" / "events.jsonl", tmp_path / "go"
    writers = [
        subprocess.Popen([sys.executable, "-c", _EMITTER, str(path), str(go), "400"], stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    go.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a whole line
    records = [json.loads(line) for line in lines[:-1]]  # every line parses on its own
    assert len(records) == 1200
    by_pid: dict[int, list[int]] = {}
    for record in records:
        assert record["pad"] == "x" * (97 * (record["n"] % 97))
        by_pid.setdefault(record["pid"], []).append(record["n"])
    assert sorted(by_pid) == sorted(writer.pid for writer in writers)
    assert all(numbers == list(range(400)) for numbers in by_pid.values())  # each writer's lines in its order


@pytest.fixture
def configured_log(tmp_path: Path):
    path = tmp_path / "logs" / "events.jsonl"
    events.configure(path, "cli")
    yield path
    events.configure(None, "cli")


def test_every_line_carries_the_envelope(configured_log: Path) -> None:
    events.emit("dispatch.dropped", level="loud", work_item="github:octo/repo#15", reason="paused", note=None)
    events.emit("session.spawned", level="warning", source="sessions")

    first, second = (json.loads(line) for line in configured_log.read_text().splitlines())
    assert list(first)[:5] == ["ts", "source", "event", "level", "pid"]
    assert first["ts"][:2] == "20" and first["ts"][10] == "T" and first["ts"].endswith("Z") and len(first["ts"]) == 24
    assert (first["source"], first["event"], first["level"], first["pid"]) == (
        "cli",
        "dispatch.dropped",
        "info",  # an unknown level is written as info
        os.getpid(),
    )
    assert "note" not in first  # None fields are dropped
    assert (first["work_item"], first["reason"]) == ("github:octo/repo#15", "paused")
    assert (second["source"], second["level"]) == ("sessions", "warning")


def test_an_unwritable_log_warns_once_and_never_raises(
    tmp_path: Path, configured_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configured_log.mkdir(parents=True)  # a directory where the log should be: every write fails
    events.emit("dispatch.queued")
    events.emit("dispatch.queued")
    assert capsys.readouterr().err.count(f"warning: cannot write event log {configured_log}") == 1


def test_event_log_disabled_in_config_writes_nothing(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\neventLog: {enabled: false}\n')

    result = loop_env.run("hello", "dana")  # the example plugin's command logs hello.said

    assert result.returncode == 0, result.stderr
    assert not (loop_env.root / "logs").exists()
    loop_env.write_config('version: "0.12.0"\n')
    assert loop_env.run("hello", "dana").returncode == 0
    assert [record["event"] for record in loop_env.events()] == ["hello.said"]


def test_an_unwritable_log_leaves_the_command_working(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\neventLog: {path: logs/events.jsonl}\n')
    (loop_env.root / "logs" / "events.jsonl").mkdir(parents=True)

    result = loop_env.run("hello", "dana")

    assert result.returncode == 0
    assert result.stdout.strip() == "hello, dana"
    [warning] = [line for line in result.stderr.splitlines() if "cannot write event log" in line]
    assert warning.startswith("warning: ")


# ------------------------------------------------------------------ reading only where the state lives

PLAIN = st.sampled_from(["", "a", "logs/other.jsonl", "/srv/loop/x", "~/loop", "../up", " spaced "])
VALUE = st.one_of(PLAIN, st.sampled_from([1, None, [], {}, True]))


@st.composite
def layout_configs(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    """A config setting any of the four layout keys to a string or to something else, sometimes spelled twice;
    and whether every one it sets is plainly a string, spelled once."""
    config: dict[str, Any] = {"version": "0.12.0"}
    plain = True
    keys = (("state", "root"), ("routing", "registryDir"), ("eventLog", "path"), ("webhooks", "ghWebhook", "pidfile"))
    for path in keys:
        if not draw(st.booleans()):
            continue
        node = config
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value = draw(VALUE)
        plain = plain and isinstance(value, str)
        if draw(st.integers(0, 5)) == 0:  # the snake_case spelling the models accept as well
            node["".join(f"_{c.lower()}" if c.isupper() else c for c in path[-1])] = draw(PLAIN)
            plain = plain and path[-1] == "root"  # "root" has no other spelling: that key is just unknown
    return config, plain


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=layout_configs())
def test_the_layout_read_alone_is_the_loaded_configs_or_none(tmp_path: Path, case: tuple[dict[str, Any], bool]) -> None:
    """`events` reads four keys instead of loading the config: it must find the same files the full load does, and
    leave every case it cannot read plainly to the full load (whose error names the key)."""
    import yaml

    from the_loop.config import ConfigError, load_config, read_layout

    config, plain = case
    path = tmp_path / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    light = read_layout(path)
    try:
        full = load_config(path, PluginHost.create(load_entrypoints=False), load_env=False).state
    except ConfigError:
        assert light is None
        return
    assert light == full if plain else light in (None, full)


def test_events_reads_the_log_of_a_config_whose_other_sections_are_broken(loop_env: LoopEnv, log: Path) -> None:
    """It follows what it reads: a bad value elsewhere is for `config validate` and the services to report."""
    loop_env.write_config('version: "0.12.0"\nrouting:\n  tmux:\n    readyTimeoutSeconds: -1\n')
    assert loop_env.run("config", "validate").returncode == 2
    read = loop_env.run("events", "--format", "jsonl")
    assert read.returncode == 0, read.stderr
    assert read.stdout.encode().splitlines() == STORED


def test_events_with_a_layout_key_of_the_wrong_type_is_the_full_loads_one_error_line(loop_env: LoopEnv) -> None:
    loop_env.write_config('version: "0.12.0"\neventLog:\n  path: 5\n')
    read = loop_env.run("events")
    assert read.returncode == 2
    [line] = read.stderr.splitlines()
    assert line.startswith("error:") and "eventLog.path" in line
