"""The inbox worker: hands the inbox's due entries to a handler (the router's) and settles or releases each.

Entries that share a work item form one lane, handled in arrival order; up to ``workers``
(``routing.maxConcurrentDispatches``) lanes run at once. By the outcome the handler returns, an entry is settled, or
released for a retry with backoff (after its last attempt, to ``abandoned/``). An ``flock`` on
``local/locks/inbox-worker.lock`` keeps it to one worker per state root.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal

from the_loop import events
from the_loop.inbox import Inbox, InboxEntry
from the_loop.state import try_lock

__all__ = ["InboxWorker", "WorkerBusy"]

SETTLED_STATUSES = frozenset({"delivered", "spawned", "respawned", "dropped"})


class WorkerBusy(Exception):
    """Another inbox worker holds ``local/locks/inbox-worker.lock``."""


class InboxWorker:
    """Hands due entries to ``handle`` in arrival order and settles or releases each by the outcome it returns
    (an :class:`~the_loop.sessions.outcomes.Outcome` or anything with ``status``, ``will_retry`` and ``error``).

    One worker per state root: the worker holds an ``flock`` on ``local/locks/inbox-worker.lock`` while it works.
    :meth:`run` waits on standby while another worker holds it (checking ``should_stop``) and takes over when that
    one exits or dies; :meth:`run_once` raises :class:`WorkerBusy` instead of waiting.
    """

    def __init__(
        self,
        inbox: Inbox,
        handle: Callable[[InboxEntry], Any],
        clock: Callable[[], float] = time.time,
        workers: int = 1,
        urgent: Callable[[InboxEntry], bool] | None = None,
    ) -> None:
        self.inbox = inbox
        self.handle = handle
        self.clock = clock
        self.workers = max(1, workers)  # routing.maxConcurrentDispatches: work items handled at once
        self.urgent = urgent  # entries that go ahead of their work item's others (an interrupt)
        self._lock_fd: int | None = None

    @property
    def holding(self) -> bool:
        """Whether this worker holds the state root's inbox (it is the one working, not on standby)."""
        return self._lock_fd is not None

    def run(self, should_stop: Callable[[], bool], interval: float = 0.1) -> bool:
        """Work until ``should_stop()``; False when it stopped before it ever held the lock."""
        while (fd := self._try_lock()) is None:
            if should_stop():
                return False
            time.sleep(interval)  # standby: another worker has this state root
        self._lock_fd = fd
        try:
            self.inbox.sweep_temporaries()
            while not should_stop():
                if self.run_once(should_stop) == 0:
                    self.inbox.wait(interval)
        finally:
            self._lock_fd = None
            os.close(fd)
        return True

    def run_once(self, should_stop: Callable[[], bool] | None = None) -> int:
        """Handle every entry due now; the number handled.

        Entries that share a work item form one lane, handled in arrival order, and a lane stops at an entry left
        pending for a retry (its later events wait behind it). Up to ``workers`` lanes run at once, so a slow spawn
        of one work item does not hold up the others.
        """
        with self._holding():
            lanes = _lanes(self.inbox.pending(self.clock(), self.urgent))
            if self.urgent is not None:
                lanes = [sorted(lane, key=lambda entry: not self.urgent(entry)) for lane in lanes]  # type: ignore[misc]

            def drain(lane: list[InboxEntry]) -> int:
                handled, done = 0, []
                try:
                    for entry in lane:
                        if should_stop is not None and should_stop():
                            break
                        handled += 1
                        verdict, outcome = self._handle(entry)
                        if verdict == "settle":
                            done.append(replace(entry, outcome=outcome, forget_mark=self.inbox.forget_mark()))
                        elif verdict == "hold":
                            break  # this event of the work item is backing off: its later ones wait behind it
                finally:
                    # One settle for the lane: a crash before it means these are handled once more (at least once).
                    self.inbox.settle(*done)
                return handled

            if self.workers == 1 or len(lanes) <= 1:
                return sum(drain(lane) for lane in lanes)
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(self.workers, len(lanes))) as pool:
                return sum(pool.map(drain, lanes))

    def _handle(self, entry: InboxEntry) -> tuple[Literal["settle", "gone", "hold"], str]:
        """Handle one entry: ``settle`` it, it is ``gone`` (abandoned after its last attempt), or ``hold`` (pending
        for a retry, so its work items wait behind it); with what was done (a settled outcome's reason or status)."""
        try:
            outcome = self.handle(entry)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            events.emit(
                "dispatch.error",
                level="error",
                work_item=entry.work_items[0] if entry.work_items else None,
                delivery_id=entry.delivery_id,
                error=error,
                will_retry=entry.attempts + 1 < self.inbox.max_attempts,
            )
            return self._released(entry, error), ""
        status = getattr(outcome, "status", None)
        if status == "queued":  # waiting in line for a free slot: not an attempt, and its item's others wait too
            self.inbox.defer(entry, float(getattr(outcome, "retry_in", 0) or 1.0), str(outcome.reason), self.clock())
            return "hold", ""
        if status == "failed" and getattr(outcome, "will_retry", False):
            error = str(getattr(outcome, "error", "") or "failed")
            return self._released(entry, error), ""
        if status in SETTLED_STATUSES or status == "failed":  # a final failure: the handler already logged it
            return "settle", str(getattr(outcome, "reason", "") or status)
        return self._released(entry, f"the handler returned {outcome!r}, not an outcome"), ""

    def _released(self, entry: InboxEntry, error: str) -> Literal["gone", "hold"]:
        return "gone" if self.inbox.release(entry, error, now=self.clock()) is None else "hold"

    def _try_lock(self) -> int | None:
        return try_lock(self.inbox.layout.lock_for("inbox-worker"))

    @contextlib.contextmanager
    def _holding(self) -> Iterator[None]:
        if self._lock_fd is not None:
            yield
            return
        fd = self._try_lock()
        if fd is None:
            raise WorkerBusy(str(self.inbox.layout.lock_for("inbox-worker")))
        self._lock_fd = fd
        try:
            yield
        finally:
            self._lock_fd = None
            os.close(fd)


def _lanes(entries: list[InboxEntry]) -> list[list[InboxEntry]]:
    """Group entries, keeping their order, so that entries naming a common work item share one lane; an entry that
    names none has a lane of its own."""
    lanes: list[list[InboxEntry]] = []
    lane_of: dict[str, int] = {}
    for entry in entries:
        joined = sorted({lane_of[item] for item in entry.work_items if item in lane_of})
        if not joined:
            index = len(lanes)
            lanes.append([entry])
        else:
            index = joined[0]
            for other in joined[1:]:  # the entry links two lanes: merge them, in arrival order
                lanes[index].extend(lanes[other])
                lanes[other] = []
                for item, at in list(lane_of.items()):
                    if at == other:
                        lane_of[item] = index
            lanes[index].append(entry)
            lanes[index].sort(key=lambda e: e.name)
        for item in entry.work_items:
            lane_of[item] = index
    return [lane for lane in lanes if lane]
