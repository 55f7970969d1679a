"""Poll-cycle request cost: what one GitHub poll cycle asks the API, for R repositories x I watched items x C comments.

Run: ``.venv/bin/python benchmarks/bench_poll.py [--repos R] [--items I] [--comments C] [--interval S]``.
Builds the GitHub poll source in this process against the fake GitHub API on 127.0.0.1 (real HTTP, real PyGithub
requester, real ETags), with its state root in a temporary directory, then runs: cycle 1 (first sight: every item
baselined), cycle 2 (idle), cycle 3 (one new comment on one item), cycle 4 (idle again); between cycles the
inbox is settled, as the router would. For each cycle it prints
the wire requests, how many were conditional hits (304: not counted by GitHub's primary rate limit) and how many
count, then requests and counted requests per hour at ``--interval`` beside B §5's reference (about 4,700 per hour
for 10 repositories at 60 s). Targets: an idle cycle counts 0; the one-comment cycle sends ≤ R + 3 requests of which
≤ 4 count.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "github" / "tests"))

from fake_github import BOT, TOKEN, FakeGitHub  # noqa: E402

LABEL = "the-loop: auto-execute"
REFERENCE_PER_HOUR = 4700  # B §5, "medium" (10 repositories at intervalSeconds 60)


def build(state: Path, fake: FakeGitHub, repos: list[str], interval: int) -> Any:
    import os

    import yaml

    import the_loop_github.plugin
    from the_loop.config import load_config
    from the_loop.plugins import PluginHost, set_host
    from the_loop_github.poll import GitHubPollSource

    os.environ["GH_TOKEN"] = TOKEN
    host = PluginHost.create(load_entrypoints=False, plugins=[("github", the_loop_github.plugin)])
    set_host(host)
    config_path = state / "cli-config.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "version": "0.12.0",
                "repositories": repos,
                "routing": {"authorizedUsers": ["alice"]},  # requireStartCommand: true, the default
                "polling": {"enabled": True, "intervalSeconds": interval, "sources": [{"provider": "github"}]},
                **fake.config(),
            }
        )
    )
    return GitHubPollSource(load_config(config_path, host))


def cycle(source: Any, fake: FakeGitHub) -> tuple[int, int, float]:
    from the_loop.interfaces import ServiceContext

    before = len(fake.requests)
    began = time.perf_counter()
    source.poll_once(ServiceContext(config=source.config, should_stop=lambda: False))
    took = time.perf_counter() - began
    source.inbox.settle(*source.inbox.pending())  # what the router does between cycles: every event handled
    made = fake.requests[before:]
    return len(made), sum(1 for r in made if r.status == 304), took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repos", type=int, default=10)
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--comments", type=int, default=20)
    parser.add_argument("--interval", type=int, default=60, help="intervalSeconds, for the per-hour figures")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-poll-") as tmp, FakeGitHub(tokens={TOKEN: BOT}) as fake:
        repos = [f"octo/repo{n}" for n in range(args.repos)]
        for repo in repos:
            for number in range(1, args.items + 1):
                fake.add_issue(repo, number, labels=[LABEL], author="alice")
                for c in range(args.comments):
                    fake.add_comment(repo, number, f"comment {c}", login="alice")

        source = build(Path(tmp), fake, repos, args.interval)
        rows = []
        for name, change in (
            ("1 first sight", None),
            ("2 idle", None),
            ("3 one new comment", lambda: fake.add_comment(repos[0], 1, "news", login="alice")),
            ("4 idle", None),
        ):
            if change:
                change()
            requests, hits, took = cycle(source, fake)
            rows.append((name, requests, hits, requests - hits, took))

    print(f"{args.repos} repositories x {args.items} watched items x {args.comments} comments (R = {args.repos})")
    print(f"{'cycle':<20} {'requests':>9} {'304 hits':>9} {'counted':>8} {'seconds':>8}")
    for name, requests, hits, counted, took in rows:
        print(f"{name:<20} {requests:>9} {hits:>9} {counted:>8} {took:>8.2f}")
    per_hour = 3600 // args.interval
    idle, busy = rows[1], rows[2]
    print(
        f"per hour at {args.interval}s: idle {idle[1] * per_hour} requests ({idle[3] * per_hour} counted); "
        f"one comment every cycle {busy[1] * per_hour} requests ({busy[3] * per_hour} counted); "
        f"reference design ≈ {REFERENCE_PER_HOUR:,} requests (all counted)"
    )
    ok = idle[3] == 0 and rows[3][3] == 0 and busy[1] <= args.repos + 3 and busy[3] <= 4
    print("targets: idle counts 0, one comment ≤ R+3 requests and ≤ 4 counted —", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
