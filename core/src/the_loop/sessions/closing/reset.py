"""The two removers built on the close path: ``reset`` (start over) and ``cleanup`` (the item is over)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from the_loop import events
from the_loop.refs import WorkItemRef
from the_loop.sessions.closing import terminal as ending
from the_loop.sessions.closing.common import (
    RESET_SECTIONS,
    CleanupReport,
    ResetReport,
    _dispatch_lock,
    _ordered,
    _ref,
    _runner,
    own_checkouts,
    running_services,
)
from the_loop.sessions.closing.teardown import _checked_target, _close_locked, _closed, _harness_ended, _refusal
from the_loop.sessions.tmux import TargetError, TmuxRunner
from the_loop.state import StateError, atomic_write_json, locked, read_json
from the_loop.state.registry import Endpoint

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

T = TypeVar("T")


def _poll_clocks_path(config: LoadedConfig) -> Any:
    return config.state.root / "local" / "poll-clocks.json"


def _drop_poll_clock(config: LoadedConfig, ref: WorkItemRef, dry_run: bool) -> bool:
    """Drop the item's entry from ``local/poll-clocks.json`` (``{"clocks": {<ref>: …}}``), if the file has one."""
    path = _poll_clocks_path(config)
    key = str(ref)

    def has_entry(data: dict[str, Any] | None) -> bool:
        clocks = (data or {}).get("clocks")
        return isinstance(clocks, dict) and key in clocks

    if not path.exists() or not has_entry(read_json(path)):
        return False
    if dry_run:
        return True
    with locked(config.state.lock_for("poll-clocks")):
        data = read_json(path)
        if not has_entry(data):
            return False
        assert data is not None
        del data["clocks"][key]
        atomic_write_json(path, data)
    return True


def reset(
    config: LoadedConfig,
    ref: WorkItemRef | str,
    *,
    dry_run: bool = False,
    actor: str = "",
    runner: TmuxRunner | None = None,
) -> ResetReport:
    """Wipe one work item so it starts over (seed 004's table). Never touches the repository.

    ``dry_run`` reads only: it takes no lock, writes no file and emits nothing, and reports what a reset would do.
    """
    from the_loop.sessions import workspace

    item = _ref(ref)
    report = ResetReport(str(item), dry_run=dry_run)
    running = running_services(config)
    if running:
        report.warnings.append(
            f"a the-loop service is running ({', '.join(running)}); it keeps poll state in memory and may write it "
            "back — stop it first (the-loop stop) for a clean reset"
        )
    registry = config.registry
    store = config.store
    with _dispatch_lock(config, item, hold=not dry_run):
        record = registry.load(str(item))
        live = [name for name in _ordered(record) if record.sessions[name].live] if record else []
        report.was_live = bool(live)
        if record is not None and live:
            report.live_session = record.sessions[live[-1]].tmux_target  # the work item's own when it is live
        if live and not dry_run:
            closed = _close_locked(config, item, None, _runner(config, runner))
            report.warnings.extend(closed.warnings)
            report.tmux = ",".join(dict.fromkeys(e.tmux for e in closed.endpoints if e.tmux != "none"))
        elif live:
            tmux = config.core.routing.tmux
            report.tmux = "retained" if tmux.keep_session_on_close else "killed"
        if registry.path(str(item)).exists():
            report.removed.append("session")
            if not dry_run:
                registry.forget(str(item))
        portable = store.read(item) or {}
        sections = [name for name in RESET_SECTIONS if portable.get(name) is not None]
        report.removed.extend(sections)
        if sections and not dry_run:
            store.clear_sections(item, RESET_SECTIONS)
        if _drop_poll_clock(config, item, dry_run):
            report.removed.append("poll-clock")
        if not config.core.routing.workspace.keep_checkout_on_close:
            owners = [item, *own_checkouts(record)]  # the work item's, and each pull request session's own
            found = [path for owner in owners for path in workspace.checkout_paths(config, owner)]
            if found:
                report.removed.append("checkout")
                report.checkouts = [str(path) for path in found]
                if not dry_run:
                    for owner in owners:
                        workspace.remove(config, owner)
        report.found = bool(record is not None or report.removed)
    if not dry_run:
        events.emit(
            "session.reset",
            work_item=str(item),
            actor=actor,
            removed=report.removed,
            was_live=report.was_live,
            found=report.found,
        )
    return report


