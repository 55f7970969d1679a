"""Steering: interrupt → turn stopped, and what accounting a session's usage costs per event.

Run: ``.venv/bin/python benchmarks/bench_steering.py [--runs 10] [--harness fake|claude|both] [--claude PATH]
[--transcript-mb 10] [--events 200]``.

- **interrupt → stopped**: a live session (from the conformance kits, as ``bench_harness.py`` starts them: core's
  fake harness, and the real Claude Code offline against the fake Anthropic API) is given a long turn; once the
  model is working on it, ``the-loop sessions interrupt`` runs (``operations.interrupt``, through the dispatcher).
  Measured: the key press until the adapter's ``interrupted_check`` says the turn stopped (``session.interrupted``
  ``seconds``), and the whole call until its words were recorded as the next turn.
- **usage per event**: a conversation's transcript of ``--transcript-mb`` MB (Claude Code's shape: one line per
  content block, the same ``message.id`` and ``usage`` repeated on each block of one response), then ``--events``
  times one more response appended and read. Measured per event: the adapter's incremental ``read_usage`` from its
  cursor (what the watch does), beside reading the whole transcript again (what it would cost without a cursor).

Everything runs in temporary directories on private tmux servers and is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench_harness import DEFAULT_CLAUDE, Bench, ClaudeBench, harness_bench, wait

from the_loop.refs import parse_ref

REF = "fake:octo/steering#1"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


# --------------------------------------------------------------------------------------------- interrupt


def interrupts(bench: Bench, runs: int, timeout: float) -> tuple[list[float], list[float]]:
    """Per run: key press → turn stopped, and the interrupt call → its words recorded as the next turn."""
    from the_loop.sessions import operations

    stopped, whole = [], []
    bench.dispatch(REF, "Remember the word pineapple.", spawn=True)
    bench.answered(REF, "Remember the word pineapple.")
    for run in range(runs):
        long = bench.kit.long_turn(120)
        bench.dispatch(REF, long)
        working(bench, long, timeout)
        recorded = bench.recorded(REF)
        began = time.monotonic()
        done = operations.interrupt(bench.config, parse_ref(REF), f"Do this instead, {run}.", source="cli", actor="b")
        if not done.ok:
            raise SystemExit(f"interrupt {run}: {done.message}")
        wait(recorded, timeout, "the interrupt's words were never recorded", 0.001)
        whole.append(time.monotonic() - began)
        logged = [e for e in read_events(bench) if e["event"] == "session.interrupted"]
        if not logged[-1]["stopped"]:
            raise SystemExit(f"interrupt {run}: the harness never said its turn stopped: {logged[-1]}")
        stopped.append(float(logged[-1]["seconds"]))
        bench.answered(REF, f"Do this instead, {run}.")
    return stopped, whole


def working(bench: Bench, text: str, timeout: float) -> None:
    """Until the long turn is under way: the harness took it (the fake), or the model's request arrived."""
    wait(lambda: any(turn and text in turn[-1] for turn in bench.kit.requests()), timeout, "no long turn", 0.001)
    if isinstance(bench, ClaudeBench):
        time.sleep(0.5)  # the answer has begun to stream


def read_events(bench: Bench) -> list[dict[str, Any]]:
    path = bench.config.state.events_path
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -------------------------------------------------------------------------------------------------- usage


