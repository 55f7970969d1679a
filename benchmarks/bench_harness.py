"""Two harnesses side by side through the real dispatcher and tmux: spawn → ready, and event → recorded.

Run: ``.venv/bin/python benchmarks/bench_harness.py [--runs 20] [--harness fake|claude|both] [--claude PATH]
[--settle 0.2] [--keep]``. Core's fake harness TUI and the REAL Claude Code CLI, offline against the
fake Anthropic Messages API, are started from the conformance kits
(:class:`the_loop.testing.conformance.FakeHarnessKit`,
:class:`the_loop_claude.conformance.ClaudeKit`), each in a temporary directory and on a private tmux server of its
own. Per harness, p50 and p90 over ``--runs`` runs of:

- spawn → ready: the wall time of ``Dispatcher.dispatch(WorkEvent(..., spawn=True))`` for a fresh work item (a new
  ref each run, so each is a first spawn). The call returns only once the adapter's readiness check says the harness
  took its boot prompt (the fake: its prompt is drawn; Claude Code: a ``user`` line in its transcript), so this is
  how long an event that starts work holds the dispatcher (and the item's lock). Each session is killed afterwards.
- event → recorded: into one live, idle session, from calling ``dispatch()`` with a plain delivery until the harness
  recorded it (the fake: one more ``submit`` in its log; Claude Code: a new ``user`` line in its transcript). Before
  each event the previous turn was answered (Claude Code: the fake API received it and the transcript ends in the
  answer) and ``--settle`` seconds passed, so no delivery lands in a busy session. For Claude Code the footnote
  also gives event → the model's request (the fake API runs in this process: same clock).

The real Claude Code is ``--claude``, else ``$THE_LOOP_TEST_CLAUDE``, else the copy ``./test.sh`` installs under
``.tools/``; without one only the fake is measured. Everything (temporary directories, tmux servers, the
fake API) is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.config import LoadedConfig, load_config
from the_loop.models import WorkEvent
from the_loop.plugins import PluginHost, get_host, set_host
from the_loop.sessions.dispatcher import Dispatcher
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state.registry import SessionRegistry
from the_loop.testing import fake_plugin
from the_loop.testing.conformance import FakeHarnessKit, HarnessKit, process_running, write_config
from the_loop.testing.harness import FakeHarness

if TYPE_CHECKING:
    from the_loop_claude.conformance import ClaudeKit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CLAUDE = ROOT / ".tools/claude-code/node_modules/@anthropic-ai/claude-code/bin/claude.exe"
POLL_SECONDS = 0.001  # the measured waits


@dataclass
class Result:
    """One harness's timings, seconds."""

    harness: str
    spawns: list[float] = field(default_factory=list)  # dispatch(spawn=True) call → returned (ready)
    deliveries: list[float] = field(default_factory=list)  # dispatch() call → the harness recorded the event
    calls: list[float] = field(default_factory=list)  # dispatch() call → returned (the tmux paste is done)
    received: list[float] = field(default_factory=list)  # dispatch() call → the model's request (Claude Code)


class Bench:
    """One kit, its environment, a config and a dispatcher over a private tmux server, in one temporary dir."""

    def __init__(self, kit: HarnessKit, tmp: Path, tmux: str, timeout: float) -> None:
        self.kit = kit
        self.tmp = tmp
        self.timeout = timeout
        for name, value in kit.environment().items():  # before the server starts: panes inherit it
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        os.environ["FAKE_TICKETS"] = str(tmp / "tickets.json")
        self.runner = TmuxRunner(socket=f"the-loop-bench-{secrets.token_hex(6)}", binary=tmux)
        plugins = [("fake", fake_plugin), *((name, plugin) for plugin, name in kit.plugins())]
        set_host(PluginHost.create(load_entrypoints=False, plugins=plugins))
        self.work = tmp / "work"
        self.work.mkdir(exist_ok=True)
        self.config = self._config()
        self.dispatcher = Dispatcher(self.config, runner=self.runner)
        self.registry = SessionRegistry(self.config.state)
        self.sessions: list[str] = []  # every conversation started, to see its process gone at the end

    def _config(self) -> LoadedConfig:
        """The conformance rig's config: this kit's harness by default, no spawn announcement."""
        bound = {"routing": {"tmux": {"readyTimeoutSeconds": self.timeout}}}
        path = write_config(self.kit, self.tmp, self.runner.socket, self.work, bound)
        config = load_config(path, get_host())
        events.configure(config.state.events_path, "bench")
        return config

    def describe(self) -> str:
        raise NotImplementedError

    def dispatch(self, ref: str, text: str, *, spawn: bool = False) -> None:
        event = WorkEvent(delivery_id=f"bench-{uuid.uuid4()}", work_item=ref, text=text, spawn=spawn)
        outcome = self.dispatcher.dispatch(event)
        wanted = "spawned" if spawn else "delivered"
        if outcome.status != wanted:
            raise SystemExit(f"{ref}: dispatch returned {outcome} (wanted {wanted!r})")
        if spawn:
            self.sessions.append(self.own(ref).harness_session_id)

    def own(self, ref: str) -> Any:
        record = self.registry.load(ref)
        if record is None or record.own is None:
            raise SystemExit(f"{ref}: no session recorded")
        return record.own

    def kill(self, ref: str) -> None:
        """Kill ``ref``'s session and wait (unmeasured) until its harness process is gone."""
        own = self.own(ref)
        self.runner.kill(own.tmux_target)
        wait(lambda: not process_running(own.harness_session_id), self.timeout, f"{ref}: harness still running", 0.02)

    def close(self) -> None:
        """Kill the server and wait for every harness to exit (Claude Code still writes to its HOME as it goes)."""
        self.runner.kill_server()
        deadline = time.monotonic() + 20
        while any(map(process_running, self.sessions)) and time.monotonic() < deadline:
            time.sleep(0.05)
        socket_file = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / self.runner.socket
        socket_file.unlink(missing_ok=True)  # tmux leaves its socket file behind

    # ------------------------------------------------------------------------ what each harness records

    def recorded(self, ref: str) -> Callable[[], bool]:
        """Before a delivery: a check that turns true once the harness recorded one more input."""
        raise NotImplementedError

    def answered(self, ref: str, text: str) -> None:
        """Wait until ``text``, the session's last input, has been answered and the session is idle again."""
        raise NotImplementedError

    def received_at(self, text: str) -> float | None:
        """When (``time.time()``) the model got the first request ending in ``text``; None without a model."""
        return None


