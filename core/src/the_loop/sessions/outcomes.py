"""What a dispatch did: the :class:`Outcome` the dispatcher returns, and one helper per kind of outcome that writes
its event-log lines (``dispatch.dropped``, ``dispatch.failed``, ``session.spawn_failed``) and returns it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from the_loop import events
from the_loop.state.registry import Endpoint, now_iso

if TYPE_CHECKING:
    from the_loop.models import WorkEvent
    from the_loop.sessions.models import Resolved

Status = Literal["delivered", "spawned", "respawned", "dropped", "failed", "queued"]


@dataclass(frozen=True)
class Outcome:
    """What a dispatch did. ``failed`` releases the delivery id for a retry when ``will_retry``; ``queued`` (a
    spawn waiting in line for a free slot) releases it too, to be tried again in ``retry_in`` seconds without
    counting as a failure."""

    status: Status
    reason: str = ""
    error: str = ""
    will_retry: bool = False
    tmux_target: str = ""
    retry_in: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status in ("delivered", "spawned", "respawned")

    @property
    def again(self) -> bool:
        """Whether the same event is to be handled again later (a retry, or its turn in line)."""
        return self.status == "queued" or (self.status == "failed" and self.will_retry)


def drop(event: WorkEvent, reason: str, detail: str = "") -> Outcome:
    """The event is settled without being acted on: one ``dispatch.dropped`` line saying why."""
    level = "debug" if reason in ("duplicate-delivery", "already-processed") else "info"
    events.emit(
        "dispatch.dropped",
        level=level,
        work_item=event.work_item,
        delivery_id=event.delivery_id,
        reason=reason,
        detail=detail or None,
    )
    return Outcome("dropped", reason=reason, error=detail)


def fail(
    event: WorkEvent,
    error: str,
    *,
    will_retry: bool,
    tmux_target: str = "",
    spawn_failed: str | None = None,
    last_lines: list[str] | None = None,
) -> Outcome:
    """``spawn_failed`` names the harness when the failure is a spawn's (``session.spawn_failed`` too, with
    the pane's ``last_lines`` when there was a pane)."""
    if spawn_failed is not None:
        events.emit(
            "session.spawn_failed",
            level="error",
            work_item=event.work_item,
            harness=spawn_failed,
            error=error,
            will_retry=will_retry,
            tmux_target=tmux_target or None,
            last_lines=last_lines or None,
        )
    events.emit(
        "dispatch.failed",
        level="error",
        work_item=event.work_item,
        delivery_id=event.delivery_id,
        error=error,
        will_retry=will_retry,
    )
    return Outcome("failed", error=error, will_retry=will_retry, tmux_target=tmux_target)


def not_started(event: WorkEvent, harness: str, target: str, error: str, last_lines: list[str]) -> Outcome:
    """The harness did not start or never became ready: ``session.spawn_failed`` with the pane's last lines,
    and the event released for a retry."""
    return fail(event, error, will_retry=True, tmux_target=target, spawn_failed=harness, last_lines=last_lines)


def name_taken(event: WorkEvent, target: str, remedy: str) -> Outcome:
    """The event is dropped, its delivery id kept: a retry would meet the same occupant (seed 000)."""
    events.emit(
        "dispatch.dropped",
        level="error",
        work_item=event.work_item,
        delivery_id=event.delivery_id,
        reason="session-occupied",
        tmux_target=target,
        error=remedy,
    )
    return Outcome("dropped", reason="session-occupied", error=remedy, tmux_target=target)


def session_fields(event: WorkEvent, harness: str, session_id: str, target: str) -> dict[str, object]:
    """What ``session.spawned`` and ``session.respawned`` both say (``endpoint``: a pull request's own session)."""
    return {
        "work_item": event.work_item,
        "endpoint": event.endpoint if event.endpoint and event.endpoint != event.work_item else None,
        "harness": harness,
        "harness_session_id": session_id,
        "tmux_target": target,
        "delivery_id": event.delivery_id,
        "runner": "tmux",
    }


def launched(
    harness: str, session_id: str, cwd: str, target: str, chosen: Resolved, event: WorkEvent, *, created_at: str = ""
) -> Endpoint:
    """The record of a session just started for ``event``: active, on the launch arguments ``chosen`` resolved."""
    return Endpoint(
        harness=harness,
        harness_session_id=session_id,
        cwd=cwd,
        status="active",
        created_at=created_at or now_iso(),
        last_event_at=now_iso(),
        tmux_target=target,
        model=chosen.model,
        effort=chosen.effort,
        harness_args=list(chosen.args),
        recent_deliveries=[event.delivery_id],
    )
