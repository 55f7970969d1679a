"""State operations at 10,000 work items: index rebuild (cold and warm cache) and one section update.

Run: ``.venv/bin/python benchmarks/bench_state.py [--records N] [--repeat K]``. Prints one line per figure (median,
min and max of K runs, in milliseconds). Target: a full index rebuild under 1 s at 10,000 records.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from the_loop.refs import WorkItemRef, parse_ref
from the_loop.state import StateLayout, dump_json
from the_loop.state.store import WorkItemStore


def github_url(ref: WorkItemRef) -> str:
    return f"https://github.com/{ref.owner}/{ref.repo}/issues/{ref.number}"


def sample_record(number: int) -> dict[str, object]:
    """A record of realistic size (≈1 KB): control, a poll ledger with seen comments, a channel binding."""
    ref = parse_ref(f"github:octo/repo#{number}")
    return {
        "ref": str(ref),
        "url": github_url(ref),
        "control": {
            "command": "start",
            "source": "comment",
            "actor": "octocat",
            "requestedAt": "2026-07-31T09:11:58Z",
            "note": "",
            "instance": "",
        },
        "poll": {
            "seenComments": [str(2451000000 + number * 10 + i) for i in range(10)],
            "commentAttempts": {},
            "spawn": {"attempts": 0, "gaveUp": False, "deliveryId": ""},
            "title": f"Work item number {number}",
        },
        "channels": {"slack": {"channel": "C0AB", "thread": f"1726.{number:06d}", "origin": "start"}},
    }


def populate(layout: StateLayout, count: int) -> None:
    layout.portable_dir.mkdir(parents=True)
    for number in range(1, count + 1):
        record = sample_record(number)
        (layout.portable_dir / f"github-octo-repo-{number}.json").write_bytes(dump_json(record))


def measure(action: Callable[[], None], repeat: int, before: Callable[[], None] = lambda: None) -> list[float]:
    times = []
    for _ in range(repeat):
        before()
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return times


def report(label: str, times: list[float]) -> None:
    print(f"{label:<58} median {statistics.median(times):8.1f} ms   min {min(times):8.1f}   max {max(times):8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-state-") as tmp:
        layout = StateLayout(Path(tmp) / ".the-loop")
        store = WorkItemStore(layout, url_for=github_url)
        start = time.perf_counter()
        populate(layout, args.records)
        print(f"{args.records} records written in {time.perf_counter() - start:.1f} s ({layout.portable_dir})")

        def drop_cache() -> None:
            layout.index_cache_path.unlink(missing_ok=True)
            layout.index_path.unlink(missing_ok=True)

        report("index rebuild, cold (no parse cache, no index)", measure(store.rebuild_index, args.repeat, drop_cache))
        store.rebuild_index()
        report("index rebuild, warm cache, index unchanged", measure(store.rebuild_index, args.repeat))

        def touch_one() -> None:  # one record rewritten by someone else: one parse, index unchanged
            path = layout.portable_dir / "github-octo-repo-7.json"
            path.write_bytes(path.read_bytes())

        report("index rebuild, warm cache, one record changed", measure(store.rebuild_index, args.repeat, touch_one))

        counter = iter(range(1_000_000))
        ref = "github:octo/repo#42"
        bump = lambda: store.update_section(ref, "poll", lambda poll: {**(poll or {}), "n": next(counter)})  # noqa: E731
        report("update_section (poll) + rebuild, index entry unchanged", measure(bump, args.repeat))

        flips = iter(range(1_000_000))

        def toggle_ended() -> None:  # adds or removes a section: the index itself is rewritten
            store.update_section(ref, "ended", {"state": "closed"} if next(flips) % 2 == 0 else None)

        report("update_section (ended on/off) + rebuild, index rewritten", measure(toggle_ended, args.repeat))
        size = layout.index_path.stat().st_size
        cache = layout.index_cache_path.stat().st_size
        print(f"index.json {size / 1e6:.1f} MB, local/index-cache.json {cache / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
