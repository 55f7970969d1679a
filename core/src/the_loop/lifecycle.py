"""Lifecycle points: the typed context a hook receives and the decision it may return."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

POINTS = (
    "work_item_start",
    "session_spawn",
    "session_spawned",
    "waiting_for_input",
    "input_received",
    "phase_changed",
    "work_item_complete",
)


@dataclass(frozen=True)
class LifecycleContext:
    """Read-only facts at a point: which point, which work item, and point-specific facts."""

    point: str
    work_item: str
    facts: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    decisions_so_far: tuple[Decision, ...] = ()


@dataclass(frozen=True)
class Decision:
    """A hook's answer. ``None`` fields mean "no opinion"; an empty ``text`` or ``prompt`` means unchanged."""

    proceed: bool | None = None
    reason: str = ""
    prompt: str | None = None
    text: str | None = None
    announce: bool | None = None
    notify: bool | None = None


def decide(point: str, work_item: str, facts: Mapping[str, Any] | None = None) -> Decision:
    """Ask every implementation of ``loop_<point>`` in order and fold their answers into one decision.

    Each implementation sees the decisions made before it. A refusal (``proceed=False``) sticks: no later hook can
    undo it. A later non-empty ``prompt``/``text`` replaces an earlier one; ``announce``/``notify`` set to False
    stick. An implementation that raises or answers something that is not a :class:`Decision` changes nothing and
    is logged as ``hooks.failed``.
    """
    from the_loop import events
    from the_loop.plugins import get_host

    host = get_host()
    folded = Decision()
    answers: list[Decision] = []
    for plugin_name, answer in host.lifecycle_each(
        point, lambda: LifecycleContext(point, work_item, MappingProxyType(dict(facts or {})), tuple(answers))
    ):
        if not isinstance(answer, Decision):
            error = f"{type(answer).__name__}: {answer}" if isinstance(answer, Exception) else "not a Decision"
            events.emit(
                "hooks.failed", level="warning", point=point, hook=plugin_name, work_item=work_item, error=error
            )
            continue
        answers.append(answer)
        folded = Decision(
            proceed=False if False in (folded.proceed, answer.proceed) else (answer.proceed or folded.proceed),
            reason=folded.reason if folded.proceed is False else (answer.reason or folded.reason),
            prompt=answer.prompt or folded.prompt,
            text=answer.text or folded.text,
            announce=False if False in (folded.announce, answer.announce) else (answer.announce or folded.announce),
            notify=False if False in (folded.notify, answer.notify) else (answer.notify or folded.notify),
        )
        if answer.proceed is False:
            events.emit("hooks.refused", point=point, hook=plugin_name, work_item=work_item, reason=answer.reason)
    return folded
