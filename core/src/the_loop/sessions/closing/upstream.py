"""The work item (or one of its pull requests) ended or was reopened upstream, on its ticket."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.refs import WorkItemRef
from the_loop.sessions.closing import terminal as ending
from the_loop.sessions.closing.common import _ref
from the_loop.sessions.closing.reset import cleanup
from the_loop.sessions.closing.teardown import close_session

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


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
    state_reason: str = "",
) -> EndedReport:
    """The one close path for a work item that closed or merged upstream (A §2.9, seed 004 ``ended``).

    Only a tracked item is touched (a session record of any status here, or a portable record): an untracked
    item's close writes nothing. The ``work_item_complete`` point is asked first; then the terminal record is copied
    from the checkout's ``work-item-state.json``, the session closed (kept readable, harness ended, checkout
    removed), ``ended`` stamped with its ``outcome`` (``state_reason``: the tracker's word for how an issue closed;
    :mod:`~the_loop.sessions.closing.terminal`), and control, poll, collaborators, collaborationChannels and the
    lifecycle mark cleared. An authorized closer's close also cleans up (decision 3);
    an unattributed or unauthorized one defers that (``cleanup.deferred``): destroying uncommitted work on an
    event nobody can be held to is not worth it.
    """
    from the_loop.hooks import lifecycle
    from the_loop.state.registry import now_iso

    item = _ref(ref)
    report = EndedReport(str(item))
    store = config.store
    record = config.registry.load(str(item))
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
    terminal = ending.terminal_record(config, item)  # before the close path removes the checkout
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
    ended: dict[str, Any] = {
        "state": state,
        "kind": kind,
        "reason": reason,
        "at": now_iso(),
        "source": source,
        "actor": actor,
        "outcome": ending.outcome(reason, terminal, state_reason),
    }
    if terminal is not None:
        ended["terminal"] = terminal
    store.update_section(item, "ended", ended)
    store.clear_sections(item, CLOSE_CLEARS)
    events.emit(
        "work_item.ended",
        work_item=str(item),
        reason=reason,
        source=source,
        actor=actor or None,
        outcome=ended["outcome"],
    )
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
    one close path — a session of its own ends like the work item's would (harness ended, tmux kept or killed per
    ``keepSessionOnClose``, its own checkout removed unless ``keepCheckoutOnClose``) — its row in the work item's
    ``work-item-state.json`` gets its upstream ``state``, and its poll ledger (``pullRequests`` entry, seed 004) is
    dropped: it will not be listed again. The work item's own session runs on (``session.kept_open``). False when
    ``owner`` does not record it."""
    from the_loop.sessions import pull_requests

    item, pull = _ref(owner), str(pull_request)
    record = config.registry.load(str(item))
    store = config.store
    ledgers = (store.read(item) or {}).get("pullRequests")
    has_ledger = isinstance(ledgers, dict) and pull in ledgers
    if (record is None or pull not in record.sessions) and not has_ledger:
        return False
    closed = close_session(config, item, endpoint=pull, remove_checkout=True).closed if record is not None else []
    pull_requests.ended(config, item, pull, reason)
    if has_ledger:

        def drop(current: Any) -> Any:
            remaining = {k: v for k, v in current.items() if k != pull} if isinstance(current, dict) else {}
            return remaining or None

        store.update_section(item, "pullRequests", drop)
    ending.mark_pull_request(config, item, pull, reason)  # a late merge completes an ended item
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
    from the_loop.inbox import Inbox

    try:
        provider = config.tickets(item)
        keys = provider.close_keys(item) if provider is not None else []
        if keys:
            Inbox.for_config(config).forget(*keys)
    except Exception as exc:
        events.emit("work_item.forget_failed", level="warning", work_item=str(item), error=str(exc)[:300])


def work_item_reopened(config: LoadedConfig, ref: WorkItemRef | str, *, actor: str, source: str) -> bool:
    """Clear the ``ended`` stamp of a reopened work item (it then routes normally); True when there was one. Its
    close keys are forgotten either way, so a later close is acted on."""

    item = _ref(ref)
    _forget_close_keys(config, item)
    store = config.store
    if "ended" not in (store.read(item) or {}):
        return False
    store.clear_sections(item, ["ended"])
    events.emit("work_item.reopened", work_item=str(item), source=source, actor=actor or None)
    return True
