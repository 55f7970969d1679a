"""The one close path: registry ``closed``, then the tmux session kept (its harness ended first) or killed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop import events
from the_loop.refs import WorkItemRef
from the_loop.sessions.closing.common import (
    CloseResult,
    EndpointClose,
    _dispatch_lock,
    _ordered,
    _ref,
    _runner,
    own_checkouts,
)
from the_loop.sessions.tmux import TargetError, TerminateResult, TmuxRunner, tmux_target
from the_loop.state.registry import Endpoint, SessionRecord

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


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
    that was already closed (a retained one). ``remove_checkout`` removes the checkouts of what it closes unless
    ``routing.workspace.keepCheckoutOnClose`` — the work item's and every pull request's own, or with ``endpoint``
    that pull request's alone (what a stop, the work item ending or its pull request ending does; ``sessions close``
    does not).
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
    registry = config.registry
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
    if remove_checkout and not config.core.routing.workspace.keep_checkout_on_close:
        from the_loop.sessions import workspace

        # the work item's checkout only when it closes; a pull request's own with its endpoint (issue-260)
        refs = [*([ref] if only is None else []), *own_checkouts(record, only)]
        result.checkouts_removed = [str(path) for item in refs for path in workspace.remove(config, item)]
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