class FakeBench(Bench):
    kit: FakeHarnessKit

    def describe(self) -> str:
        return f"core's fake harness TUI ({sys.executable} -m the_loop.testing.harness)"

    def recorded(self, ref: str) -> Callable[[], bool]:
        log = FakeHarness(self.kit.log)
        before = len(log.records("submit"))
        return lambda: len(log.records("submit")) > before

    def answered(self, ref: str, text: str) -> None:
        pass  # the fake has no model: a submitted input is all there is to a turn


class ClaudeBench(Bench):
    kit: ClaudeKit

    def describe(self) -> str:
        answer = subprocess.run(  # from the kit's HOME, never the operator's
            [str(self.kit.binary), "--version"], capture_output=True, text=True, timeout=60, check=False
        )
        version = answer.stdout.strip() or f"--version exit {answer.returncode}"
        return f"Claude Code {version} at {self.kit.binary}, against the fake Anthropic API on {self.kit.api.url}"

    def recorded(self, ref: str) -> Callable[[], bool]:
        from the_loop_claude import transcript

        path = self.transcript(ref)
        offset = transcript.size(path)
        return lambda: transcript.has_user_entry_after(path, offset)

    def answered(self, ref: str, text: str) -> None:
        """The fake API received a turn ending in ``text``, and the transcript ends in an answer after it."""
        self.kit.api.wait_for_turn(text, self.timeout)
        path = self.transcript(ref)
        wait(lambda: last_entry(path) == "assistant", self.timeout, f"{ref}: no answer in the transcript", 0.005)

    def received_at(self, text: str) -> float | None:
        from the_loop.testing.fake_anthropic import is_conversation, last_user_text

        for entry in self.kit.api.requests():
            body = entry.get("body") or {}
            if entry.get("path") == "/v1/messages" and is_conversation(body) and text in last_user_text(body):
                return float(entry["at"])
        return None

    def transcript(self, ref: str) -> Path:
        from the_loop_claude import transcript

        own = self.own(ref)
        path = transcript.find(own.harness_session_id, Path(own.cwd))
        if path is None:
            raise SystemExit(f"{ref}: Claude Code wrote no transcript")
        return path


def last_entry(path: Path) -> str:
    """The ``type`` of a transcript's last complete user or assistant line ("" when none)."""
    for line in reversed(path.read_bytes().split(b"\n")[:-1]):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("type") in ("user", "assistant"):
            return str(entry["type"])
    return ""


def wait(predicate: Callable[[], bool], timeout: float, what: str, interval: float = POLL_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g}s: {what}")
        time.sleep(interval)


def progress(name: str, what: str, n: int, runs: int, seconds: float) -> None:
    end = "\n" if n == runs else "\r"
    print(f"  {name}: {what} {n}/{runs}: {seconds * 1000:.0f} ms   ", file=sys.stderr, end=end, flush=True)


def measure(bench: Bench, runs: int, settle: float) -> Result:
    name = bench.kit.name
    result = Result(name)
    # (1) spawn → ready: a fresh work item each run, its session killed (and its process gone) before the next.
    for n in range(1, runs + 1):
        ref = f"fake:octo/bench#{n}"
        began = time.monotonic()
        bench.dispatch(ref, f"Start work on bench item {n}.", spawn=True)
        result.spawns.append(time.monotonic() - began)
        bench.kill(ref)
        progress(name, "spawn → ready", n, runs, result.spawns[-1])
    # (2) event → recorded: one live session, each event into it once the previous turn was answered.
    ref = f"fake:octo/bench#{runs + 1}"
    text = "Start work on the bench item that takes the events."
    bench.dispatch(ref, text, spawn=True)
    for n in range(1, runs + 1):
        bench.answered(ref, text)
        time.sleep(settle)
        done = bench.recorded(ref)
        text = f"Event {n}: octocat commented on the pull request."
        wall, began = time.time(), time.monotonic()
        bench.dispatch(ref, text)
        result.calls.append(time.monotonic() - began)
        wait(done, bench.timeout, f"{ref}: event {n} was not recorded")
        result.deliveries.append(time.monotonic() - began)
        progress(name, "event → recorded", n, runs, result.deliveries[-1])
        bench.answered(ref, text)
        if (at := bench.received_at(text)) is not None:
            result.received.append(at - wall)
    return result


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:.1f}"


