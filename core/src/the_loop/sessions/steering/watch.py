"""The watch: every ``routing.stuck.checkSeconds``, each active session's usage is accounted and its budget
enforced, and its screen looked at for a decision prompt or for nothing moving.

It runs beside the router in the process that holds the inbox (one per state root), and takes each item's
dispatch lock without waiting: an item busy with a delivery or a spawn is looked at on the next tick. Reading is
cheap by construction: one ``tmux list-windows`` for every pane's last activity, the transcript read only past its
cursor, and a pane's screen captured only when it printed something since it was last captured.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.refs import parse_ref
from the_loop.sessions.steering import budgets, stuck

if TYPE_CHECKING:
    from collections.abc import Callable

    from the_loop.config import LoadedConfig
    from the_loop.sessions.tmux import TmuxRunner
    from the_loop.state.registry import Endpoint


@dataclass
class Watch:
    """What the watch remembers between ticks: per pane, the activity it last captured at and when its
    transcript last grew."""

    captured_at: dict[str, float] = field(default_factory=dict)
    grew_at: dict[str, float] = field(default_factory=dict)

    def tick(self, config: LoadedConfig, runner: TmuxRunner, now: float | None = None) -> dict[str, int]:
        """One look at every active session; counts of what it did."""
        from the_loop.state import try_locked
        from the_loop.state.slugs import work_item_lock

        now = time.time() if now is None else now
        counts = {"sessions": 0, "skipped": 0, "accounted": 0, "paused": 0, "blocked": 0, "idle": 0}
        activity: dict[str, float] | None = None
        for record in config.registry.records():
            active = [(ref, e) for ref, e in record.sessions.items() if e.status == "active" and e.tmux_target]
            if not active:
                continue
            if activity is None:
                activity = runner.activity_all() or {}
            with try_locked(work_item_lock(config.state, record.work_item, "dispatch")) as held:
                if not held:
                    counts["skipped"] += 1
                    continue
                for endpoint_ref, endpoint in active:
                    counts["sessions"] += 1
                    self._look(config, runner, record.work_item, endpoint_ref, endpoint, activity, now, counts)
        return counts

    def _look(
        self,
        config: LoadedConfig,
        runner: TmuxRunner,
        work_item: str,
        endpoint_ref: str,
        endpoint: Endpoint,
        activity: dict[str, float],
        now: float,
        counts: dict[str, int],
    ) -> None:
        from the_loop.sessions.harness import HarnessError, adapter_for

        try:
            adapter = adapter_for(endpoint.harness or config.core.routing.default_harness, config)
        except HarnessError:
            return
        ref = parse_ref(work_item)
        target = endpoint.tmux_target
        if budgets.account(config, adapter, work_item, endpoint_ref, endpoint):
            counts["accounted"] += 1
            self.grew_at[target] = now
        if budgets.enforce(config, ref) == "paused":
            counts["paused"] += 1
            return
        if not config.core.routing.stuck.enabled or target not in activity:
            return  # no pane (it died): the next event respawns it; nothing is stuck on a screen
        printed = activity[target]
        # tmux counts activity in whole seconds: a pane that printed within the last two is looked at again
        fresh = self.captured_at.get(target) != printed or now - printed < 2
        if adapter.capabilities.recognises_prompts and fresh:
            self.captured_at[target] = printed
            try:
                screen = runner.capture(target)
            except Exception:  # the pane went away between the listing and the capture
                return
            if stuck.see_screen(config, ref, endpoint_ref, endpoint, adapter.blocked_prompt(screen)) == "blocked":
                counts["blocked"] += 1
        last = max(printed, self.grew_at.get(target, 0.0), _epoch(endpoint.last_event_at), _epoch(endpoint.created_at))
        if stuck.see_quiet(config, ref, endpoint, last, now) == "idle":
            counts["idle"] += 1


def _epoch(stamp: str | None) -> float:
    return (events.parse_instant(stamp) or 0.0) if stamp else 0.0


def wanted(config: LoadedConfig) -> bool:
    """Whether there is anything to watch for: a budget, or stuck detection."""
    return budgets.enabled(config) or config.core.routing.stuck.enabled


def start(
    latest: Callable[[], LoadedConfig],
    runner_of: Callable[[LoadedConfig], TmuxRunner],
    should_stop: Callable[[], bool],
    active: Callable[[], bool] = lambda: True,
) -> threading.Thread:
    """Run the watch in a daemon thread until ``should_stop()``, under the config in force at each tick, ticking
    only while ``active()`` (this process holds the inbox: one watch per state root)."""
    watch = Watch()

    def loop() -> None:
        while not should_stop():
            config = latest()
            if wanted(config) and active():
                try:
                    watch.tick(config, runner_of(config))
                except Exception as exc:  # one failing tick is logged; the watch goes on
                    events.emit("watch.failed", level="error", error=f"{type(exc).__name__}: {exc}"[:500])
            deadline = time.monotonic() + config.core.routing.stuck.check_seconds
            while not should_stop() and time.monotonic() < deadline:
                time.sleep(min(0.2, config.core.routing.stuck.check_seconds))

    thread = threading.Thread(target=loop, name="the-loop-watch", daemon=True)
    thread.start()
    return thread
