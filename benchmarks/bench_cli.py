"""Whole-process timings of the ``the-loop`` command, beside bare Python and bare click.

Run: ``.venv/bin/python benchmarks/bench_cli.py [--runs N] [--warmup W] [--before TREE]``. Each command runs W times
to warm the page cache and ``__pycache__``, then N times timed (median in milliseconds), both as the venv's
``the-loop`` script and as ``python -m the_loop``. With ``--before`` (a checkout of the tree before a change, e.g.
``git worktree add /tmp/before HEAD~3``) every command also runs on that tree, interleaved run by run, and the table
shows both medians and after/before. The config enables nothing and lives in a temporary directory with ``HOME``
pointed at another one. A second table runs ``--help``, ``status`` and ``events`` under ``-X importtime`` and shows
whether any client library or server was imported (none may be), plus whether pydantic and yaml were.

Targets: ``--help`` ≤ 120 ms and ≤ 5x ``python -c pass``; ``status`` ≤ 190 ms and, like ``events`` over 1,000
lines, ≤ 0.5x the tree before the redesign (issue 17); ``events`` ≤ 1 s over 100,000 lines (bench_events' target).
``--help`` and ``status`` are timed with their caches warm (every run after the first: the plugin commands; what
status reads of the config and the plugins) and, each on its own row, cold. A missed target prints the biggest
imports.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_events import write_log  # the events benchmark's realistic log (this folder is on sys.path)

from the_loop.state import StateLayout
from the_loop.state.registry import Endpoint, SessionRegistry

FORBIDDEN = ("github", "slack_sdk", "jira", "uvicorn", "starlette", "httpx")
NOTED = ("pydantic", "yaml")  # allowed where a command reads the config, but worth seeing
BIN = Path(sys.executable).parent
# ``python -m the_loop`` that writes sys.modules to argv[1] at exit: -X importtime alone does not log a module
# imported by importlib.import_module (how commands and plugins load), only what that module imports in turn.
TRACE = """\
import atexit, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w", encoding="utf-8").write("\\n".join(sorted(sys.modules))))
runpy.run_module("the_loop", run_name="__main__", alter_sys=True)
"""
CONFIG = """\
version: "0.12.0"
webhooks:
  ghWebhook:
    enabled: false
polling:
  enabled: false
routing:
  enabled: false
channels:
  slack:
    enabled: false
"""


@dataclass
class Case:
    label: str
    args: list[str]  # after the interpreter or the script
    target_ms: float | None = None
    python_only: bool = False  # a bare-python baseline: no script form
    times_python: float | None = None  # a target as a multiple of `python -c pass`
    times_before: float | None = None  # a target as a multiple of the tree before (--before)
    cold: bool = False  # the caches are removed before every run


def make_world(tmp: Path) -> dict[str, Path]:
    """Two config roots (a 1,000-line log and 100 registry records; a 100,000-line log), a home and a cwd."""
    (tmp / "home").mkdir()
    (tmp / "cwd").mkdir()
    configs = {}
    for name in ("small", "large"):
        path = tmp / name / ".the-loop" / "cli-config.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(CONFIG, encoding="utf-8")
        configs[name] = path
    root = configs["small"].parent  # a config without state.root keeps its state beside itself
    (root / "logs").mkdir()
    write_log(root / "logs" / "events.jsonl", 1_000)
    (configs["large"].parent / "logs").mkdir()
    write_log(configs["large"].parent / "logs" / "events.jsonl", 100_000)
    registry = SessionRegistry(StateLayout(root))
    for n in range(1, 101):
        ref = f"github:octo/repo#{n}"

        def change(record, ref=ref, n=n) -> None:  # type: ignore[no-untyped-def]
            record.sessions[ref] = Endpoint(
                harness="claude",
                harness_session_id=f"00000000-0000-4000-8000-{n:012d}",
                cwd=str(tmp / "work"),
                created_at="2026-07-22T10:00:00Z",
                last_event_at="2026-07-22T11:00:00Z",
                tmux_target=f"loop-github-octo-repo-{n}",
                recent_deliveries=[f"d{n}-{i}" for i in range(20)],
            )

        registry.update(ref, change)
    return configs


def timed(
    trees: list[tuple[list[str], dict[str, str]]], cwd: Path, runs: int, warmup: int, before_each: Any = None
) -> list[list[float]]:
    """Time each (argv, env) of ``trees`` ``runs`` times, interleaved (a, b, a, b, …) so that a load change on the
    box hits both alike; ``before_each`` runs untimed before every run (clearing a cache)."""
    for _ in range(warmup):
        for argv, env in trees:
            run(argv, env, cwd)
    samples: list[list[float]] = [[] for _ in trees]
    for _ in range(runs):
        for index, (argv, env) in enumerate(trees):
            if before_each is not None:
                before_each()
            began = time.perf_counter()
            run(argv, env, cwd)
            samples[index].append((time.perf_counter() - began) * 1000)
    return samples


def tree_env(env: dict[str, str], tree: Path) -> dict[str, str]:
    """``env`` running the checkout at ``tree`` instead of the installed one: its sources first on the path (the
    venv's editable installs point at this checkout; entry points are the same names), with caches of its own (two
    trees sharing one cache file would each find the other's key and rebuild it on every run)."""
    sources = [tree / "core" / "src", *sorted(tree.glob("plugins/*/src")), *sorted(tree.glob("examples/*/src"))]
    cache = Path(env["THE_LOOP_CACHE_DIR"]).with_name("cache-before")
    return {**env, "PYTHONPATH": os.pathsep.join(str(path) for path in sources), "THE_LOOP_CACHE_DIR": str(cache)}


def clear_caches(tmp: Path) -> None:
    for name in ("cache", "cache-before"):
        shutil.rmtree(tmp / name, ignore_errors=True)


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.decode()[-500:]}")
    return result


