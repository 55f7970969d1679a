"""How a work item ended: ``ended.outcome`` and ``ended.terminal`` (seed 004, issue-452).

``terminal`` is a filtered copy of the work item's ``work-item-state.json``, taken by the close path before it
removes the checkout, so ``the-loop check`` can still say what was delivered once the checkout is gone. It is a
copy of an agent-writable file: it is built from the validated state (:mod:`the_loop.sessions.choices`), holds
names and refs only (no path outside the spec directory, no file content), and nothing reads it back into routing
or a gate.

``outcome`` is decided from what exists without the process graph (its completion node is deferred), in order:

1. ``completed`` — the work item is a pull request that merged (``pr-merged``), or a pull request recorded as
   delivering it merged (a ``pullRequests`` row of its ``work-item-state.json`` whose state is ``merged``);
2. ``cancelled`` — a pull request closed unmerged (``pr-closed``), or an issue closed as not planned or as a
   duplicate (the tracker's ``state_reason``);
3. ``unknown`` — no terminal record could be read (no checkout on this machine, or its file did not parse), or the
   item was deleted: nothing says how it ended;
4. ``closed-externally`` — any other close: someone closed it without a merged pull request on record (an issue
   closed as completed by hand is this: the-loop delivered nothing it recorded).

A pull request delivering the item that merges after the item's own close (GitHub sends the two events apart)
upgrades ``closed-externally`` or ``unknown`` to ``completed``: :func:`mark_pull_request`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop import events
from the_loop.state import Corrupt, load_json

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef
    from the_loop.state.work_item_state import WorkItemState

OUTCOMES = ("completed", "cancelled", "closed-externally", "unknown")
CANCELLED_STATE_REASONS = frozenset({"not_planned", "duplicate"})
EVIDENCE_CAP = 50
_EVIDENCE_NAME = re.compile(r"^[^./\x00-\x1f\x7f][^/\x00-\x1f\x7f]{0,199}$")


def outcome(reason: str, terminal: dict[str, Any] | None, state_reason: str = "") -> str:
    """The rule of this module's docstring, for a close ``reason`` (issue-closed, pr-merged, pr-closed, deleted)."""
    if reason == "pr-merged" or _delivered(terminal):
        return "completed"
    if reason == "pr-closed" or (state_reason or "").lower() in CANCELLED_STATE_REASONS:
        return "cancelled"
    if terminal is None or reason == "deleted":
        return "unknown"
    return "closed-externally"


def _delivered(terminal: dict[str, Any] | None) -> bool:
    rows = (terminal or {}).get("pullRequests")
    return isinstance(rows, list) and any(isinstance(row, dict) and row.get("state") == "merged" for row in rows)


def terminal_record(config: LoadedConfig, ref: WorkItemRef) -> dict[str, Any] | None:
    """The work item's ending, copied from its ``work-item-state.json``: None when it has no checkout on this
    machine, or the file there does not parse. A checkout without the file gives an empty record: it was read."""
    from the_loop.sessions import choices
    from the_loop.state.registry import now_iso
    from the_loop.state.work_item_state import relative_path

    try:
        checkout = choices.checkout_of(config, ref)
        if checkout is None or not checkout.is_dir():
            return None
        path = choices.state_path(config, ref, checkout)
        if path is None or load_json(path) is Corrupt:
            return None
        state = choices.current(config, ref, checkout)
    except Exception as exc:  # an ending is recorded whatever this copy does
        events.emit("work_item.terminal_failed", level="warning", work_item=str(ref), error=f"{exc}"[:300])
        return None
    spec_dir = relative_path(ref, config.core.routing.graph.spec_dir).parent
    return {
        "workItem": str(ref),
        "phase": state.phase,
        "selections": selections(state),
        "pullRequests": [{"ref": row.ref, "url": row.url, "state": row.state} for row in state.pull_requests],
        "specDir": spec_dir.as_posix(),
        "evidence": evidence(checkout, spec_dir),
        "recordedAt": now_iso(),
    }


