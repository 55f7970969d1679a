"""Ending sessions: the one close path, and the two removers built on it (reset and cleanup).

- :func:`close_session` — registry ``closed``, then the tmux session kept (its harness ended first, so a finished work
  item leaves a readable record rather than a live TUI) or killed, per ``routing.tmux.keepSessionOnClose``. Used by
  ``sessions stop`` and ``sessions close`` now, and by ticket closures and keywords.
- :func:`reset` — for a work item that must start over: a live session is closed through the close path, the local
  record deleted, every portable section cleared (what was asked and seen, the pull requests' poll ledgers, the
  conversation threads, how it ended: a clean wipe), the poll clock dropped, the checkout removed unless
  ``routing.workspace.keepCheckoutOnClose``. ``dry_run`` computes the same list and changes nothing.
- :func:`cleanup` — for a work item that is over: every endpoint's tmux session killed (harness ended first), the
  checkout removed and the local record deleted, whatever the keep settings say; the portable record is kept, with
  ``cleanup`` as its last control command (an ended item's stamp first gets its ``terminal`` record, while the
  checkout is still there). Nothing remote is touched.

Every function holds the work item's dispatch lock (``local/locks/<slug>.dispatch.lock``), so a close never races a
delivery or a spawn. Only ``loop-…`` tmux targets are ever signalled or killed.

The disarming rule: a work item whose last control command is one of :data:`DISARMING` (``stop``, ``cleanup``) is
never first-spawned by an event (the dispatcher drops such a spawn as ``awaiting-start``), and an event without
``spawn`` never spawns anyway. An explicit ``sessions start`` records ``start`` first, which re-arms it.
"""

from __future__ import annotations

from the_loop.sessions.closing.common import (
    DISARMING,
    RESET_SECTIONS,
    CleanupReport,
    CloseResult,
    EndpointClose,
    ResetReport,
    running_services,
)
from the_loop.sessions.closing.reset import cleanup, reset
from the_loop.sessions.closing.teardown import close_session
from the_loop.sessions.closing.upstream import EndedReport, pull_request_ended, work_item_ended, work_item_reopened

__all__ = [
    "DISARMING",
    "RESET_SECTIONS",
    "CleanupReport",
    "CloseResult",
    "EndedReport",
    "EndpointClose",
    "ResetReport",
    "cleanup",
    "close_session",
    "pull_request_ended",
    "reset",
    "running_services",
    "work_item_ended",
    "work_item_reopened",
]
