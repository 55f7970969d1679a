"""Channels: publish → fake Slack latency, and the undelivered queue's drain rate.

Run: ``.venv/bin/python benchmarks/bench_channels.py [--events N] [--items K]``. Uses slack-sdk's real WebClient
against the fake Slack Web API of the plugin's tests on 127.0.0.1 (nothing leaves the machine). Prints:

- publish latency: ``channels.publish`` of one ``comment.agent`` into a bound thread until the fake stored it
  (p50 / p95 / max, ms);
- drain rate: N events queued while Slack is down, across K work items, then drained back to empty (entries/s of
  posting, and drains needed at 20 a drain);
- poll cycle: one reply waiting in each of the K threads, one ``read_cycle`` claiming them all (time, Slack calls).
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
sys.path.insert(0, str(ROOT / "plugins" / "slack" / "tests"))

from fake_slack import FakeSlack, Server  # noqa: E402

import the_loop_slack.plugin  # noqa: E402
from the_loop import channels, events  # noqa: E402
from the_loop.channels import outbox as channel_outbox  # noqa: E402
from the_loop.config import load_config  # noqa: E402
from the_loop.plugins import PluginHost, set_host  # noqa: E402
from the_loop.refs import parse_ref  # noqa: E402
from the_loop.testing import fake_plugin  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200, help="events published (and queued)")
    parser.add_argument("--items", type=int, default=10, help="work items they are spread over")
    args = parser.parse_args()

    host = PluginHost.create(load_entrypoints=False)
    host._register(fake_plugin, "fake", "(bench)", "", builtin=False)
    host._register(the_loop_slack.plugin, "slack", "(bench)", "", builtin=False)
    set_host(host)
    server = Server(FakeSlack())
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["FAKE_TICKETS"] = str(Path(tmp) / "tickets.json")
        os.environ["THE_LOOP_SLACK_BOT_TOKEN"] = "xoxb-bench"
        path = Path(tmp) / ".the-loop" / "cli-config.yaml"
        path.parent.mkdir(parents=True)
        slack = {"enabled": True, "channel": "C0BENCH", "apiBaseUrl": server.base_url, "subscribe": ["comment.agent"]}
        routing = {"authorizedUsers": [{"name": "bench", "slack": "U0BENCH"}]}
        path.write_text(yaml.safe_dump({"routing": routing, "channels": {"slack": slack}}))
        config = load_config(path, host)
        events.configure(config.state.events_path, "bench")
        items = [f"fake:octo/repo#{n}" for n in range(1, args.items + 1)]
        channel = next(iter(channels.enabled_channels(config)))
        for item in items:
            channels.open_conversation(config, channel, parse_ref(item), "start")

        latencies = []
        for n in range(args.events):
            started = time.perf_counter()
            channels.publish(config, "comment.agent", items[n % len(items)], text=f"event {n}")
            latencies.append((time.perf_counter() - started) * 1000)
        stored = sum(1 for m in server.fake.channels["C0BENCH"] if m.get("thread_ts"))
        assert stored == args.events, f"only {stored} of {args.events} posts landed"
        latencies.sort()
        p95 = latencies[int(len(latencies) * 0.95) - 1]
        print(
            f"publish → fake Slack    p50 {statistics.median(latencies):6.2f} ms   p95 {p95:6.2f} ms"
            f"   max {latencies[-1]:6.2f} ms   ({args.events} events)"
        )

        server.fake.fail("chat.postMessage", 500)
        for n in range(args.events):
            channels.publish(config, "comment.agent", items[n % len(items)], text=f"late {n}")
        server.fake.heal()
        drains, now, started = 0, time.time(), time.perf_counter()
        while channel_outbox.backlog(config.state):
            now += channel_outbox.DRAIN_INTERVAL
            channels.drain(config, now=now)
            drains += 1
        elapsed = time.perf_counter() - started
        stored = sum(1 for m in server.fake.channels["C0BENCH"] if m.get("thread_ts"))
        queued = min(args.events, channel_outbox.CAP)  # past the cap the oldest were dropped
        assert stored == args.events + queued, f"{stored} posts landed, expected {args.events + queued}"
        print(
            f"outbox drain            {queued / elapsed:6.0f} entries/s posting   {drains} drains of ≤"
            f"{channel_outbox.DRAIN_BUDGET} ({queued} entries, {args.items} work items)"
        )

        for item in items:  # one reply in every thread, then one poll cycle claims them all
            bound = channels.binding(config, "slack", item)
            assert bound is not None
            server.fake.add_message("C0BENCH", user="U0BENCH", text=f"reply to {item}", thread_ts=bound["thread"])
        calls, started = len(server.fake.calls), time.perf_counter()
        counts = channels.read_cycle(config, channel)
        elapsed = time.perf_counter() - started
        assert counts["accepted"] == args.items, counts
        print(
            f"poll cycle              {elapsed * 1000:6.1f} ms for {args.items} threads   "
            f"{len(server.fake.calls) - calls} Slack calls (replies + reactions)   {counts['accepted']} claimed"
        )
    server.close()


if __name__ == "__main__":
    main()
