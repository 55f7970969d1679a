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