def p50_p90(values: list[float]) -> str:
    return f"p50 {ms(statistics.median(values))} / p90 {ms(percentile(values, 90))}"


def table(results: list[Result]) -> None:
    head = ["harness", "spawn → ready p50", "p90", "event → recorded p50", "p90"]
    rows = [
        [
            r.harness,
            ms(statistics.median(r.spawns)),
            ms(percentile(r.spawns, 90)),
            ms(statistics.median(r.deliveries)),
            ms(percentile(r.deliveries, 90)),
        ]
        for r in results
    ]
    widths = [max(len(cells[i]) for cells in [head, *rows]) for i in range(len(head))]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(head, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for cells in rows:
        padded = [cells[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))]
        print("| " + " | ".join(padded) + " |")
    print("\nmilliseconds, n = runs per harness.")
    for r in results:
        notes = [
            f"n={len(r.spawns)}",
            f"first spawn {ms(r.spawns[0])}, max {ms(max(r.spawns))}",
            f"max event {ms(max(r.deliveries))}",
            f"dispatch() call of an event {p50_p90(r.calls)}",
        ]
        if r.received:
            notes.append(f"event → model request {p50_p90(r.received)}")
        print(f"  {r.harness}: " + "; ".join(notes))


@contextlib.contextmanager
def harness_bench(harness: str, claude: Path | None, tmux: str, timeout: float, keep: bool = False) -> Iterator[Bench]:
    """One harness's bench in a temporary directory of its own; everything is stopped and removed, and the
    environment restored, afterwards (so a second harness starts from the same one)."""
    saved = dict(os.environ)
    tmp = Path(tempfile.mkdtemp(prefix=f"the-loop-bench-harness-{harness}-"))
    kit: HarnessKit | None = None
    bench: Bench | None = None
    try:
        if harness == "claude":
            from the_loop_claude.conformance import ClaudeKit

            assert claude is not None
            kit = ClaudeKit(tmp, claude)  # starts the fake Anthropic API
            bench = ClaudeBench(kit, tmp, tmux, timeout)
        else:
            kit = FakeHarnessKit(tmp)
            bench = FakeBench(kit, tmp, tmux, timeout)
        yield bench
    finally:
        if bench is not None:
            bench.close()
        if kit is not None:
            kit.stop()
        set_host(None)
        os.environ.clear()
        os.environ.update(saved)
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run_one(harness: str, claude: Path | None, args: argparse.Namespace, tmux: str) -> Result:
    """One harness in a temporary directory of its own; the environment is restored afterwards."""
    with harness_bench(harness, claude, tmux, args.timeout, args.keep) as bench:
        print(f"{harness}: {bench.describe()}")
        return measure(bench, args.runs, args.settle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="spawns, and events, per harness (default 20)")
    parser.add_argument("--harness", choices=("fake", "claude", "both"), default="both", help="default both")
    parser.add_argument("--claude", type=Path, help="Claude Code's executable (default $THE_LOOP_TEST_CLAUDE, .tools/)")
    parser.add_argument("--settle", type=float, default=0.2, help="idle seconds after an answer before an event")
    parser.add_argument("--timeout", type=float, default=60, help="seconds any one wait may take (default 60)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories, to look inside")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    tmux = shutil.which("tmux")  # before a kit's PATH replaces this process's
    if tmux is None:
        raise SystemExit("tmux is not installed")
    claude: Path | None = args.claude or Path(os.environ.get("THE_LOOP_TEST_CLAUDE") or DEFAULT_CLAUDE)
    for name in [k for k in os.environ if k.startswith("THE_LOOP_") or k in ("TMUX", "TMUX_PANE")]:
        del os.environ[name]  # never reach an operator's tmux or config
    harnesses = ["fake", "claude"] if args.harness == "both" else [args.harness]
    if "claude" in harnesses and not (claude and os.access(claude, os.X_OK)):
        missing = f"no Claude Code at {claude} (give --claude PATH; ./test.sh installs it)"
        if args.harness == "claude":
            raise SystemExit(missing)
        print(f"{missing}: only the fake is measured")
        harnesses, claude = ["fake"], None
    version = subprocess.run([tmux, "-V"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"{version}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.runs} runs per harness")
    results = [run_one(harness, claude, args, tmux) for harness in harnesses]
    print()
    table(results)


if __name__ == "__main__":
    main()
