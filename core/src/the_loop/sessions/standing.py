"""Where a work item stands, from its records alone: ``the-loop check`` and the web control plane read it here.

:func:`standing` reads the three per-item files — the portable record, this machine's session record and the
checkout's ``work-item-state.json`` — and at most one tmux call (``list-panes -a``, only when a live session is
recorded). :func:`classify` is the one rule that names the state, so ``check`` and the web's list agree. Nothing
here asks a ticket provider anything or writes a file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef
    from the_loop.state.registry import Endpoint, SessionRecord

STATES = ("not-tracked", "idle", "armed", "paused", "disarmed", "parked", "running", "ended", "archived")
ARMING = {"start": "armed", "resume": "armed", "pause": "paused", "stop": "disarmed", "cleanup": "disarmed"}
SETTLE_SECONDS = 0.05  # longer than a filesystem's timestamp tick
RESCAN_SECONDS = 2.0  # a Catalog scans at least this often even when no directory changed (an edit in place)
PARK_RECHECK_SECONDS = 5.0  # an armed item's checkout file is looked at again at most this often by a Catalog
_TEXT_CAP = 300  # a parked reason or an actor from an agent-writable file is a line, not a document


def standing(config: LoadedConfig, ref: WorkItemRef) -> dict[str, Any]:
    """The report ``--format json`` prints (docs/cli.md documents every key)."""
    from the_loop.sessions import choices, workspace
    from the_loop.state import Corrupt, load_json
    from the_loop.state.work_item_state import read as read_state

    unreadable: list[str] = []
    portable_path = config.store.path_for(ref)
    portable: dict[str, Any] = {}
    if load_json(portable_path) is Corrupt:
        unreadable.append(str(portable_path))
    else:
        portable = config.store.read(ref) or {}
    local_path = config.registry.path(str(ref))
    record = None
    if load_json(local_path) is Corrupt:
        unreadable.append(str(local_path))
    else:
        record = config.registry.load(str(ref))
    checkouts = workspace.checkout_paths(config, ref)
    state_file = choices.state_path(config, ref)
    found = None
    problems: list[str] = []
    if state_file is not None and state_file.is_file():
        if load_json(state_file) is Corrupt:
            unreadable.append(str(state_file))
        else:  # the file just found: its checkout is not looked up a second time
            found = read_state(state_file, ref, choices.allowed(config))
            problems = list(found.problems)
    control = _control(portable.get("control"))
    ended = portable.get("ended") if isinstance(portable.get("ended"), dict) else None
    endpoints = _endpoints(config, ref, record)
    parked = _parked(found.parked) if found is not None and found.phase == "phase-selection" else None
    report: dict[str, Any] = {
        "workItem": str(ref),
        "state": "",
        "headline": "",
        "control": control,
        "parked": parked,
        "phase": found.phase if found is not None else "",
        "choices": _choices(found),
        "pullRequests": [{"ref": r.ref, "url": r.url, "state": r.state} for r in found.pull_requests] if found else [],
        "endpoints": endpoints,
        "ended": ended,
        "checkout": str(checkouts[0]) if checkouts else None,
        "stateFile": str(state_file) if state_file is not None and state_file.is_file() else None,
        "unreadable": unreadable,
        "problems": problems,
        "steering": steering(config, str(ref), record),
    }
    tracked = bool(record is not None or any(key not in ("ref", "url") for key in portable) or found is not None)
    report["state"] = classify(report, tracked, archived=ended is not None and not checkouts and record is None)
    report["headline"] = _headline(report)
    return report


def steering(
    config: LoadedConfig, work_item: str, record: SessionRecord | None, queued: dict[str, int] | None = None
) -> dict[str, Any]:
    """What steering says of the item: its spend (a line, and the counts), the decision prompt its session waits
    at, since when it is idle, and its place in line for a slot (``queued``: the line, when already read)."""
    from the_loop.sessions.steering import admission, budgets, stuck

    usage = budgets.usage_of(record)
    line = admission.queued(config) if queued is None else queued
    return {
        "spend": budgets.describe(config, record),
        "usage": {k: v for k, v in usage.items() if k not in ("cursors", "warned")} or None,
        "blocked": stuck.blocked_of(record),
        "idle": stuck.idle_of(record),
        "queued": line.get(work_item),
    }


def classify(report: dict[str, Any], tracked: bool, *, archived: bool) -> str:
    """The state (one of :data:`STATES`) of a report with ``ended``, ``endpoints``, ``parked`` and ``control``."""
    if report["ended"] is not None:
        return "archived" if archived else "ended"
    live = [e for e in report["endpoints"] if e["status"] in ("active", "paused")]
    if any(not binding(report["workItem"], endpoint) for endpoint in live):
        return "running"
    if report["parked"] is not None:
        return "parked"
    command = (report["control"] or {}).get("command", "")
    if command in ARMING:
        return ARMING[command]
    return "idle" if tracked else "not-tracked"


def _headline(report: dict[str, Any]) -> str:
    state = report["state"]
    if state in ("ended", "archived"):
        return f"{state.upper()} — {report['ended'].get('outcome') or 'unknown'}"
    if state == "parked":
        return f"PARKED at the {report['parked']['gate']} gate"
    return state.upper().replace("-", " ")


def _text(value: object) -> str:
    return value[:_TEXT_CAP] if isinstance(value, str) else ""


def _control(found: object) -> dict[str, str] | None:
    if not isinstance(found, dict) or not isinstance(found.get("command"), str):
        return None
    return {key: _text(found.get(key)) for key in ("command", "source", "actor", "requestedAt", "note")}


def _parked(found: dict[str, Any] | None) -> dict[str, str] | None:
    """The gate's own keys, as text: the file is agent-writable, so nothing else in ``parked`` is shown."""
    if not found:
        return None
    return {key: _text(found.get(key)) for key in ("gate", "reason", "since", "comment") if _text(found.get(key))}


