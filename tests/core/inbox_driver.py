"""Drives an inbox from its own process so tests can SIGKILL it at a named point (test helper, not a test).

    python inbox_driver.py put ROOT PREFIX COUNT    # put PREFIX-0 … PREFIX-<COUNT-1>, print "put <key> <accepted>"
    python inbox_driver.py work ROOT LOG            # handle until nothing is due; append to LOG what happens

``THE_LOOP_TEST_KILL_AT=<point>:<key>`` makes this process SIGKILL itself at that point for that key:

- ``after-fsync`` — ``put`` returned (the entry is fsync'd and renamed in; the provider would now be answered);
- ``in-handle`` — inside the handler, after its side effect (the ``handled`` line), before it returns;
- ``before-settle`` — the handler returned a settled outcome; ``settle`` was not called yet;
- ``mid-settle`` — ``settle`` recorded the key as completed but has not deleted the entry yet.

The kill points live here, in wrappers around the inbox, never in production code. A file ``ROOT/go`` is awaited
before putting when ``THE_LOOP_TEST_WAIT_GO`` is set, so two writers start together.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from the_loop.inbox import Inbox, InboxEntry
from the_loop.inbox.worker import InboxWorker
from the_loop.state import StateLayout

KILL_POINT, _, KILL_KEY = os.environ.get("THE_LOOP_TEST_KILL_AT", "").partition(":")


def die_at(point: str, key: str) -> None:
    if point == KILL_POINT and key == KILL_KEY:
        os.kill(os.getpid(), signal.SIGKILL)


def append(log: Path, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


class Delivered:
    status = "delivered"
    will_retry = False
    error = ""


class KillableInbox(Inbox):
    log: Path

    def settle(self, *entries: InboxEntry) -> None:
        for entry in entries:
            die_at("before-settle", entry.key)
        super().settle(*entries)
        for entry in entries:
            append(self.log, f"settled {entry.key}")

    def _remember(self, entries: tuple[InboxEntry, ...]) -> None:
        super()._remember(entries)
        for entry in entries:
            die_at("mid-settle", entry.key)


def put(root: Path, prefix: str, count: int) -> None:
    inbox = Inbox(StateLayout(root))
    if os.environ.get("THE_LOOP_TEST_WAIT_GO"):
        while not (root / "go").exists():
            time.sleep(0.001)
    for n in range(count):
        key = f"{prefix}-{n}"
        accepted = inbox.put(key, {"prefix": prefix, "n": n, "pad": "x" * 2000})
        print(f"put {key} {accepted}", flush=True)
        die_at("after-fsync", key)


def work(root: Path, log: Path) -> None:
    inbox = KillableInbox(StateLayout(root))
    inbox.log = log

    def handle(entry: InboxEntry) -> Any:
        append(log, f"handled {entry.key}")
        die_at("in-handle", entry.key)
        return Delivered()

    worker = InboxWorker(inbox, handle)
    while worker.run_once():
        pass


def main() -> None:
    command, root = sys.argv[1], Path(sys.argv[2])
    if command == "put":
        put(root, sys.argv[3], int(sys.argv[4]))
    elif command == "work":
        work(root, Path(sys.argv[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