def selections(state: WorkItemState) -> dict[str, Any]:
    """The human decisions the terminal keeps: model, effort, sessionPerPr and repos (empty ones left out)."""
    found: dict[str, Any] = {}
    for key, value in (("model", state.model), ("effort", state.effort), ("sessionPerPr", state.session_per_pr)):
        if value:
            found[key] = value
    if state.repos:
        found["repos"] = list(state.repos)
    return found


def evidence(checkout: Path, spec_dir: Path) -> list[str]:
    """The names of the regular files in ``<spec dir>/evidence/``, sorted, at most :data:`EVIDENCE_CAP`. A
    directory that is a symbolic link, or leads out of the checkout, is not listed: only names inside it count."""
    directory = checkout / spec_dir / "evidence"
    try:
        if directory.is_symlink() or not directory.resolve().is_relative_to(checkout.resolve()):
            return []
        with os.scandir(directory) as entries:
            names = [
                entry.name
                for entry in entries
                if _EVIDENCE_NAME.match(entry.name) and entry.is_file(follow_symlinks=False)
            ]
    except OSError:
        return []
    return sorted(names)[:EVIDENCE_CAP]


def stamp_terminal(config: LoadedConfig, ref: WorkItemRef) -> bool:
    """Cleanup on an ended item: add a terminal to a stamp that has none while the checkout still exists (an
    ``unknown`` outcome is decided again from it). True when one was added."""
    ended = (config.store.read(ref) or {}).get("ended")
    if not isinstance(ended, dict) or isinstance(ended.get("terminal"), dict):
        return False
    terminal = terminal_record(config, ref)
    if terminal is None:
        return False

    def add(current: Any) -> Any:
        if not isinstance(current, dict) or isinstance(current.get("terminal"), dict):
            return current
        updated = {**current, "terminal": terminal}
        if current.get("outcome") == "unknown":
            updated["outcome"] = outcome(str(current.get("reason") or ""), terminal)
        return updated

    config.store.update_section(ref, "ended", add)
    return True


def mark_pull_request(config: LoadedConfig, owner: WorkItemRef, pull_request: str, reason: str) -> None:
    """A pull request recorded on ``owner`` merged after ``owner`` had already ended without a delivered outcome:
    the merge makes it ``completed`` (``work_item.outcome_changed``). Its ``work-item-state.json`` row took the
    upstream state already (:func:`the_loop.sessions.pull_requests.ended`). Best-effort: a failure is logged."""
    if reason != "pr-merged":
        return
    try:
        _upgrade(config, owner, pull_request)
    except Exception as exc:
        events.emit(
            "work_item.terminal_failed",
            level="warning",
            work_item=str(owner),
            pull_request=pull_request,
            error=f"{exc}"[:300],
        )


def _upgrade(config: LoadedConfig, owner: WorkItemRef, pull_request: str) -> None:
    ended = (config.store.read(owner) or {}).get("ended")
    if not isinstance(ended, dict) or ended.get("outcome") not in ("closed-externally", "unknown"):
        return
    before = ended["outcome"]

    def upgrade(current: Any) -> Any:
        if not isinstance(current, dict) or current.get("outcome") not in ("closed-externally", "unknown"):
            return current
        updated = {**current, "outcome": "completed"}
        terminal = current.get("terminal")
        if isinstance(terminal, dict) and isinstance(terminal.get("pullRequests"), list):
            rows = [
                {**row, "state": "merged"} if isinstance(row, dict) and row.get("ref") == pull_request else row
                for row in terminal["pullRequests"]
            ]
            updated["terminal"] = {**terminal, "pullRequests": rows}
        return updated

    config.store.update_section(owner, "ended", upgrade)
    events.emit(
        "work_item.outcome_changed",
        work_item=str(owner),
        pull_request=pull_request,
        outcome="completed",
        was=before,
    )
