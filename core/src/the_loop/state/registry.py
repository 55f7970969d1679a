"""The session registry: ``local/<slug>.json``, this machine's handles to a work item's sessions.

Version 2 is a map of sessions keyed by the ref each serves (the work item's own, one per pull request)::

    {"version": 2, "workItem": "github:octo/repo#15", "channels": {...},
     "sessions": {"github:octo/repo#15": {"harness": "claude", "harnessSessionId": "…", "cwd": "…",
                                           "status": "active", "createdAt": "…", "lastEventAt": "…",
                                           "tmuxTarget": "loop-github-octo-repo-15", "recentDeliveries": […]}}}

Version-1 records (flat: the endpoint keys at the top level, an optional ``pullRequests`` list) are read as they are
and written back as version 2 on their next save; nothing is migrated in bulk. A ``tmuxTarget`` read back is
normalised the way tmux spells names, and a recorded ref as refs are spelled now (lower-cased owner and repo). Every
read-modify-write holds the item's ``<alias key>.session`` lock (:mod:`the_loop.state.slugs`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from the_loop.refs import canonical_ref, normalize_tmux_target
from the_loop.state import (
    Corrupt,
    StateLayout,
    StatMemo,
    atomic_write_json,
    is_record_name,
    load_json,
    locked,
    quarantine,
    read_json,
    warn_once,
)
from the_loop.state.slugs import SlugCollision, check_owner, slug_of, work_item_lock

RECENT_DELIVERIES_CAP = 50

RECORD_VERSION = 2
Status = Literal["active", "paused", "closed"]

_ENDPOINT_KEYS = ("harness", "harnessSessionId", "cwd", "status", "createdAt", "lastEventAt", "tmuxTarget")


def now_iso() -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Endpoint:
    """One session of a work item: which harness and conversation, where it runs, where to attach."""

    harness: str
    harness_session_id: str = ""
    cwd: str = ""
    status: Status = "active"
    created_at: str = ""
    last_event_at: str | None = None
    tmux_target: str = ""
    recent_deliveries: list[str] = field(default_factory=list)
    model: str = ""
    effort: str = ""
    harness_args: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        """Active or paused: it still counts for the one-live-session-per-item rule."""
        return self.status in ("active", "paused")

    def remember(self, delivery_id: str) -> None:
        if delivery_id and delivery_id not in self.recent_deliveries:
            self.recent_deliveries.append(delivery_id)
            del self.recent_deliveries[:-RECENT_DELIVERIES_CAP]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Endpoint:
        known = {"recentDeliveries", "model", "effort", "harnessArgs", "runner", *_ENDPOINT_KEYS}
        status = data.get("status") if data.get("status") in ("active", "paused", "closed") else "active"
        return cls(
            harness=str(data.get("harness") or ""),
            harness_session_id=str(data.get("harnessSessionId") or ""),
            cwd=str(data.get("cwd") or ""),
            status=status,  # type: ignore[arg-type]
            created_at=str(data.get("createdAt") or ""),
            last_event_at=data.get("lastEventAt"),
            tmux_target=normalize_tmux_target(str(data.get("tmuxTarget") or "")),
            recent_deliveries=[str(d) for d in data.get("recentDeliveries") or []][-RECENT_DELIVERIES_CAP:],
            model=str(data.get("model") or ""),
            effort=str(data.get("effort") or ""),
            harness_args=[str(a) for a in data.get("harnessArgs") or []],
            extra={k: v for k, v in data.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "harness": self.harness,
            "harnessSessionId": self.harness_session_id,
            "cwd": self.cwd,
            "status": self.status,
            "createdAt": self.created_at,
            "lastEventAt": self.last_event_at,
            "tmuxTarget": self.tmux_target,
            "recentDeliveries": list(self.recent_deliveries),
        }
        for key, value in (("model", self.model), ("effort", self.effort), ("harnessArgs", self.harness_args)):
            if value:
                data[key] = value
        data.update(self.extra)
        return data


def canonical(ref: Any) -> str:
    """A recorded ref as it is spelled now (owner and repo lower-cased); text that is no ref is kept as it is."""
    return canonical_ref(ref) or str(ref or "")


def _session_targets(path: Path) -> tuple[str, set[str]]:
    """A record's work item and the tmux targets its sessions point at (("", ∅) when it does not parse)."""
    data = load_json(path)
    if not isinstance(data, dict):
        return "", set()
    record = SessionRecord.from_dict(data)
    return record.work_item, {endpoint.tmux_target for endpoint in record.sessions.values()}


_TARGETS: StatMemo[tuple[str, set[str]]] = StatMemo(_session_targets, limit=8192)


