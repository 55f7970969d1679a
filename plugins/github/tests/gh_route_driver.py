"""Works the inbox once from its own process with the real router, dispatcher, tmux runner and harness adapter, so a
test can SIGKILL it at a named point (test helper, not a test).

    python gh_route_driver.py CONFIG

``THE_LOOP_TEST_KILL_AT=<point>:<dedupe key>`` makes this process SIGKILL itself at that point for that event:

- ``after-enqueue`` — the router has handed the event to the dispatcher (its id claimed, the work item's dispatch
  lock held), nothing has reached the pane yet;
- ``between-paste-and-record`` — the text was pasted and submitted into the pane, ``recentDeliveries`` not written.

The kill points live in subclasses here, never in production code.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from the_loop import events
from the_loop.config import load_config
from the_loop.inbox import Inbox
from the_loop.inbox.worker import InboxWorker
from the_loop.plugins import get_host
from the_loop.routing.router import Router
from the_loop.routing.service import inbox_handler
from the_loop.sessions.dispatcher import Dispatcher

KILL_POINT, _, KILL_KEY = os.environ.get("THE_LOOP_TEST_KILL_AT", "").partition(":")


def die_at(point: str, key: str) -> None:
    if point == KILL_POINT and key == KILL_KEY:
        os.kill(os.getpid(), signal.SIGKILL)


class KillableDispatcher(Dispatcher):
    """The dispatcher with two kill points; the rest of each signature is passed through untouched."""

    def _deliver(self, event: Any, *args: Any, **kwargs: Any) -> Any:
        die_at("after-enqueue", event.delivery_id)
        return super()._deliver(event, *args, **kwargs)

    def _record_delivery(self, event: Any, *args: Any, **kwargs: Any) -> None:
        die_at("between-paste-and-record", event.delivery_id)
        super()._record_delivery(event, *args, **kwargs)


def main(config_path: str) -> None:
    config = load_config(config_path, get_host())
    events.configure(config.state.events_path, "route-driver")
    router = Router(config, dispatcher=KillableDispatcher(config))
    handled = InboxWorker(Inbox.for_config(config), inbox_handler(router)).run_once()
    print(f"handled {handled}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