def claude_response(n: int, model: str = "claude-sonnet-4-5-20250929") -> list[str]:
    """The transcript lines of one Claude Code response: a thinking-free text block and a tool use, both carrying
    the response's id and usage, as Claude Code writes them."""
    usage = {"input_tokens": 12, "output_tokens": 40, "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 5}
    lines = []
    for block in (
        {"type": "text", "text": "x" * 400},
        {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}},
    ):
        entry = {
            "type": "assistant",
            "uuid": str(uuid.uuid4()),
            "sessionId": "bench",
            "message": {"id": f"msg_{n:08d}", "role": "assistant", "model": model, "content": [block], "usage": usage},
        }
        lines.append(json.dumps(entry))
    lines.append(
        json.dumps({"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "y" * 300}})
    )
    return lines


def usage_costs(adapter: Any, path: Path, session_id: str, cwd: Path, megabytes: int, events: int) -> dict[str, Any]:
    with path.open("w", encoding="utf-8") as handle:
        n = 0
        while handle.tell() < megabytes * 1024 * 1024:
            handle.write("\n".join(claude_response(n)) + "\n")
            n += 1
    began = time.perf_counter()
    first = adapter.read_usage(session_id, cwd, "")
    initial = time.perf_counter() - began
    cursor, counted = first.cursor, len(first.usage)
    incremental, whole = [], []
    for event in range(events):
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n".join(claude_response(n + event)) + "\n")
        began = time.perf_counter()
        read = adapter.read_usage(session_id, cwd, cursor)
        incremental.append(time.perf_counter() - began)
        cursor, counted = read.cursor, counted + len(read.usage)
        began = time.perf_counter()
        adapter.read_usage(session_id, cwd, "")  # the whole transcript again: no cursor
        whole.append(time.perf_counter() - began)
    return {"responses": counted, "initial": initial, "incremental": incremental, "whole": whole}


# ---------------------------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--harness", choices=["fake", "claude", "both"], default="both")
    parser.add_argument("--claude", type=Path, default=None)
    parser.add_argument("--transcript-mb", type=int, default=10)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    tmux = shutil.which("tmux")
    if tmux is None:
        raise SystemExit("tmux is not installed")
    claude = args.claude or Path(os.environ.get("THE_LOOP_TEST_CLAUDE") or DEFAULT_CLAUDE)
    wanted = ["fake", "claude"] if args.harness == "both" else [args.harness]
    if "claude" in wanted and not claude.is_file():
        print(f"(no Claude Code at {claude}: only the fake harness is measured)")
        wanted = [name for name in wanted if name != "claude"]
    for name in [k for k in os.environ if k.startswith("THE_LOOP_") or k in ("TMUX", "TMUX_PANE")]:
        del os.environ[name]  # never reach an operator's tmux or config
    print(f"interrupt → stopped, {args.runs} runs per harness (p50 / p90 / max)")
    for name in wanted:
        with harness_bench(name, claude, tmux, args.timeout) as bench:
            stopped, whole = interrupts(bench, args.runs, args.timeout)
        for label, values in (("key → turn stopped", stopped), ("interrupt → next turn recorded", whole)):
            print(
                f"  {name:6} {label:32} {ms(statistics.median(values)):>9} / {ms(percentile(values, 90)):>9}"
                f" / {ms(max(values)):>9}"
            )
    print(f"\nusage accounting per event, {args.transcript_mb} MB transcript, {args.events} events (p50 / p99)")
    tmp = Path(tempfile.mkdtemp(prefix="the-loop-bench-usage-"))
    try:  # the claude adapter reads a transcript: no Claude Code needed
        measured = measure_claude_usage(tmp, args.transcript_mb, args.events)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    incremental, whole = measured["incremental"], measured["whole"]
    print(f"  first read of the whole transcript  {ms(measured['initial']):>9}  ({measured['responses']} responses)")
    for label, values in (("read from the cursor (the watch)", incremental), ("the whole transcript again", whole)):
        print(f"  {label:35} {ms(statistics.median(values)):>9} / {ms(percentile(values, 99)):>9}")


def measure_claude_usage(tmp: Path, megabytes: int, events: int) -> dict[str, Any]:
    """The claude adapter's ``read_usage`` on a transcript where Claude Code keeps it, under a temporary HOME."""
    from the_loop.config import load_config
    from the_loop.plugins import PluginHost
    from the_loop_claude import plugin
    from the_loop_claude.adapter import ClaudeAdapter
    from the_loop_claude.transcript import project_names

    os.environ["HOME"] = str(tmp / "home")
    os.environ.pop("CLAUDE_CONFIG_DIR", None)
    cwd = tmp / "work"
    cwd.mkdir()
    session_id = str(uuid.uuid4())
    path = tmp / "home" / ".claude" / "projects" / project_names(cwd)[0] / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True)
    config_path = tmp / "cfg" / ".the-loop" / "cli-config.yaml"
    config_path.parent.mkdir(parents=True)
    config_path.write_text('version: "0.12.0"\n')
    config = load_config(config_path, PluginHost.create(load_entrypoints=False, plugins=[("claude", plugin)]))
    return usage_costs(ClaudeAdapter(config), path, session_id, cwd, megabytes, events)


if __name__ == "__main__":
    sys.exit(main())