def import_times(stderr: str) -> dict[str, tuple[int, int]]:
    """``-X importtime`` lines → module: (self µs, cumulative µs)."""
    found = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_us, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        if self_us.isdigit():
            found[name] = (int(self_us), int(cumulative))
    return found


def traced(args: list[str], env: dict[str, str], tmp: Path) -> tuple[dict[str, tuple[int, int]], set[str]]:
    """Run ``python -X importtime -m the_loop ARGS``; return its import times and every module loaded at exit."""
    out = tmp / "modules.txt"
    argv = [sys.executable, "-X", "importtime", "-c", TRACE, str(out), *args]
    modules = import_times(run(argv, env, tmp / "cwd").stderr.decode())
    return modules, set(out.read_text(encoding="utf-8").split())


def imported(modules: dict[str, tuple[int, int]] | set[str], package: str) -> bool:
    return any(name == package or name.startswith(package + ".") for name in modules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of the tree before a change (git worktree add /tmp/before REV): each command then runs "
        "on both, interleaved, and the table shows both medians and their ratio",
    )
    options = parser.parse_args()
    runs = max(options.runs, 7)

    with tempfile.TemporaryDirectory(prefix="the-loop-bench-cli-") as name:
        tmp = Path(name)
        configs = make_world(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("THE_LOOP_", "TMUX", "PYTHON"))}
        env["HOME"] = str(tmp / "home")
        small, large = str(configs["small"]), str(configs["large"])
        cache = tmp / "cache"  # the command and status caches: this run's own
        env["THE_LOOP_CACHE_DIR"] = str(cache)
        cases = [
            Case("python -c pass", ["-c", "pass"], python_only=True),
            Case('python -c "import click"', ["-c", "import click"], python_only=True),
            Case("--help", ["--help"], 120, times_python=5),
            Case("--help (no command cache yet)", ["--help"], cold=True),
            Case("--version", ["--version"], 120),
            Case("status", ["-c", small, "status"], 190, times_before=0.5),
            Case("status (no status cache yet)", ["-c", small, "status"], cold=True),
            Case("events --limit 50 (1,000 lines)", ["-c", small, "events", "--limit", "50"], 190, times_before=0.5),
            Case("events --limit 50 (100,000 lines)", ["-c", large, "events", "--limit", "50"], 1000),
            Case("sessions list (100 records)", ["-c", small, "sessions", "list"]),
        ]
        trees = (
            [("after", env)] if options.before is None else [("before", tree_env(env, options.before)), ("after", env)]
        )
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {options.warmup} warm-up + {runs} timed runs "
            f"each; milliseconds{'; before = ' + str(options.before) + ', interleaved' if options.before else ''}"
        )
        columns = "".join(f" {label + ' median':>14}" for label, _ in trees) + (" ratio" if options.before else "")
        header = f"{'command':<36} {'form':<18}{columns}  target"
        print(header)
        print("-" * len(header))
        missed: list[Case] = []
        python_ms = 0.0
        for case in cases:
            forms = [("python", [sys.executable, *case.args])]
            if not case.python_only:
                forms = [
                    ("the-loop script", [str(BIN / "the-loop"), *case.args]),
                    ("python -m the_loop", [sys.executable, "-m", "the_loop", *case.args]),
                ]
            for form, argv in forms:
                runs_of = [(argv, tree) for _, tree in (trees if not case.python_only else trees[-1:])]
                clear = (lambda: clear_caches(tmp)) if case.cold else None
                medians = [
                    statistics.median(found) for found in timed(runs_of, tmp / "cwd", runs, options.warmup, clear)
                ]
                after = medians[-1]
                if case.label == "python -c pass":
                    python_ms = after
                verdicts = []
                if case.target_ms is not None:
                    verdicts.append(f"≤ {case.target_ms:.0f}: {'met' if after <= case.target_ms else 'MISSED'}")
                if case.times_python is not None and python_ms:
                    ok = after <= case.times_python * python_ms
                    verdicts.append(
                        f"{after / python_ms:.1f}x python <= {case.times_python:g}x: {'met' if ok else 'MISSED'}"
                    )
                if case.times_before is not None and len(medians) == 2:
                    ok = after <= case.times_before * medians[0]
                    verdicts.append(f"<= {case.times_before:g}x before: {'met' if ok else 'MISSED'}")
                if any("MISSED" in verdict for verdict in verdicts) and case not in missed:
                    missed.append(case)
                shown = "".join(f" {median:14.1f}" for median in medians)
                if options.before:
                    shown += f" {after / medians[0]:5.2f}" if len(medians) == 2 else "      "
                    shown += " " * (len(trees) - len(medians)) * 15
                print(f"{case.label:<36} {form:<18}{shown}  {'; '.join(verdicts)}")

        print()
        print("-X importtime (python -m the_loop): client libraries and servers imported?")
        header = (
            f"{'command':<36} {'modules':>7} {'forbidden: importtime':<22} {'sys.modules':<12} {'pydantic':<9} "
            f"{'yaml':<5} {'import ms':>9}"
        )
        print(header)
        print("-" * len(header))
        failures = []
        profiles: dict[str, dict[str, tuple[int, int]]] = {}
        for case in cases:
            if case.label.split()[0] not in ("--help", "status", "events"):
                continue
            if case.cold:
                clear_caches(tmp)
            else:
                run([sys.executable, "-m", "the_loop", *case.args], env, tmp / "cwd")  # its caches warm, as timed
            modules, loaded = traced(case.args, env, tmp)
            profiles[case.label] = modules
            bad = [package for package in FORBIDDEN if imported(modules, package)]
            bad_loaded = [package for package in FORBIDDEN if imported(loaded, package)]
            failures += [f"{case.label}: {package}" for package in dict.fromkeys(bad + bad_loaded)]
            noted = ["yes" if imported(loaded, package) else "no" for package in NOTED]
            total = sum(self_us for self_us, _ in modules.values()) / 1000
            print(
                f"{case.label:<36} {len(loaded):>7} {', '.join(bad) or 'none':<22} "
                f"{', '.join(bad_loaded) or 'none':<12} {noted[0]:<9} {noted[1]:<5} {total:9.1f}"
            )
        print(
            "(modules: sys.modules at exit; import ms: sum of -X importtime self times, which miss modules loaded "
            "through importlib.import_module itself — lazy commands and plugin roots — hence the sys.modules check)"
        )

        for case in missed:
            modules = profiles.get(case.label)
            if modules is None:
                continue
            print(f"\n{case.label} missed its target; biggest imports (ms, self / cumulative):")
            by_cumulative = sorted(modules.items(), key=lambda item: item[1][1], reverse=True)
            for mod, (self_us, cum) in by_cumulative[:15]:
                print(f"  {cum / 1000:7.1f} cumulative  {self_us / 1000:6.1f} self  {mod}")
            by_self = sorted(modules.items(), key=lambda item: item[1][0], reverse=True)
            print("  largest self times: " + ", ".join(f"{m} {s / 1000:.1f}" for m, (s, _) in by_self[:8]))
        if failures:
            raise SystemExit("forbidden imports: " + "; ".join(failures))


if __name__ == "__main__":
    main()
