"""The event log: ``logs/events.jsonl``, one JSON object per decision, and the catalog of event types.

Each line carries the envelope ``ts``, ``source``, ``event``, ``level``, ``pid`` and the event's own fields (ids,
never message text or secrets); ``None`` fields are dropped. Lines are appended whole with one ``write`` under an
``flock`` on the log itself, so concurrent processes never interleave. Writing never raises: a failure warns once
per process and the operation carries on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from the_loop.declarations import EventType

LEVELS = ("debug", "info", "warning", "error")


def _t(name: str, description: str) -> EventType:
    return EventType(name, description)


CORE_EVENT_TYPES: tuple[EventType, ...] = (
    _t("config.unknown_key", "a config key no core or plugin section claims was ignored"),
    _t("config.retired_key", "a retired config key refused a start; run the-loop migrate-config"),
    _t("config.migrated", "migrate-config rewrote retired keys"),
    _t("config.reloaded", "a running service loaded the edited config file (changed: the top-level keys that differ)"),
    _t("config.reload-failed", "an edited config file did not load; the service keeps the last good config"),
    _t("state.quarantined", "a state file that did not parse was moved aside before being replaced"),
    _t("state.record_foreign", "a record file named another work item than the one it was read for: left untouched"),
    _t("state.index_failed", "portable/index.json could not be rebuilt; the records themselves were written"),
    _t("daemon.started", "a service took its lock and started"),
    _t("daemon.stopped", "a service released its lock and exited"),
    _t("daemon.blocked", "a service did not start: its lock is held by another process"),
    _t("daemon.failed", "a service could not start (config, credentials, preflight)"),
    _t("server.started", "the HTTP server is listening (host, port, routes, path, routing, verifying_signatures)"),
    _t("server.stopped", "the HTTP server stopped"),
    _t("server.rejected", "the HTTP server refused a request (size, route, timeout)"),
    _t("poller.started", "the poller started its cycles"),
    _t("poller.stopped", "the poller stopped"),
    _t("poller.blocked", "a poller did not start: another poller holds poll.pid"),
    _t("poll.cycle", "one poll cycle finished, with its counters"),
    _t("poll.scope_error", "a poll source failed for one scope"),
    # What every ticketing ingress reports the same way (GitHub's and Jira's webhooks and poll sources).
    _t("webhook.received", "a delivery was verified and parsed (provider, gh_event/event, action, delivery_id)"),
    _t("webhook.rejected", "a delivery was refused: invalid-signature, invalid-payload, inbox-unavailable, …"),
    _t("poll.comment_forwarded", "a polled comment went to the inbox (comment_id, actor, attempt)"),
    _t("poll.item_error", "one polled item (or its closure question) failed; it is retried next cycle"),
    _t("poll.closure_detected", "an item absent from the listing is closed upstream (state, kind)"),
    _t("poll.comment_settled", "a polled comment was settled without a paste, on purpose (outcome or reason)"),
    _t("restart.completed", "the-loop restart ran stop then start"),
    _t("service.started", "the-loop start reported a service started"),
    _t("service.stopped", "the-loop stop reported a service stopped"),
    _t("session.reset", "sessions reset removed a work item's session and control state (actor, removed, was_live)"),
    _t("routing.dropped", "an inbound event was not routed (forged-provider, disabled-event, duplicate-delivery, …)"),
    _t("dispatch.attachments", "uploads linked in a comment were fetched for its session (counts only)"),
    _t("dispatch.dropped", "an event was not delivered to any session; reason says why"),
    _t("dispatch.queued", "an event joined its work item's queue (spawn says whether it may start a session)"),
    _t("dispatch.succeeded", "an event was pasted and submitted into its session (via tmux)"),
    _t("dispatch.failed", "a delivery failed; will_retry says whether the id was released for a retry"),
    _t("dispatch.error", "a dispatch raised unexpectedly; the id was released for a retry"),
    _t("dispatch.abandoned", "an inbox entry failed every attempt and was moved to local/inbox/abandoned/"),
    _t("inbox.quarantined", "an inbox entry that did not parse was moved aside, never handled"),
    _t("session.spawned", "a work item's first session started in tmux (endpoint: a pull request's own session)"),
    _t("session.choice_changed", "a live session was resumed on a changed model or effort choice (was, harness_args)"),
    _t("session.spawn_deferred", "an armed work item's first session waits at the start gate (gate, reason)"),
    _t("gate.posted", "the start gate's checklist was posted on the work item (comment)"),
    _t("gate.post_failed", "the start gate's checklist could not be posted; the next spawn request retries"),
    _t("gate.decided", "an authorized person's choice was frozen into work-item-state.json (actor, source, choices)"),
    _t("session.spawn_failed", "a session could not be started (harness, binary, occupied name, tmux)"),
    _t(
        "session.model_refused",
        "a spawn left a chosen model or effort out (kind, name, reason: undeclared, unsupported, refused) and "
        "launched with the harness's own arguments",
    ),
    _t(
        "models.checked", "models check measured or kept each harness's verdicts (measured, kept; ok, refused, unknown)"
    ),
    _t("session.respawned", "a crashed or missing session was started again (resumed says if the conversation was)"),
    _t("session.respawn_averted", "a respawn found the session live and delivered into it instead"),
    _t(
        "session.record_recovered",
        "a corrupt session record was moved aside and the live tmux session under the item's name registered again",
    ),
    _t("session.resume_failed", "a respawn could not resume the conversation and started a fresh one"),
    _t("session.registered", "sessions register recorded a session by hand"),
    _t("session.paused", "a session was paused: events are suppressed, tmux untouched"),
    _t("session.resumed", "a paused session was resumed: events are delivered again"),
    _t("session.closed", "a session was closed (stop, close, reset, cleanup, item ended); tmux: keep or kill"),
    _t("session.retained", "a closed session's tmux session was kept so its scrollback stays readable"),
    _t("session.harness_terminated", "a closing session's harness was ended: SIGTERM, SIGKILL after the grace"),
    _t("session.cleaned", "sessions cleanup released a work item's tmux sessions, checkout and local record"),
    _t("session.announced", "the attach details were posted on the work item"),
    _t("session.announce_failed", "the announcement could not be posted; the session runs regardless"),
    _t("session.work_item_missing", "the tracker answered 404 for the work item a session was announced on"),
    _t("session.awaiting_input", "the agent asked a question on its work item (the-loop ask): comment_id, no text"),
    _t("question.answered", "a person's input reached a session with an open question: question, source, actor"),
    _t("session.interrupted", "the harness's own interrupt was pressed: stopped (its turn ended), seconds, actor"),
    _t("session.blocked", "a session's screen shows a decision prompt: prompt id, its text and options (posted once)"),
    _t("session.unblocked", "the decision prompt left the session's screen"),
    _t("session.prompt_answered", "an authorized answer pressed a decision prompt's option in the pane: option, actor"),
    _t("session.idle", "nothing moved on a session's screen or transcript for routing.stuck.idleMinutes: one nudge"),
    _t("session.active", "an idle session moved again"),
    _t("budget.warning", "a work item spent routing.budgets.warnAtPercent of a limit: measure, spent, limit (once)"),
    _t("budget.exhausted", "a work item spent a whole limit: its session was paused, the conversation kept"),
    _t("budget.set", "the start comment set a work item's own limit of a measure (budget=10usd): measure, limit"),
    _t("budget.raised", "an authorized person raised a work item's budget: measure, amount, limit, resumed"),
    _t("budget.unpriced", "usage of a model routing.budgets.prices does not price: its cost is not counted"),
    _t("admission.queued", "a spawn waits in line past routing.capacity: position, reason, the figures (once)"),
    _t("admission.admitted", "a spawn that waited in line got its slot: waited_seconds"),
    _t("admission.withdrawn", "a work item waiting in line was stopped before its turn"),
    _t(
        "fleet.fallback",
        "NATS could not take what an ingress accepted on the gateway: it was stored in the local inbox",
    ),
    _t("fleet.intake_failed", "the gateway could not read the event stream (NATS away); it tries again"),
    _t("fleet.intake_dropped", "a message on the event stream was not an accepted event: dropped"),
    _t("fleet.unreachable", "the gateway could not reach NATS for an entry: it waits in the inbox, no attempt counted"),
    _t("fleet.assigned", "the gateway gave a work item to a worker: worker, previous (after a failover), addressed"),
    _t("fleet.no_worker", "no live worker can take a new work item now (full, locked, or the addressed one is gone)"),
    _t("fleet.forwarded", "the gateway queued an event for its work item's owner: worker"),
    _t("fleet.failover", "a silent worker's item (no heartbeat, no lease) went to another worker: worker, previous"),
    _t("fleet.sweep_failed", "one look of the gateway for silent workers failed; it looks again"),
    _t("fleet.owned", "a worker took a work item's lease and reads its commands: epoch, previous"),
    _t("fleet.took_over", "a worker took over an item from a silent one: previous, spawn (a fresh session)"),
    _t("fleet.takeover_failed", "taking an item over raised; its commands still come and spawn as on one machine"),
    _t("fleet.takeover_spawn_failed", "the fresh session of an item taken over did not start: reason"),
    _t("fleet.adopt_failed", "a worker could not take an assigned item now: the notice comes back and is tried again"),
    _t("fleet.assignment_dropped", "a worker's assignment notice was malformed: dropped"),
    _t("fleet.assignment_refused", "a worker was assigned an item another worker holds the lease of: holder"),
    _t(
        "fleet.lease_lost",
        "a worker's lease of an item was taken by another (it was cut off): it acts on nothing of it",
    ),
    _t("fleet.session_released", "a worker closed its session of an item another worker has now: reason"),
    _t("fleet.session_release_failed", "a worker could not close its session of an item it lost: error"),
    _t("fleet.command_dropped", "a command on an item's subject was not an event: dropped"),
    _t("fleet.command_failed", "acting on an item's command raised outside the router; it is read again"),
    _t(
        "fleet.copy_failed",
        "a worker could not copy an item's portable record to the fleet; the next event tries again",
    ),
    _t("fleet.beat_failed", "a worker's heartbeat could not be written (NATS away)"),
    _t("fleet.worker_unreachable", "a worker could not reach NATS; its leases lapse if it stays away"),
    _t("watch.failed", "one tick of the session watch (budgets, stuck sessions) raised; the watch goes on"),
    _t("routing.routed", "an event was resolved to its work item and its actor authorized"),
    _t("control.ambiguous", "a comment named two different commands: nothing executed, delivered as conversation"),
    _t("session.pr_linked", "a pull request was recorded on the work item it delivers (later events route by it)"),
    _t(
        "session.pr_session_declined",
        "a pull request's own session was not made (no workspace, no checkout, its name taken): the work item's got it",
    ),
    _t("graph.pull_request_linked", "sessions link-pr wrote a pullRequests row in the item's work-item-state.json"),
    _t("graph.pull_request_state", "a linked pull request ended: its row's state was written (merged, closed)"),
    _t("routing.linkage_dropped", "a ref only a branch name gave was dropped: the tracker says it does not exist"),
    _t("session.link_failed", "recording a pull request on its work item failed; the delivery went ahead"),
    _t("session.kept_open", "a pull request delivering the work item closed: its endpoint ended, the session runs on"),
    _t("session.autoclosed", "the work item closed or merged upstream, and its session was closed"),
    _t("cleanup.deferred", "a close by no one or by an unauthorized actor: the session is closed, cleanup waits"),
    _t("work_item.ended", "the work item ended upstream: the ended stamp was written (reason, source, actor)"),
    _t("work_item.reopened", "the work item was reopened: its ended stamp was cleared"),
    _t("work_item.already_ended", "a close of an item that had already ended: nothing ran a second time"),
    _t(
        "work_item.outcome_changed",
        "a pull request delivering an ended work item merged after its close: ended.outcome is completed now",
    ),
    _t("work_item.terminal_failed", "the terminal copy of work-item-state.json could not be taken; the close went on"),
    _t("work_item.forget_failed", "a reopened item's earlier close keys could not be forgotten; a next close is lost"),
    _t("control.command", "a control command (start, stop, pause, resume, cleanup) was executed"),
    _t("control.rejected", "a control command was refused; reason says why"),
    _t("control.reply_failed", "the marked reply explaining a refused command could not be posted"),
    _t("control.claim_failed", "control-deliveries.json could not be written; the command ran anyway"),
    _t("channel.open_failed", "a channel could not open the work item's conversation; the spawn went ahead"),
    _t("channel.thread_opened", "a work item's conversation was opened (channel, thread, origin: start or event)"),
    _t("channel.posted", "an event was posted into a work item's conversation (channel, event_type, thread)"),
    _t("channel.post_failed", "a channel refused or failed a post (error); the event may be queued"),
    _t("channel.disabled", "a channel's enabled check raised: it is treated as off"),
    _t("channel.undelivered", "no channel accepted an event: it waits in channels/undelivered.json (pending)"),
    _t("channel.undelivered_dropped", "the undelivered queue was full (200): its oldest entry was dropped"),
    _t("channel.delivered_late", "a queued event was posted by a drain (attempts, waited_seconds)"),
    _t("channel.read_failed", "reading one conversation failed; its cursor stays, the next cycle retries"),
    _t("channel.cycle_failed", "a channel reader or drainer cycle raised; the thread carries on"),
    _t("channel.caught_up", "a listener read what was written while nobody listened (threads, accepted)"),
    _t("channel.handler_failed", "handling one pushed message raised; the listener carries on"),
    _t("channel.claim_failed", "a reply could not be claimed (inbox or cursor write): not acknowledged"),
    _t("channel.reply_received", "an authorized reply was claimed into the inbox (kind, channel, thread, message)"),
    _t("channel.created", "a kickoff message opened a new work item, bound to its thread (repository, outcome)"),
    _t("channel.create_failed", "a kickoff could not open its work item: dropped create-failed"),
    _t("channel.kickoff_asked", "a kickoff naming no usable repository got a repository picker (options: count)"),
    _t("channel.dropped", "a channel message was not taken as input; reason says why (unauthorized-actor, …)"),
    _t("channel.mirrored", "a reply was recorded on the ticket (kind: work-item.reply marked, control.command)"),
    _t("channel.mirror_failed", "recording a reply on the ticket failed"),
    _t("channel.attachments", "files on a delivered reply were fetched or refused (count, fetched, refused)"),
    _t("channel.reaction_failed", "acknowledging a message with a reaction failed; nothing else changes"),
    _t("channel.mirror_skipped", "a message was delivered without a ticket mirror (reason: standing-session)"),
    _t("channel.tell_failed", "a private answer to a message's writer (Slack: ephemeral) could not be sent"),
    _t("workspace.trusted", "the harness's own config was prepared for the spawn directory"),
    _t("workspace.trust_failed", "preparing the harness's config failed; the spawn went ahead"),
    _t("standing.started", "a standing session started with a fresh conversation"),
    _t("standing.resumed", "a standing session started again with its recorded conversation"),
    _t("standing.resume_failed", "a standing session's recorded conversation did not resume; a fresh one starts"),
    _t("standing.spawn_failed", "a standing session did not start (tmux unknown, name held, harness not ready)"),
    _t("standing.stopped", "a standing session's harness ended and its tmux session was killed; record kept"),
    _t("standing.stop_failed", "a standing session's harness or tmux session did not end"),
    _t("standing.said", "text was pasted into a standing session (actor: claimed, audit only)"),
    _t("standing.created", "a standing session was made at run time (standing create): its definition recorded"),
    _t("standing.create_failed", "a created standing session did not start; its record was removed again"),
    _t("standing.deleted", "a created standing session was stopped and its record removed"),
    _t("standing.announced", "a standing session's Slack thread was posted and bound as standing:<name>"),
    _t("standing.announce_failed", "a standing session's Slack thread could not be posted; the session is up"),
    _t("workspace.prepared", "a work item's checkout was made or reused (strategy, checkout, branch)"),
    _t("workspace.cleaned", "a work item's checkout was removed (removed false and error when it could not be)"),
    _t("webterminal.started", "the browser terminal (ttyd on the-loop-hub) was started by an ingress service"),
    _t("webterminal.stopped", "the browser terminal was stopped (killed says whether it needed SIGKILL)"),
    _t("webterminal.refused", "the web terminal's gate refused a request: no or a wrong credential, cross-origin, …"),
    _t("webterminal.failed", "the browser terminal could not be started or exited early; the service runs on"),
    _t("hooks.loaded", "a process loaded the operator's declared lifecycle hooks (hooks, count, config)"),
    _t("hooks.load_failed", "a one-shot command could not load the declared hooks and ran without them"),
    _t("hooks.decided", "a lifecycle hook changed decisions at its point (changed names them)"),
    _t("hooks.failed", "a lifecycle hook raised, timed out or answered badly; nothing of it was applied"),
    _t("hooks.refused", "a lifecycle hook refused at its point (reason)"),
)

SOURCES = ("cli", "gh-webhook", "poller", "poll", "sessions", "service", "channels", "slack-listener", "web")


class _Log:
    def __init__(self) -> None:
        self.path: Path | None = None
        self.source = "cli"
        self.enabled = True
        self.lock = threading.Lock()
        self.warned = False
        self._fd: int | None = None
        self._inode: tuple[int, int] | None = None

    def descriptor(self) -> int:
        """The log, opened for appending once per process; reopened when the file was removed or replaced
        (one ``stat`` a line instead of an open, a mkdir and a close)."""
        assert self.path is not None
        try:
            stat = os.stat(self.path)
            current: tuple[int, int] | None = (stat.st_dev, stat.st_ino)
        except FileNotFoundError:
            current = None
        if self._fd is None or current != self._inode:
            self.close()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            stat = os.fstat(self._fd)
            self._inode = (stat.st_dev, stat.st_ino)
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd, self._inode = None, None


_log = _Log()


def configure(path: Path | None, source: str, *, enabled: bool = True) -> None:
    """Point this process's log at ``path`` (``None`` turns it off). Until called, :func:`emit` does nothing."""
    with _log.lock:
        _log.close()
        _log.path = path
        _log.source = source
        _log.enabled = enabled and path is not None