def _choices(found: Any) -> dict[str, Any]:
    if found is None:
        return {}
    from the_loop.sessions.closing.terminal import selections

    return selections(found)


def _endpoints(config: LoadedConfig, ref: WorkItemRef, record: SessionRecord | None) -> list[dict[str, Any]]:
    """Each endpoint as recorded; a live one's pane probed with one tmux call for all of them."""
    if record is None:
        return []
    from the_loop.sessions.tmux import runner_for

    runner = runner_for(config)
    live = [endpoint for endpoint in record.sessions.values() if endpoint.live and endpoint.tmux_target]
    panes = runner.probe_all() if live else {}
    prefix = " ".join(runner.command_prefix)
    rows = []
    for name, endpoint in _ordered(record, str(ref)):
        pane = None
        if endpoint.live and endpoint.tmux_target:
            pane = "unknown" if panes is None else panes.get(endpoint.tmux_target, "absent")
        rows.append(_endpoint_row(name, endpoint, pane, prefix))
    return rows


def _ordered(record: SessionRecord, work_item: str) -> list[tuple[str, Endpoint]]:
    """The work item's own endpoint first, then its pull requests' by ref."""
    return sorted(record.sessions.items(), key=lambda item: (item[0] != work_item, item[0]))


def _endpoint_row(name: str, endpoint: Endpoint, pane: str | None, prefix: str) -> dict[str, Any]:
    target = endpoint.tmux_target
    read_only = "-r " if endpoint.status == "closed" else ""
    return {
        "ref": name,
        "harness": endpoint.harness,
        "harnessSessionId": endpoint.harness_session_id,
        "model": endpoint.model,
        "effort": endpoint.effort,
        "status": endpoint.status,
        "pane": pane,
        "tmuxTarget": target,
        "cwd": endpoint.cwd,
        "lastEventAt": endpoint.last_event_at,
        "attach": f"{prefix} attach-session {read_only}-t ={target}" if target else "",
    }


def summary(
    config: LoadedConfig, work_item: str, portable: dict[str, Any], record: SessionRecord | dict[str, Any] | None
) -> dict[str, Any]:
    """One row of a list of work items, from its portable and session records as already read. No tmux call;
    the checkout's ``work-item-state.json`` is read only for an armed item with no live session (the one case
    where it may be parked at the start gate), so a list of 10,000 items costs what their two records do."""
    if isinstance(record, dict):
        from the_loop.state.registry import SessionRecord

        record = SessionRecord.from_dict(record)
    endpoints = [_endpoint_row(name, e, None, "") for name, e in _ordered(record, work_item)] if record else []
    report: dict[str, Any] = {
        "workItem": work_item,
        "url": portable.get("url") if isinstance(portable.get("url"), str) else "",
        "control": _control(portable.get("control")),
        "ended": portable.get("ended") if isinstance(portable.get("ended"), dict) else None,
        "endpoints": endpoints,
        "parked": None,
    }
    live = any(e["status"] in ("active", "paused") and not binding(work_item, e) for e in endpoints)
    armed = ARMING.get((report["control"] or {}).get("command", "")) == "armed"
    if config.core.routing.start_gate.enabled and report["ended"] is None and not live and armed:
        report["parked"] = _parked_of(config, work_item)
    report["state"] = classify(report, True, archived=False)
    own = endpoints[0] if endpoints and endpoints[0]["ref"] == work_item else None
    question = record.extra.get("question") if record is not None else None
    report["session"] = own
    report["question"] = question if isinstance(question, dict) else None
    report["lastActivity"] = max((e["lastEventAt"] or "" for e in endpoints), default="") or None
    return report


def _parked_of(config: LoadedConfig, work_item: str) -> dict[str, str] | None:
    from the_loop.refs import RefError, parse_ref
    from the_loop.sessions import choices
    from the_loop.state.work_item_state import read as read_state

    try:
        ref = parse_ref(work_item)
    except RefError:
        return None
    path = choices.state_path(config, ref)
    if path is None or not path.is_file():
        return None
    found = read_state(path, ref, choices.allowed(config))
    return _parked(found.parked) if found.phase == "phase-selection" else None


