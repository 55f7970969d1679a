"""Whole-process timings of the ``the-loop`` command, beside bare Python and bare click.

Run: ``.venv/bin/python benchmarks/bench_cli.py [--runs N] [--warmup W]``. Each command runs W times to warm the page
cache and ``__pycache__``, then N times timed (median, min, max in milliseconds), both as the venv's ``the-loop``
script and as ``python -m the_loop``. The config enables nothing and lives in a temporary directory with ``HOME``
pointed at another one. A second table runs ``--help``, ``status`` and ``events`` under ``-X importtime`` and shows
whether any client library or server was imported (none may be), plus whether pydantic and yaml were.

Targets (from the issue; the reference takes 283/282 ms): ``--help`` ≤ 120 ms, ``status`` ≤ 190 ms, ``events`` ≤ 190
ms over 1,000 lines and ≤ 1 s over 100,000 (bench_events' target). A missed target prints the biggest imports.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

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


def timed(argv: list[str], env: dict[str, str], cwd: Path, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        run(argv, env, cwd)
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        run(argv, env, cwd)
        samples.append((time.perf_counter() - began) * 1000)
    return samples


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
    options = parser.parse_args()
    runs = max(options.runs, 7)

    with tempfile.TemporaryDirectory(prefix="the-loop-bench-cli-") as name:
        tmp = Path(name)
        configs = make_world(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("THE_LOOP_", "TMUX", "PYTHON"))}
        env["HOME"] = str(tmp / "home")
        small, large = str(configs["small"]), str(configs["large"])
        cases = [
            Case("python -c pass", ["-c", "pass"], python_only=True),
            Case('python -c "import click"', ["-c", "import click"], python_only=True),
            Case("--help", ["--help"], 120),
            Case("--version", ["--version"], 120),
            Case("status", ["-c", small, "status"], 190),
            Case("events --limit 50 (1,000 lines)", ["-c", small, "events", "--limit", "50"], 190),
            Case("events --limit 50 (100,000 lines)", ["-c", large, "events", "--limit", "50"], 1000),
            Case("sessions list (100 records)", ["-c", small, "sessions", "list"]),
        ]
        print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {options.warmup} warm-up + {runs} timed runs "
            "each; milliseconds"
        )
        header = f"{'command':<36} {'form':<18} {'median':>7} {'min':>7} {'max':>7}  target"
        print(header)
        print("-" * len(header))
        missed: list[Case] = []
        for case in cases:
            forms = [("python", [sys.executable, *case.args])]
            if not case.python_only:
                forms = [
                    ("the-loop script", [str(BIN / "the-loop"), *case.args]),
                    ("python -m the_loop", [sys.executable, "-m", "the_loop", *case.args]),
                ]
            for form, argv in forms:
                samples = timed(argv, env, tmp / "cwd", runs, options.warmup)
                median = statistics.median(samples)
                verdict = ""
                if case.target_ms is not None:
                    ok = median <= case.target_ms
                    verdict = f"≤ {case.target_ms:.0f}: {'met' if ok else 'MISSED'}"
                    if not ok and case not in missed:
                        missed.append(case)
                print(f"{case.label:<36} {form:<18} {median:7.1f} {min(samples):7.1f} {max(samples):7.1f}  {verdict}")

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
