"""Ending sessions: the one close path, and the two removers built on it (reset and cleanup).

- :func:`close_session` — registry ``closed``, then the tmux session kept (its harness ended first, so a finished work
  item leaves a readable record rather than a live TUI) or killed, per ``routing.tmux.keepSessionOnClose``. Used by
  ``sessions stop`` and ``sessions close`` now, and by ticket closures and keywords.
- :func:`reset` — for a work item that must start over: a live session is closed through the close path, the local
  record deleted, the portable sections that say what was asked and seen cleared, the poll clock dropped, the
  checkout removed unless ``routing.workspace.keepCheckoutOnClose``. ``dry_run`` computes the same list and changes
  nothing.
- :func:`cleanup` — for a work item that is over: every endpoint's tmux session killed (harness ended first), the
  checkout removed and the local record deleted, whatever the keep settings say; the portable record is kept, with
  ``cleanup`` as its last control command. Nothing remote is touched.

Every function holds the work item's dispatch lock (``local/locks/<slug>.dispatch.lock``), so a close never races a
delivery or a spawn. Only ``loop-…`` tmux targets are ever signalled or killed.

The disarming rule: a work item whose last control command is one of :data:`DISARMING` (``stop``, ``cleanup``) is
never first-spawned by an event (the dispatcher drops such a spawn as ``awaiting-start``), and an event without
``spawn`` never spawns anyway. An explicit ``sessions start`` records ``start`` first, which re-arms it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from the_loop import events
from the_loop.refs import WorkItemRef, parse_ref
from the_loop.sessions.tmux import TargetError, TerminateResult, TmuxRunner, tmux_target
from the_loop.state import StateError, atomic_write_json, locked, read_json
from the_loop.state.registry import Endpoint, SessionRecord, SessionRegistry
from the_loop.state.slugs import work_item_lock

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

__all__ = [
    "DISARMING",
    "RESET_SECTIONS",
    "CleanupReport",
    "CloseResult",
    "EndedReport",
    "EndpointClose",
    "ResetReport",
    "cleanup",
    "close_session",
    "pull_request_ended",
    "reset",
    "running_services",
    "work_item_ended",
    "work_item_reopened",
]

# Portable sections a reset clears: what was asked (control, lifecycle), seen (poll), who and where (collaborators,
# collaborationChannels) and how it ended. pullRequests and channels stay: they describe the work, not the memory.
RESET_SECTIONS = ("control", "poll", "collaborators", "collaborationChannels", "ended", "lifecycle")
DISARMING = ("stop", "cleanup")

T = TypeVar("T")


@dataclass
class EndpointClose:
    """What happened to one endpoint's tmux session: ``retained`` (kept, harness ended unless
    killHarnessOnClose is false), ``killed``, ``gone`` (already absent), ``refused`` (not a ``loop-`` target:
    nothing signalled), ``kill-failed`` or ``none`` (no tmux session recorded)."""

    endpoint: str
    tmux_target: str
    tmux: str
    harness_ok: bool | None = None
    error: str | None = None


@dataclass
class CloseResult:
    work_item: str
    closed: list[str] = field(default_factory=list)  # endpoints that were live and are closed now
    endpoints: list[EndpointClose] = field(default_factory=list)
    checkouts_removed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def was_live(self) -> bool:
        return bool(self.closed)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "wasLive": self.was_live}


@dataclass
class ResetReport:
    work_item: str
    found: bool = False
    was_live: bool = False
    removed: list[str] = field(default_factory=list)  # session, control, poll, …, poll-clock, checkout
    live_session: str = ""  # the tmux target of the live session ended (or that would be)
    tmux: str = ""  # what the close did with it: retained, killed, gone, …
    checkouts: list[str] = field(default_factory=list)
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CleanupReport:
    work_item: str
    actor: str
    source: str
    found: bool = False
    endpoints: list[str] = field(default_factory=list)  # endpoints whose tmux session was ended and killed
    removed: list[str] = field(default_factory=list)  # tmux sessions, checkout, session (the local record)
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ref(ref: WorkItemRef | str) -> WorkItemRef:
    return ref if isinstance(ref, WorkItemRef) else parse_ref(ref)


@contextlib.contextmanager
def _dispatch_lock(config: LoadedConfig, ref: WorkItemRef, hold: bool = True) -> Iterator[None]:
    if not hold:
        yield
        return
    with locked(work_item_lock(config.state, ref, "dispatch")):
        yield


def _runner(config: LoadedConfig, runner: TmuxRunner | None) -> TmuxRunner:
    if runner is not None:
        return runner
    from the_loop.sessions.dispatcher import runner_for

    return runner_for(config)


def _ordered(record: SessionRecord, only: str | None = None) -> list[str]:
    """Endpoint refs, pull requests' first and the work item's own last (cleanup's order), or just ``only``."""
    refs = [ref for ref in record.sessions if only is None or ref == only]
    return sorted(refs, key=lambda ref: (ref == record.work_item, ref))


def running_services(config: LoadedConfig) -> list[str]:
    """Names of the services whose pidfile lock is held right now (a daemon that may write state back)."""
    from the_loop.daemon import runlock
    from the_loop.plugins import get_host

    running = []
    for spec in get_host().services(config):
        with contextlib.suppress(OSError):
            if runlock.is_held(spec.pidfile):
                running.append(spec.name)
    return running


# -------------------------------------------------------------------------------------------------- close


def close_session(
    config: LoadedConfig,
    ref: WorkItemRef | str,
    *,
    kill_tmux: bool | None = None,
    runner: TmuxRunner | None = None,
    endpoint: str | None = None,
    remove_checkout: bool = False,
    lock: bool = True,
) -> CloseResult:
    """Close ``ref``'s live sessions (every endpoint, or just ``endpoint``).

    ``kill_tmux`` None follows ``routing.tmux.keepSessionOnClose``; True also kills the tmux session of an endpoint
    that was already closed (a retained one). ``remove_checkout`` removes the checkout unless
    ``routing.workspace.keepCheckoutOnClose`` (what a stop or the work item ending does; ``sessions close`` does not).
    ``lock`` False when the caller already holds the item's dispatch lock. Never fails on tmux: every problem is a
    warning in the result and the log.
    """
    item = _ref(ref)
    with _dispatch_lock(config, item, lock):
        return _close_locked(config, item, kill_tmux, _runner(config, runner), endpoint, remove_checkout)


def _close_locked(
    config: LoadedConfig,
    ref: WorkItemRef,
    kill_tmux: bool | None,
    runner: TmuxRunner,
    only: str | None = None,
    remove_checkout: bool = False,
) -> CloseResult:
    tmux = config.core.routing.tmux
    kill = (not tmux.keep_session_on_close) if kill_tmux is None else kill_tmux
    registry = SessionRegistry(config.state)
    result = CloseResult(str(ref))
    record = registry.load(str(ref))
    if record is not None:
        order = _ordered(record, only)
        live = [name for name in order if record.sessions[name].live]
        act = [name for name in order if name in live or (kill_tmux is True and record.sessions[name].tmux_target)]
        if live:

            def change(current: SessionRecord) -> None:
                for name in live:
                    if name in current.sessions:
                        current.sessions[name].status = "closed"

            registry.update(str(ref), change)
            result.closed = live
        for name in live:
            _closed(str(ref), name, record.sessions[name], kill=kill)
        for name in act:
            outcome = _end_tmux(config, runner, str(ref), name, record.sessions[name], kill=kill)
            result.endpoints.append(outcome)
            if outcome.error and outcome.tmux in ("refused", "kill-failed"):
                result.warnings.append(outcome.error)
    if remove_checkout and only is None and not config.core.routing.workspace.keep_checkout_on_close:
        from the_loop.sessions import workspace

        result.checkouts_removed = [str(path) for path in workspace.remove(config, ref)]
    return result


def _end_tmux(
    config: LoadedConfig, runner: TmuxRunner, work_item: str, endpoint: str, session: Endpoint, *, kill: bool
) -> EndpointClose:
    """Keep (ending the harness first, unless killHarnessOnClose is false) or kill one endpoint's tmux session."""
    if not session.tmux_target:
        return EndpointClose(endpoint, "", "none")
    target = _checked_target(work_item, endpoint, session)
    if target is None:
        return EndpointClose(endpoint, session.tmux_target, "refused", harness_ok=False, error=_refusal(session))
    if kill:
        if runner.probe(target) == "absent":
            return EndpointClose(endpoint, target, "gone")
        if runner.kill(target):
            return EndpointClose(endpoint, target, "killed")
        error = f"tmux session {target} could not be killed"
        return EndpointClose(endpoint, target, "kill-failed", error=error)
    harness_ok: bool | None = None
    error: str | None = None
    if config.core.routing.tmux.kill_harness_on_close:
        ended = runner.terminate_harness(target, config.core.routing.tmux.harness_kill_grace_seconds)
        harness_ok, error = ended.ok, ended.error
        _harness_ended(work_item, endpoint, session.harness, target, ended)
        if ended.error == "session_missing":
            return EndpointClose(endpoint, target, "gone", harness_ok, error)
    if runner.probe(target) == "absent":
        return EndpointClose(endpoint, target, "gone", harness_ok, error)
    events.emit(
        "session.retained",
        work_item=work_item,
        endpoint=endpoint if endpoint != work_item else None,
        tmux_target=target,
    )
    return EndpointClose(endpoint, target, "retained", harness_ok, error)


def _closed(work_item: str, name: str, session: Endpoint, *, kill: bool) -> None:
    events.emit(
        "session.closed",
        work_item=work_item,
        endpoint=name if name != work_item else None,
        harness=session.harness,
        harness_session_id=session.harness_session_id or None,
        tmux_target=session.tmux_target or None,
        tmux="kill" if kill else "keep",
    )


def _refusal(session: Endpoint) -> str:
    return f"tmux target {session.tmux_target!r} is not a the-loop session (loop-…); nothing was signalled or killed"


def _checked_target(work_item: str, name: str, session: Endpoint) -> str | None:
    """The endpoint's target when it is a ``loop-…`` name; None (and a warning event) before any tmux call if not."""
    try:
        return tmux_target(session.tmux_target)
    except TargetError:
        _terminated(work_item, name, session.harness, session.tmux_target, ok=False, error=_refusal(session))
        return None


def _terminated(
    work_item: str, endpoint: str, harness: str, target: str, *, ok: bool, error: str | None, **pids: list[int]
) -> None:
    events.emit(
        "session.harness_terminated",
        level="info" if ok else "warning",
        work_item=work_item,
        endpoint=endpoint if endpoint != work_item else None,
        harness=harness or None,
        tmux_target=target,
        ok=ok,
        error=error,
        **{key: value for key, value in pids.items() if value},
    )


def _harness_ended(work_item: str, endpoint: str, harness: str, target: str, ended: TerminateResult) -> None:
    """``session.harness_terminated`` for what ``TmuxRunner.terminate_harness`` reported."""
    _terminated(
        work_item,
        endpoint,
        harness,
        target,
        ok=ended.ok,
        error=ended.error,
        terminated=list(ended.terminated),
        killed=list(ended.killed),
    )


# -------------------------------------------------------------------------------------------------- reset


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
    from the_loop.state.store import WorkItemStore

    item = _ref(ref)
    report = ResetReport(str(item), dry_run=dry_run)
    running = running_services(config)
    if running:
        report.warnings.append(
            f"a the-loop service is running ({', '.join(running)}); it keeps poll state in memory and may write it "
            "back — stop it first (the-loop stop) for a clean reset"
        )
    registry = SessionRegistry(config.state)
    store = WorkItemStore(config.state, config=config)
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
            found = workspace.checkout_paths(config, item)
            if found:
                report.removed.append("checkout")
                report.checkouts = [str(path) for path in found]
                if not dry_run:
                    workspace.remove(config, item)
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
    from the_loop.routing import control
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
        registry = SessionRegistry(config.state)
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
        removed = step("checkout", lambda: workspace.remove(config, item)) or []
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


# ------------------------------------------------------------------------------------------ the item ended upstream

CLOSE_CLEARS = ("control", "poll", "collaborators", "collaborationChannels", "lifecycle")


@dataclass
class EndedReport:
    work_item: str
    tracked: bool = False
    closed: list[str] = field(default_factory=list)
    cleaned: bool = False
    deferred: str = ""  # why cleanup waits: no-actor | unauthorized-actor


def _ended_as(reason: str, item: WorkItemRef) -> tuple[str, str]:
    """``ended.state`` and ``ended.kind`` for a close ``reason``. A ``deleted`` item (the tracker answers that it
    no longer exists) has no kind of its own to report: ``issue``, or ``""`` for a key-form ref."""
    if reason == "deleted":
        return "deleted", "" if item.key_form else "issue"
    return ("merged" if reason == "pr-merged" else "closed"), ("issue" if reason == "issue-closed" else "pull-request")


def work_item_ended(
    config: LoadedConfig,
    ref: WorkItemRef | str,
    *,
    reason: str,
    actor: str,
    authorized: bool,
    source: str,
    delivery_id: str = "",
) -> EndedReport:
    """The one close path for a work item that closed or merged upstream (A §2.9, seed 004 ``ended``).

    Only a tracked item is touched (a session record of any status here, or a portable record): an untracked
    item's close writes nothing. The ``work_item_complete`` point is asked first; then the session is closed (kept
    readable, harness ended, checkout removed), ``ended`` stamped, and control, poll, collaborators,
    collaborationChannels and the lifecycle mark cleared. An authorized closer's close also cleans up (decision 3);
    an unattributed or unauthorized one defers that (``cleanup.deferred``): destroying uncommitted work on an
    event nobody can be held to is not worth it.
    """
    from the_loop.hooks import lifecycle
    from the_loop.state.registry import now_iso
    from the_loop.state.store import WorkItemStore

    item = _ref(ref)
    report = EndedReport(str(item))
    store = WorkItemStore(config.state, config=config)
    record = SessionRegistry(config.state).load(str(item))
    portable = store.read(item) or {}
    report.tracked = record is not None or any(key not in ("ref", "url") for key in portable)
    if not report.tracked:
        return report
    if "ended" in portable:  # already ended (the other ingress, or a redelivery): hooks, publish, cleanup ran once
        events.emit("work_item.already_ended", level="debug", work_item=str(item), reason=reason, source=source)
        return report
    state, kind = _ended_as(reason, item)
    completed = lifecycle.run(
        lifecycle.WorkItemComplete(
            work_item=lifecycle.work_item_facts(item, config),
            state=state,
            kind=kind,
            reason=reason,
            source=source,
            actor=actor,
        ),
        config,
    )  # its announce decision governs the work-item.closed publish below
    result = close_session(config, item, remove_checkout=True)
    report.closed = result.closed
    if result.closed:
        events.emit(
            "session.autoclosed",
            work_item=str(item),
            reason=reason,
            merged=reason == "pr-merged",
            delivery_id=delivery_id or None,
        )
    ended = {"state": state, "kind": kind, "reason": reason, "at": now_iso(), "source": source, "actor": actor}
    store.update_section(item, "ended", ended)
    store.clear_sections(item, CLOSE_CLEARS)
    events.emit("work_item.ended", work_item=str(item), reason=reason, source=source, actor=actor or None)
    if completed.announce:
        from the_loop import channels

        channels.publish(config, "work-item.closed", item, text=f"{item} was {state}.", actor=actor)
    if authorized:
        cleanup(config, item, actor=actor, source=source)
        report.cleaned = True
    else:
        report.deferred = "no-actor" if not actor else "unauthorized-actor"
        events.emit(
            "cleanup.deferred",
            work_item=str(item),
            reason=report.deferred,
            actor=actor or None,
            closed_as=reason,
        )
    return report


def pull_request_ended(
    config: LoadedConfig,
    owner: WorkItemRef | str,
    pull_request: WorkItemRef | str,
    *,
    reason: str,
    delivery_id: str = "",
) -> bool:
    """A pull request recorded on ``owner`` closed or merged (issue-101): only its endpoint is closed, through the
    one close path, and its poll ledger (``pullRequests`` entry, seed 004) dropped — it will not be listed again.
    The work item's own session runs on (``session.kept_open``). False when ``owner`` does not record it."""
    from the_loop.state.store import WorkItemStore

    item, pull = _ref(owner), str(pull_request)
    record = SessionRegistry(config.state).load(str(item))
    store = WorkItemStore(config.state, config=config)
    ledgers = (store.read(item) or {}).get("pullRequests")
    has_ledger = isinstance(ledgers, dict) and pull in ledgers
    if (record is None or pull not in record.sessions) and not has_ledger:
        return False
    closed = close_session(config, item, endpoint=pull).closed if record is not None else []
    if has_ledger:

        def drop(current: Any) -> Any:
            remaining = {k: v for k, v in current.items() if k != pull} if isinstance(current, dict) else {}
            return remaining or None

        store.update_section(item, "pullRequests", drop)
    events.emit(
        "session.kept_open",
        work_item=str(item),
        closed_ref=pull,
        reason=reason,
        delivery_id=delivery_id or None,
        endpoint_closed=bool(closed),
    )
    return True


def _forget_close_keys(config: LoadedConfig, item: WorkItemRef) -> None:
    """A reopened item's earlier close keys no longer stand for anything: forget them, so its next close counts.
    Best-effort: an unreadable inbox leaves them, and that close is then dropped as a duplicate."""
    from the_loop.ingress.inbox import Inbox
    from the_loop.plugins import ticket_provider

    try:
        provider = ticket_provider(config, item)
        keys = provider.close_keys(item) if provider is not None else []
        if keys:
            Inbox.for_config(config).forget(*keys)
    except Exception as exc:
        events.emit("work_item.forget_failed", level="warning", work_item=str(item), error=str(exc)[:300])


def work_item_reopened(config: LoadedConfig, ref: WorkItemRef | str, *, actor: str, source: str) -> bool:
    """Clear the ``ended`` stamp of a reopened work item (it then routes normally); True when there was one. Its
    close keys are forgotten either way, so a later close is acted on."""
    from the_loop.state.store import WorkItemStore

    item = _ref(ref)
    _forget_close_keys(config, item)
    store = WorkItemStore(config.state, config=config)
    if "ended" not in (store.read(item) or {}):
        return False
    store.clear_sections(item, ["ended"])
    events.emit("work_item.reopened", work_item=str(item), source=source, actor=actor or None)
    return True