def configured_path() -> Path | None:
    return _log.path if _log.enabled else None


def timestamp(when: float | None = None) -> str:
    when = time.time() if when is None else when
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(when)) + f".{int(when * 1000) % 1000:03d}Z"


def emit(event: str, level: str = "info", **fields: Any) -> None:
    """Append one event line. Never raises."""
    if not _log.enabled or _log.path is None:
        return
    record: dict[str, Any] = {
        "ts": timestamp(),
        "source": fields.pop("source", None) or _log.source,
        "event": event,
        "level": level if level in LEVELS else "info",
        "pid": os.getpid(),
    }
    record.update((key, value) for key, value in fields.items() if value is not None)
    try:
        text = json.dumps(record, separators=(",", ":"), default=str, ensure_ascii=False) + "\n"
        line = text.encode("utf-8", errors="backslashreplace")  # a lone surrogate must not stop the log
        with _log.lock:
            fd = _log.descriptor()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                os.write(fd, line)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError as exc:
        if not _log.warned:
            _log.warned = True
            print(f"warning: cannot write event log {_log.path}: {exc.strerror}", file=sys.stderr)


# -------------------------------------------------------------------------------------------------- reading


@dataclass
class EventFilter:
    types: tuple[str, ...] = ()
    work_item: str | None = None
    delivery_id: str | None = None
    source: str | None = None
    level: str | None = None
    since: float | None = None

    def matches(self, record: dict[str, Any]) -> bool:
        from fnmatch import fnmatchcase

        if self.types and not any(fnmatchcase(str(record.get("event", "")), p) for p in self.types):
            return False
        if self.work_item is not None:
            items = record.get("work_items")
            if record.get("work_item") != self.work_item and not (isinstance(items, list) and self.work_item in items):
                return False
        if self.delivery_id is not None and record.get("delivery_id") != self.delivery_id:
            return False
        if self.source is not None and record.get("source") != self.source:
            return False
        if self.level is not None:
            level = record.get("level") if record.get("level") in LEVELS else "info"
            if LEVELS.index(level) < LEVELS.index(self.level):
                return False
        if self.since is not None:
            when = parse_instant(str(record.get("ts", "")))
            if when is None or when < self.since:
                return False
        return True


