"""A work item's ``pullRequests`` rows in its ``work-item-state.json``: the repository's record of which pull requests
deliver it (seed 004).

Two writers, and only these: ``the-loop sessions link-pr`` mints a row (:func:`link`, ``linkedBy: session``, since
issue-370 the only source of one — the router's binding writes only the session record), and the daemon's one close
path writes a recorded row's upstream ``state`` when its pull request merges or closes (:func:`ended`). Neither
infers a row from a branch name or a closing keyword, and neither touches a row it did not find.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.sessions import choices
from the_loop.state.registry import now_iso
from the_loop.state.store import provider_url
from the_loop.state.work_item_state import PullRequestRow, WorkItemState, state_dir

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

STATES = {"pr-merged": "merged", "pr-closed": "closed"}  # a close reason → the row's upstream state


def row_for(config: LoadedConfig, work_item: WorkItemRef, pull_request: WorkItemRef) -> PullRequestRow:
    """The row ``sessions link-pr`` writes: the pull request's facts, its ``stateDir`` derived, ``open``."""
    return PullRequestRow(
        ref=str(pull_request),
        repository=pull_request.repository.lower(),
        number=pull_request.number,
        url=provider_url(pull_request, config) or "",
        state_dir=state_dir(work_item, pull_request),
        state="open",
        linked_at=now_iso(),
        linked_by="session",
    )


def link(config: LoadedConfig, work_item: WorkItemRef, pull_request: WorkItemRef, *, actor: str = "") -> str:
    """Add ``pull_request``'s row to the work item's file, idempotently: ``added``; ``present`` when a row for it is
    there already (left as it is, nothing written); ``no-checkout`` when the work item has no checkout on this machine
    to write it in; ``refused`` when its repository is not one the operator binds (a read would skip the row). Logs
    ``graph.pull_request_linked`` for a new row. Raises what the write raises (an unwritable checkout)."""
    if not choices.allowed(config).repository(pull_request.repository):
        return "refused"
    if choices.state_path(config, work_item) is None:
        return "no-checkout"
    if choices.current(config, work_item).pull_request(str(pull_request)) is not None:
        return "present"  # read first: a second run writes nothing at all
    added = False

    def edit(state: WorkItemState) -> WorkItemState:
        nonlocal added
        if state.pull_request(str(pull_request)) is not None:
            return state
        added = True
        return replace(state, pull_requests=(*state.pull_requests, row_for(config, work_item, pull_request)))

    choices.change(config, work_item, edit)
    if not added:
        return "present"
    events.emit(
        "graph.pull_request_linked",
        work_item=str(work_item),
        pull_request=str(pull_request),
        linked_by="session",
        actor=actor or None,
    )
    return "added"


def ended(config: LoadedConfig, work_item: WorkItemRef, pull_request: str, reason: str) -> None:
    """A recorded pull request merged or closed: write its row's ``state`` (``merged``, ``closed``). Nothing when no
    row records it, or it says so already; never raises — the close goes on without it (logged)."""
    state = STATES.get(reason)
    if state is None:
        return
    try:
        row = choices.current(config, work_item).pull_request(pull_request)
        if row is None or row.state == state:
            return

        def edit(current: WorkItemState) -> WorkItemState:
            rows = tuple(replace(r, state=state) if r.ref == pull_request else r for r in current.pull_requests)
            return replace(current, pull_requests=rows)

        choices.change(config, work_item, edit)
    except Exception as exc:  # a checkout gone or unwritable must not stop the close
        events.emit(
            "graph.pull_request_state",
            level="warning",
            work_item=str(work_item),
            pull_request=pull_request,
            state=state,
            error=f"{type(exc).__name__}: {exc}",
        )
        return
    events.emit("graph.pull_request_state", work_item=str(work_item), pull_request=pull_request, state=state)
