"""What a work item's choices cost: reading its ``work-item-state.json``, resolving a model and an effort into launch
arguments, the router's check for a ticked checklist on every comment, and the whole-process ``the-loop check`` and
``the-loop models check``.

Run: ``.venv/bin/python benchmarks/bench_choices.py [--runs N]``. In-process rows are the median of N calls (µs);
process rows the median of N runs (ms) after one warm-up. ``models check`` runs the real Claude Code CLI when
``THE_LOOP_TEST_CLAUDE`` names it (as ``./test.sh`` sets it; else ``.tools/claude-code``), against the fake Anthropic
API on 127.0.0.1: the first run measures (``claude --help`` and ``GET /v1/models``), later ones keep fresh verdicts.
Targets: a spawn's choice (file read + resolve) ≤ 1 ms; the ticked-checklist check on a 10 KB comment ≤ 20 µs;
``the-loop check`` within 1.2x of ``the-loop sessions list``, which loads the same config (both validate it whole).
Everything lives in a temporary directory, with ``HOME`` pointed inside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from the_loop.config import load_config
from the_loop.plugins import PluginHost, get_host, set_host
from the_loop.refs import parse_ref
from the_loop.sessions import choices, gate, models
from the_loop.sessions.harness import adapter_for
from the_loop.testing import fake_plugin
from the_loop.testing.fake_anthropic import FakeAnthropic

ROOT = Path(__file__).resolve().parent.parent
REF = "github:octo/repo#15"


def micro(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def process(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, str]:
    subprocess.run(argv, env=env, capture_output=True, check=False)  # warm-up
    times, out = [], ""
    for _ in range(runs):
        start = time.perf_counter()
        result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        out = result.stdout if result.returncode == 0 else f"exit {result.returncode}: {result.stderr[-200:]}"
    return statistics.median(times) * 1e3, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-choices-"))
    (tmp / "home").mkdir()
    work = tmp / "work"
    os.environ["HOME"] = str(tmp / "home")
    set_host(PluginHost.create(load_entrypoints=False, plugins=[("fake", fake_plugin)]))
    path = tmp / "cfg" / ".the-loop" / "cli-config.yaml"
    path.parent.mkdir(parents=True)
    document = {
        "repositories": ["octo/repo", "octo/lib"],
        "models": ["sonnet", "opus"],
        "effort": ["low", "high"],
        "routing": {"defaultHarness": "fake", "spawnWorkdir": str(work), "startGate": {"enabled": True}},
    }
    path.write_text(yaml.safe_dump(document))
    config = load_config(path, get_host())
    ref = parse_ref(REF)
    state_file = work / "docs" / "specs" / "issue-15" / "work-item-state.json"
    state_file.parent.mkdir(parents=True)
    rows = [{"ref": f"github:octo/lib#{n}", "linkedBy": "session"} for n in range(1, 21)]
    state_file.write_text(json.dumps({"workItem": REF, "model": "opus", "effort": "high", "pullRequests": rows}))
    adapter = adapter_for("fake", config)

    def spawn_choice() -> object:
        state = choices.current(config, ref, work)
        return models.resolve(config, adapter, state.model, state.effort)

    comment = ("Looks good, but please rename the widget and add a test for the empty case.\n" * 140)[:10_000]
    print(f"{'in process (median of ' + str(args.runs) + ')':<58} {'µs':>10}")
    pr = parse_ref("github:octo/lib#3")
    rows_in_process: list[tuple[str, Callable[[], object]]] = [
        ("read work-item-state.json (20 PR rows) + resolve", spawn_choice),
        ("resolve alone", lambda: models.resolve(config, adapter, "opus", "high")),
        ("ticked-checklist check, 10 KB comment", lambda: gate.is_ticked_reply(comment)),
        ("sessionPerPr for a PR event (file read)", lambda: choices.pull_request_gets_session(config, ref, pr)),
    ]
    for label, call in rows_in_process:
        print(f"{label:<58} {micro(call, args.runs):>10.1f}")

    env = {**os.environ, "THE_LOOP_CLI_CONFIG": str(path), "THE_LOOP_EXTRA_PLUGINS": "the_loop.testing.fake_plugin"}
    env.pop("THE_LOOP_LOAD_PLUGINS", None)
    runs = max(3, args.runs // 40)
    the_loop = [sys.executable, "-m", "the_loop"]
    print(f"\n{'whole process (median of ' + str(runs) + ')':<58} {'ms':>10}")
    ms, _ = process([*the_loop, "check", REF], env, runs)
    print(f"{'the-loop check ' + REF:<58} {ms:>10.1f}")
    ms, _ = process([*the_loop, "sessions", "list"], env, runs)
    print(f"{'the-loop sessions list (the same config load, for scale)':<58} {ms:>10.1f}")
    claude = os.environ.get("THE_LOOP_TEST_CLAUDE") or str(ROOT / ".tools/claude-code/node_modules/.bin/claude")
    if not os.path.exists(claude):
        print("the-loop models check: skipped (no Claude Code CLI found)")
        return
    fake = FakeAnthropic(tmp / "anthropic.jsonl", models=["claude-sonnet-4-5", "claude-opus-4-1"])
    fake.start()
    try:
        document["routing"]["defaultHarness"] = "claude"
        document["integrations"] = {"claude": {"binary": claude}}
        path.write_text(yaml.safe_dump(document))
        claude_env = {**env, "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-bench-key"}
        claude_env.pop("THE_LOOP_EXTRA_PLUGINS")
        first = time.perf_counter()
        result = subprocess.run([*the_loop, "models", "check"], env=claude_env, capture_output=True, text=True)
        measured = (time.perf_counter() - first) * 1e3
        print(f"{'the-loop models check, first (measures 4 verdicts)':<58} {measured:>10.1f}")
        if result.returncode != 0:
            print(result.stderr[-400:])
        ms, _ = process([*the_loop, "models", "check"], claude_env, runs)
        print(f"{'the-loop models check, verdicts fresh (kept)':<58} {ms:>10.1f}")
        ms, _ = process([*the_loop, "models", "check", "--force"], claude_env, runs)
        print(f"{'the-loop models check --force':<58} {ms:>10.1f}")
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