def parse_instant(text: str) -> float | None:
    """An ISO-8601 instant (``Z`` or an offset; naive means UTC) as epoch seconds, or None."""
    from datetime import datetime

    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: ``<n>s|m|h|d`` ago, or an ISO-8601 instant. Raises ValueError otherwise."""
    import re

    now = time.time() if now is None else now
    match = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if match:
        return now - int(match[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
    instant = parse_instant(text.strip())
    if instant is None:
        raise ValueError(f"--since: {text!r} is neither <n>s|m|h|d nor an ISO-8601 time")
    return instant


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """A stored line as an object, or None for a partial, non-JSON or non-object line."""
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def read_events(path: Path, flt: EventFilter, limit: int = 0) -> list[tuple[bytes, dict[str, Any]]]:
    """The matching records (raw line, parsed), oldest first; the newest ``limit`` when ``limit`` > 0."""
    from collections import deque

    found: deque[tuple[bytes, dict[str, Any]]] = deque(maxlen=limit or None)
    try:
        handle = path.open("rb")
    except (FileNotFoundError, IsADirectoryError):
        return []
    with handle:
        for raw in handle:
            record = parse_line(raw)
            if record is not None and flt.matches(record):
                found.append((raw.rstrip(b"\n"), record))
    return list(found)


def follow(path: Path, flt: EventFilter, interval: float = 0.2) -> Iterable[tuple[bytes, dict[str, Any]]]:
    """Yield matching records appended after this call; follows truncation and a replaced file."""
    # Take the starting point now, not on the first next(): a line appended in between must not be lost.
    try:
        stat = path.stat()
        position, inode = stat.st_size, stat.st_ino
    except FileNotFoundError:
        position, inode = 0, None
    return _follow(path, flt, interval, position, inode)


def _follow(
    path: Path, flt: EventFilter, interval: float, position: int, inode: int | None
) -> Iterable[tuple[bytes, dict[str, Any]]]:
    pending = b""
    while True:
        with contextlib.suppress(FileNotFoundError):
            stat = path.stat()
            if stat.st_ino != inode or stat.st_size < position:
                inode, position, pending = stat.st_ino, 0, b""
            if stat.st_size > position:
                with path.open("rb") as handle:
                    handle.seek(position)
                    chunk = handle.read()
                position += len(chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    record = parse_line(raw)
                    if record is not None and flt.matches(record):
                        yield raw, record
        time.sleep(interval)