def binding(work_item: str, endpoint: dict[str, Any]) -> bool:
    """A pull request recorded on the work item's session with no session of its own (no tmux, no conversation)."""
    return endpoint["ref"] != work_item and not endpoint["tmuxTarget"] and not endpoint["harnessSessionId"]


class Catalog:
    """Every work item this machine knows — a portable record, a session record, or both — as :func:`summary`
    rows, for a process that answers lists again and again (the web control plane). Each file is parsed once per
    change: a listing scans the two record directories and re-reads only files whose inode, mtime or size moved.
    Every record write renames a new file into its directory, so while neither directory's mtime moved the last
    list is still the answer — re-scanned at least every two seconds for a file edited in place."""

    def __init__(self, config: LoadedConfig) -> None:
        self.config = config
        # path → (stat key, the record, its canonical ref): a file is parsed, and its ref parsed, once per change
        self._files: dict[str, tuple[tuple[int, int, int], dict[str, Any] | None, str]] = {}
        self._rows: dict[str, tuple[Any, dict[str, Any], float]] = {}
        self._sorted: list[dict[str, Any]] = []
        self._dirs: tuple[Any, ...] = ()
        self._scanned = 0.0
        self._scanned_wall = 0.0

    def _read(self, path: str, key: tuple[int, int, int], field: str) -> tuple[dict[str, Any] | None, str]:
        hit = self._files.get(path)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        from pathlib import Path

        from the_loop.state import load_json
        from the_loop.state.registry import canonical

        found = load_json(Path(path))
        value = found if isinstance(found, dict) else None
        ref = value.get(field) if value is not None else None
        if isinstance(ref, dict):  # a version-1 session record names its item in a block
            ref = ref.get("ref")
        named = canonical(ref) if isinstance(ref, str) and ref else ""
        self._files[path] = (key, value, named)
        return value, named

    def _scan(
        self, directory: Any, field: str, seen: set[str]
    ) -> dict[str, tuple[tuple[int, int, int], dict[str, Any]]]:
        import os
        import stat

        from the_loop.state import is_record_name

        found: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}
        try:
            scanner = os.scandir(directory)
        except FileNotFoundError:
            return found
        with scanner:
            for entry in scanner:
                if not is_record_name(entry.name):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISREG(info.st_mode):
                    continue
                key = (info.st_ino, info.st_mtime_ns, info.st_size)
                seen.add(entry.path)
                data, ref = self._read(entry.path, key, field)
                if data is not None and ref:
                    found[ref] = (key, data)
        return found

    def rows(self) -> list[dict[str, Any]]:
        """Every known work item's summary, newest activity first (then by ref). The list is sorted again only
        when a row changed."""
        import time

        now, wall = time.monotonic(), time.time()
        dirs = (_mtime(self.config.state.portable_dir), _mtime(self.config.state.local_dir))
        # Every record write renames into its directory, so unchanged directories mean unchanged records — unless a
        # change landed within a clock tick of the last scan (a directory's mtime is coarse): then look again.
        settled = max(dirs) / 1e9 < self._scanned_wall - SETTLE_SECONDS
        if self._sorted and dirs == self._dirs and settled and now - self._scanned < RESCAN_SECONDS:
            return list(self._sorted)
        self._dirs, self._scanned, self._scanned_wall = dirs, now, wall
        seen: set[str] = set()
        portable = self._scan(self.config.state.portable_dir, "ref", seen)
        local = self._scan(self.config.state.local_dir, "workItem", seen)
        for gone in self._files.keys() - seen:
            del self._files[gone]
        gate = bool(self.config.core.routing.start_gate.enabled)
        changed = False
        known = portable.keys() | local.keys()
        for ref in known:
            p_key, p_data = portable.get(ref, (None, {}))
            l_key, l_data = local.get(ref, (None, None))
            key = (p_key, l_key)
            hit = self._rows.get(ref)
            stale_park = hit is not None and gate and _may_park(hit[1]) and now - hit[2] > PARK_RECHECK_SECONDS
            if hit is None or hit[0] != key or stale_park:
                row = summary(self.config, ref, p_data or {}, l_data)
                changed = changed or hit is None or hit[1] != row
                self._rows[ref] = (key, row, now)
        for gone in self._rows.keys() - known:
            del self._rows[gone]
            changed = True
        if changed or len(self._sorted) != len(self._rows):
            rows = [hit[1] for hit in self._rows.values()]
            rows.sort(key=lambda row: row["workItem"])
            rows.sort(key=lambda row: row["lastActivity"] or "", reverse=True)
            self._sorted = rows
        return list(self._sorted)


def _mtime(directory: Any) -> int:
    import os

    try:
        return os.stat(directory).st_mtime_ns
    except OSError:
        return 0


def _may_park(row: dict[str, Any]) -> bool:
    """A row whose state hangs on the checkout's file as well (armed, no live session): read again each time."""
    return row["state"] in ("armed", "parked")
