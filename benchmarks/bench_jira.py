"""Jira poll cycle cost: the real ``jira`` library against the fake Jira REST API on 127.0.0.1.

Run: ``.venv/bin/python benchmarks/bench_jira.py [--tickets N] [--comments M] [--cycles K]``. Builds N armed tickets
with M comments each, then runs K poll cycles through core's ``run_cycle``: the first (baseline: every thread read and
recorded), idle ones (nothing new), and one after a new comment on every ticket (each forwarded to the inbox). Prints,
per kind of cycle, the wall time and the requests the cycle sent. Requests per idle cycle are 1 search page per 100
tickets plus one comment page per 100 comments per ticket: Jira has no conditional requests, so the cost is linear.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "jira" / "tests"))

from fake_jira import FakeJira  # noqa: E402

from the_loop import events  # noqa: E402
from the_loop.config import load_config  # noqa: E402
from the_loop.ingress.poller import run_cycle  # noqa: E402
from the_loop.interfaces import ServiceContext  # noqa: E402
from the_loop.plugins import PluginHost, set_host  # noqa: E402

LABEL = "the-loop:auto-execute"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=50)
    parser.add_argument("--comments", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=5, help="idle cycles to time")
    args = parser.parse_args()
    os.environ.update(JIRA_EMAIL="bench@example.test", JIRA_API_TOKEN="bench-token")
    host = PluginHost.create(load_entrypoints=False)
    import the_loop_jira.plugin

    host._register(the_loop_jira.plugin, "jira", "(bench)", "", builtin=False)
    set_host(host)
    with FakeJira() as fake, tempfile.TemporaryDirectory() as tmp:
        for n in range(1, args.tickets + 1):
            fake.add_issue(f"PROJ-{n}", labels=[LABEL])
            for m in range(args.comments):
                fake.add_comment(f"PROJ-{n}", f"comment {m}", "acc-x")
        path = Path(tmp) / ".the-loop" / "cli-config.yaml"
        path.parent.mkdir()
        path.write_text(
            yaml.safe_dump(
                {
                    "version": "0.12.0",
                    "polling": {"sources": [{"provider": "jira", "projects": ["PROJ"]}]},
                    "integrations": {
                        "jira": {
                            "site": "jira.test",
                            "deployment": "cloud",
                            "serverUrl": fake.url,
                            "api": {"emailEnv": ["JIRA_EMAIL"], "tokenEnv": ["JIRA_API_TOKEN"]},
                            "projects": {"PROJ": {"repository": "octo/repo"}},
                        }
                    },
                }
            )
        )
        config = load_config(path, host)
        events.configure(config.state.events_path, "poller")
        from the_loop_jira.poll import JiraPollSource

        source = JiraPollSource(config)
        context = ServiceContext(config=config, should_stop=lambda: False)

        def timed() -> tuple[float, int, dict[str, object]]:
            before = len(fake.requests)
            began = time.perf_counter()
            cycle = run_cycle(context, [source])
            return time.perf_counter() - began, len(fake.requests) - before, cycle

        rows = []
        elapsed, sent, cycle = timed()
        rows.append(("baseline (first sight)", elapsed, sent, cycle["commentsForwarded"]))
        idle = [timed() for _ in range(args.cycles)]
        rows.append(
            ("idle (median)", statistics.median(i[0] for i in idle), idle[0][1], idle[0][2]["commentsForwarded"])
        )
        for n in range(1, args.tickets + 1):
            fake.add_comment(f"PROJ-{n}", "new work", "acc-ok")
        elapsed, sent, cycle = timed()
        rows.append(("one new comment per ticket", elapsed, sent, cycle["commentsForwarded"]))
    print(f"{args.tickets} tickets x {args.comments} comments, fake Jira on 127.0.0.1")
    print(f"{'cycle':<28} {'ms':>8} {'requests':>9} {'forwarded':>10}")
    for name, seconds, requests, forwarded in rows:
        print(f"{name:<28} {seconds * 1000:8.1f} {requests:9d} {forwarded:10}")


if __name__ == "__main__":
    main()
