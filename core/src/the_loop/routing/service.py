"""The router as a service: the inbox worker that routes each entry, in an ingress daemon's thread or once.

:func:`start_routing` runs one :class:`~the_loop.inbox.worker.InboxWorker` beside an ingress service, routing
each entry under the config in force (:class:`LiveRouter`); :func:`route_pending` works the inbox once (the cron
form); :func:`routing_warnings` is what a service says at start when routing would act on everything or nothing.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.models import InboundEvent
from the_loop.routing.router import Router
from the_loop.sessions.outcomes import Outcome

if TYPE_CHECKING:
    from collections.abc import Callable

    from the_loop.config import LoadedConfig
    from the_loop.inbox import InboxEntry

__all__ = ["LiveRouter", "inbox_handler", "route_pending", "routing_warnings", "start_routing"]


def routing_warnings(config: LoadedConfig) -> list[str]:
    """What an ingress service says at start when routing would act on everything or on nothing."""
    if not config.core.routing.enabled:
        return []
    found = []
    if not config.core.repositories:  # F4: an empty bound bounds nothing
        found.append("repositories is empty: events from every repository are routed")
    if not config.core.routing.authorized_users:  # G4, B R5: it runs, and fails closed on every actor
        found.append("routing.authorizedUsers is empty: nothing will be acted on until it names someone")
    return found


class LiveRouter:
    """The router for the config in force: rebuilt when the daemon's config watcher reloads the file, so an edit
    (a user dropped from ``routing.authorizedUsers``, a repository added) applies to the next event (A25)."""

    def __init__(self, latest: Callable[[], LoadedConfig]) -> None:
        self.latest = latest
        self._lock = threading.Lock()
        self._config: LoadedConfig | None = None
        self._router: Router | None = None

    def __call__(self) -> Router:
        config = self.latest()
        with self._lock:
            if self._router is None or config is not self._config:
                self._config, self._router = config, Router(config)
            return self._router


def inbox_handler(router: Router | Callable[[], Router]) -> Any:
    """Adapt :meth:`Router.handle` to inbox entries (see :meth:`InboundEvent.inbox_entry`); ``router`` may be a
    :class:`LiveRouter`, asked for the current router per entry."""

    def handle(entry: InboxEntry) -> Outcome:
        if entry.data.get("type") != "inbound":
            events.emit("routing.dropped", level="error", reason="unknown-entry", delivery_id=entry.delivery_id)
            return Outcome("dropped", reason="unknown-entry")
        current = router if isinstance(router, Router) else router()
        return current.handle(InboundEvent.model_validate(entry.data["event"]), entry=entry.name)

    return handle


def route_pending(config: LoadedConfig) -> int:
    """Work the inbox once, now (``daemon run … --once``: the cron form routes what its cycle accepted). 0 when
    routing is off or another worker holds the inbox."""
    if not config.core.routing.enabled:
        return 0
    from the_loop.inbox import Inbox
    from the_loop.inbox.worker import InboxWorker, WorkerBusy
    from the_loop.sessions.steering import watch
    from the_loop.sessions.tmux import runner_for

    try:
        workers = config.core.routing.max_concurrent_dispatches
        urgent = urgent_for(lambda: config)
        worker = InboxWorker(Inbox.for_config(config), inbox_handler(Router(config)), workers=workers, urgent=urgent)
        handled = worker.run_once()
    except WorkerBusy:
        return 0
    if watch.wanted(config):  # the cron form looks at budgets and stuck sessions once per run
        watch.Watch().tick(config, runner_for(config))
    return handled


def start_routing(latest: Callable[[], LoadedConfig], should_stop: Any) -> threading.Thread | None:
    """Run the inbox worker with the router in a background thread of an ingress service (only one worker per
    state root works at a time: the others wait on standby). Nothing when ``routing.enabled`` is false. ``latest``
    is the daemon's config watcher: each entry is routed under the config in force when it is handled."""
    config = latest()
    if not config.core.routing.enabled:
        return None
    from the_loop.inbox import Inbox
    from the_loop.inbox.worker import InboxWorker
    from the_loop.sessions.steering import watch
    from the_loop.sessions.tmux import runner_for

    workers = config.core.routing.max_concurrent_dispatches
    if config.core.fleet.enabled:  # a fleet's gateway: every entry goes to its item's owner
        return start_gateway(latest, should_stop, workers)
    worker = InboxWorker(
        Inbox.for_config(config), inbox_handler(LiveRouter(latest)), workers=workers, urgent=urgent_for(latest)
    )
    thread = threading.Thread(target=worker.run, args=(should_stop,), name="the-loop-router", daemon=True)
    thread.start()
    # Budgets and stuck sessions, looked at by the process that works the inbox (one per state root).
    watch.start(latest, runner_for, should_stop, active=lambda: worker.holding)
    return thread


def start_gateway(latest: Callable[[], LoadedConfig], should_stop: Any, workers: int) -> threading.Thread:
    """The gateway's router: JetStream's accepted events moved into the inbox, each routed to its item's owner,
    and the silent workers' items moved (one process per state root does it: the one holding the inbox)."""
    from the_loop.fleet import shared
    from the_loop.fleet.intake import intake
    from the_loop.inbox import Inbox
    from the_loop.inbox.worker import InboxWorker
    from the_loop.routing.gateway import GatewayRouter, sweep

    config = latest()
    inbox = Inbox(config.state, completed_limit=config.core.routing.dedup_cache_size)
    router = GatewayRouter(latest, lambda: shared(latest().core.fleet))
    worker = InboxWorker(inbox, router, workers=workers)
    thread = threading.Thread(target=worker.run, args=(should_stop,), name="the-loop-gateway", daemon=True)
    thread.start()

    def holding() -> bool:
        return worker.holding

    fleet = router.fleet
    threading.Thread(
        target=intake, args=(inbox, fleet, should_stop, holding), name="the-loop-intake", daemon=True
    ).start()
    threading.Thread(target=sweep, args=(router, should_stop, holding), name="the-loop-failover", daemon=True).start()
    return thread


def urgent_for(latest: Callable[[], LoadedConfig]) -> Callable[[InboxEntry], bool]:
    """An entry that goes ahead of its work item's waiting ones: a comment carrying the interrupt command."""
    from the_loop import control

    def urgent(entry: InboxEntry) -> bool:
        event = entry.data.get("event")
        body = event.get("body") if isinstance(event, dict) else None
        keywords = latest().core.routing.control.keywords
        return isinstance(body, str) and control.parse(body, keywords).command == "interrupt"

    return urgent