@dataclass
class SessionRecord:
    """Everything this machine holds for one work item."""

    work_item: str
    sessions: dict[str, Endpoint] = field(default_factory=dict)
    channels: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def own(self) -> Endpoint | None:
        """The work item's own session (not a pull request's)."""
        return self.sessions.get(self.work_item)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionRecord:
        if data.get("version") == RECORD_VERSION and isinstance(data.get("sessions"), dict):
            work_item = canonical(data.get("workItem"))
            sessions = {}
            for ref, entry in data["sessions"].items():
                if isinstance(entry, dict):  # an unreadable PR entry degrades to "unrecorded"
                    sessions[canonical(ref)] = Endpoint.from_dict(entry)
            extra = {k: v for k, v in data.items() if k not in ("version", "workItem", "sessions", "channels")}
            channels = data.get("channels") if isinstance(data.get("channels"), dict) else {}
            return cls(work_item, sessions, channels, extra)
        return cls._from_v1(data)

    @classmethod
    def _from_v1(cls, data: dict[str, Any]) -> SessionRecord:
        identity = data.get("workItem")
        work_item = canonical(identity.get("ref") if isinstance(identity, dict) else identity)
        record = cls(work_item)
        if data.get("harness") or data.get("harnessSessionId") or data.get("tmuxTarget") is not None:
            record.sessions[work_item] = Endpoint.from_dict(data)
        for pull in data.get("pullRequests") or []:
            if isinstance(pull, dict):
                pr_identity = pull.get("workItem")
                pr_ref = pr_identity.get("ref") if isinstance(pr_identity, dict) else pull.get("ref")
                if pr_ref:
                    record.sessions[canonical(pr_ref)] = Endpoint.from_dict(pull)
        return record

    def take_question(self, question_id: str = "") -> dict[str, Any] | None:
        """Take the agent's open question (``the-loop ask``) off the record — only ``question_id`` when given — as
        a person answers it; the question taken, if any."""
        found = self.extra.get("question")
        if not isinstance(found, dict) or (question_id and found.get("id") != question_id):
            return None
        del self.extra["question"]
        return found

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"version": RECORD_VERSION, "workItem": self.work_item}
        if self.channels:
            data["channels"] = self.channels
        data["sessions"] = {ref: endpoint.to_dict() for ref, endpoint in self.sessions.items()}
        data.update(self.extra)
        return data


class SessionRegistry:
    """Reads and writes ``local/<slug>.json``; the only code that does."""

    def __init__(self, layout: StateLayout) -> None:
        self.layout = layout

    def path(self, work_item: str) -> Path:
        """Where the item's record is (or will be): under the slug it owns (:mod:`the_loop.state.slugs`)."""
        return self.layout.local_record(slug_of(self.layout, work_item))

    def _lock(self, work_item: str) -> Any:
        return locked(work_item_lock(self.layout, work_item, "session"))

    def load(self, work_item: str) -> SessionRecord | None:
        return self.load_or_quarantine(work_item, move_corrupt=False)[0]

    def load_or_quarantine(
        self, work_item: str, *, move_corrupt: bool = True
    ) -> tuple[SessionRecord | None, Path | None]:
        """One read: the record, or, when the file is corrupt, None and where it was moved aside (reported). A
        record naming another work item is reported and never returned (:func:`the_loop.state.slugs.check_owner`)."""
        try:
            path = self.path(work_item)
            data = load_json(path)
            check_owner(path, data, work_item)
        except SlugCollision:
            return None, None
        if data is Corrupt:
            if move_corrupt:
                return None, quarantine(path)
            warn_once(f"corrupt:{path}", f"skipping unreadable state file {path}: not a JSON object")
            return None, None
        return (None if data is None else SessionRecord.from_dict(data)), None  # type: ignore[arg-type]

    def update(self, work_item: str, change: Callable[[SessionRecord], None]) -> SessionRecord:
        """Read-modify-write under the item's lock; ``change`` edits the record (created when absent). Raises
        :class:`~the_loop.state.slugs.SlugCollision` when the item has no name of its own."""
        work_item = canonical(work_item)
        with self._lock(work_item):
            path = self.path(work_item)  # chosen under the lock every alias of the name shares
            data = load_json(path)
            check_owner(path, data, work_item)
            if data is Corrupt:
                quarantine(path)  # moved aside and reported, never overwritten
            record = SessionRecord.from_dict(data) if isinstance(data, dict) else SessionRecord(work_item)
            record.work_item = record.work_item or work_item
            change(record)
            atomic_write_json(path, record.to_dict(), mode=0o600)
            return record

    def forget(self, work_item: str) -> bool:
        """Delete the record (reset and cleanup only). True when there was one."""
        with self._lock(work_item):
            try:
                path = self.path(work_item)
                check_owner(path, load_json(path), work_item)
                os.unlink(path)
            except (FileNotFoundError, SlugCollision):
                return False
            return True

    def holders(self, tmux_target: str) -> list[str]:
        """The work items whose records point a session at ``tmux_target`` (a spawn checks the name is not
        another's). One scan of the directory; a record is parsed again only when its file changed."""
        wanted = normalize_tmux_target(tmux_target)
        directory = self.layout.local_dir
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        found = []
        for name in filter(is_record_name, names):
            work_item, targets = _TARGETS.get(directory / name) or ("", set())
            if work_item and wanted in targets:
                found.append(work_item)
        return sorted(found)

    def records(self) -> Iterator[SessionRecord]:
        """Every readable record; unrelated files are ignored silently, unreadable ones with one warning."""
        directory = self.layout.local_dir
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return
        for name in names:
            if not is_record_name(name):
                continue
            data = read_json(directory / name)
            if data is None:
                continue
            record = SessionRecord.from_dict(data)
            if not record.work_item:
                warn_once(f"noref:{name}", f"skipping registry file {directory / name}: no workItem")
                continue
            yield record