# ------------------------------------------------------------------------------------------------ cleanup


def cleanup(
    config: LoadedConfig,
    ref: WorkItemRef | str,
    *,
    actor: str,
    source: str,
    runner: TmuxRunner | None = None,
) -> CleanupReport:
    """Release a finished work item's local resources (decision 3: every endpoint's tmux session is killed).

    Works with or without a session and a record. Each step is wrapped: a failure is reported in ``errors`` and the
    steps after it still run. Emits one ``session.cleaned`` even when nothing was found.
    """
    from the_loop import control
    from the_loop.sessions import workspace

    item = _ref(ref)
    report = CleanupReport(str(item), actor=actor, source=source)

    def step(name: str, action: Callable[[], T]) -> T | None:
        try:
            return action()
        except Exception as exc:  # one failing step must not stop the others
            report.errors.append(
                f"{name}: {exc}" if isinstance(exc, StateError) else f"{name}: {type(exc).__name__}: {exc}"
            )
            return None

    with contextlib.ExitStack() as stack:
        step("lock", lambda: stack.enter_context(_dispatch_lock(config, item)))
        registry = config.registry
        record = step("read record", lambda: registry.load(str(item)))
        if record is not None:
            report.found = True
            tmux = _runner(config, runner)
            grace = config.core.routing.tmux.harness_kill_grace_seconds
            for name in _ordered(record):
                endpoint = record.sessions[name]
                if endpoint.live:
                    _closed(str(item), name, endpoint, kill=True)
                if not endpoint.tmux_target:
                    continue
                ended = step(
                    f"tmux {endpoint.tmux_target}",
                    lambda n=name, e=endpoint: _release_tmux(tmux, str(item), n, e, grace),
                )
                if ended:
                    report.endpoints.append(name)
                    report.removed.append(f"tmux:{ended}")
        # An ended item's stamp keeps what its checkout recorded, before the checkout goes (seed 004 ``terminal``).
        report.terminal_recorded = bool(step("terminal", lambda: ending.stamp_terminal(config, item)))
        removed = step("checkout", lambda: workspace.remove(config, item)) or []
        for pull in own_checkouts(record):  # each pull request session's own checkout (issue-260)
            removed += step(f"checkout of {pull}", lambda p=pull: workspace.remove(config, p)) or []
        if removed:
            report.found = True
            report.removed.append("checkout")
        if step("local record", lambda: registry.forget(str(item))):
            report.removed.append("session")
        # Last, and whatever failed before: the record that keeps the item from spawning again.
        step("control", lambda: control.record(config, item, "cleanup", source=source, actor=actor))
    events.emit(
        "session.cleaned",
        level="warning" if report.errors else "info",
        work_item=str(item),
        actor=actor,
        source=source,
        endpoints=report.endpoints,
        removed=report.removed,
        errors=report.errors or None,
        found=report.found,
        terminal_recorded=report.terminal_recorded or None,
    )
    return report


def _release_tmux(runner: TmuxRunner, work_item: str, name: str, session: Endpoint, grace: float) -> str:
    """End the harness, then kill the session; the target once gone, "" when there was nothing there.
    Raises when the target is no ``loop-`` name or tmux keeps the session."""
    target = _checked_target(work_item, name, session)
    if target is None:
        raise TargetError(_refusal(session))
    ended = runner.terminate_harness(target, grace)
    if ended.error == "session_missing":
        return ""
    _harness_ended(work_item, name, session.harness, target, ended)
    if not runner.kill(target):
        raise RuntimeError(f"tmux session {target} could not be killed")
    return target
