"""What the close path, reset, cleanup and the upstream endings share: the disarming rule, the reports, the
dispatch lock and the runner."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from the_loop.refs import RefError, WorkItemRef, parse_ref
from the_loop.sessions.tmux import TmuxRunner
from the_loop.state import locked
from the_loop.state.registry import SessionRecord
from the_loop.state.slugs import work_item_lock

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

# Portable sections a reset clears (seed 004: a clean wipe): what was asked (control, lifecycle), seen (poll, and
# each pull request's poll ledger), who and where (collaborators, collaborationChannels), the conversation opened
# (channels: the next event opens a new thread) and how it ended. Only the identity is left, so the file goes.
RESET_SECTIONS = (
    "control",
    "poll",
    "pullRequests",
    "collaborators",
    "collaborationChannels",
    "channels",
    "lifecycle",
    "ended",
)
DISARMING = ("stop", "cleanup")


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
    terminal_recorded: bool = False  # an ended item's stamp got its terminal record before the checkout went

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
    from the_loop.sessions.tmux import runner_for

    return runner_for(config)


def _ordered(record: SessionRecord, only: str | None = None) -> list[str]:
    """Endpoint refs, pull requests' first and the work item's own last (cleanup's order), or just ``only``."""
    refs = [ref for ref in record.sessions if only is None or ref == only]
    return sorted(refs, key=lambda ref: (ref == record.work_item, ref))


def own_checkouts(record: SessionRecord | None, only: str | None = None) -> list[WorkItemRef]:
    """The pull requests among ``record``'s endpoints (every one, or just ``only``) whose session ran in a checkout
    of its own (issue-260): each is removed with its endpoint, as the work item's is with the work item."""
    if record is None:
        return []
    own = record.own
    found = []
    for name, entry in record.sessions.items():
        if name == record.work_item or (only is not None and name != only) or not entry.cwd:
            continue
        if own is not None and entry.cwd == own.cwd:
            continue  # a binding that ran in the work item's checkout has none to remove
        with contextlib.suppress(RefError):
            found.append(parse_ref(name))
    return found


def running_services(config: LoadedConfig) -> list[str]:
    """Names of the services whose pidfile lock is held right now (a daemon that may write state back)."""
    from the_loop.state import runlock

    running = []
    for spec in config.host.services(config):
        with contextlib.suppress(OSError):
            if runlock.is_held(spec.pidfile):
                running.append(spec.name)
    return running
