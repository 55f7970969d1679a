"""``the-loop sessions link-pr``: record by hand that a pull request delivers a work item (issue-274, issue-370).

Two records, each written once and idempotently. The binding in the session record is the one the router records
itself once it delivered a pull request's event into the work item's session (A X7); from then on, events on that
pull request route to the work item by the record, whatever its branch name or body say (X6). The ``pullRequests``
row in the work item's ``work-item-state.json`` (``linkedBy: session``) is written only here
(:mod:`the_loop.sessions.pull_requests`): it is checked in, and a guess in it would be permanent.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from the_loop import events
from the_loop.cli.sessions._common import WORK_ITEM, operator, pull_request_of
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef


ROW_NOTES = {
    "added": "; recorded in its work-item-state.json",
    "no-checkout": "; not recorded in work-item-state.json: the work item has no checkout on this machine",
    "refused": "; not recorded in work-item-state.json: its repository is not one in repositories",
}


@click.command("link-pr")
@WORK_ITEM
@click.option(
    "--pull-request",
    "pull_request",
    required=True,
    metavar="REF|N",
    help="The pull request, e.g. github:octo/repo#20, or 20 for that number in the work item's repository.",
)
@click.pass_context
def link_pr(ctx: click.Context, ref: WorkItemRef, pull_request: str) -> None:
    """Record that PULL_REQUEST delivers REF: its events then reach REF's session, whatever its text says."""
    from the_loop.routing.router import bind_pull_request

    pull = pull_request_of(ref, pull_request)
    config = app(ctx).config(source="sessions")
    registry = config.registry
    record = registry.load(str(ref))
    if record is None or record.own is None:
        click.echo(f"error: {ref} has no session on this machine to link to; start it first", err=True)
        sys.exit(1)
    for other in registry.records():
        if other.work_item != str(ref) and str(pull) in other.sessions and str(pull) != other.work_item:
            click.echo(f"error: {pull} is already linked to {other.work_item}", err=True)
            sys.exit(1)
    bound = bind_pull_request(registry, ref, str(pull))
    if bound:
        events.emit("session.pr_linked", work_item=str(ref), pull_request=str(pull), actor=operator())
    row = _row(config, ref, pull)
    if not bound and row != "added":
        click.echo(f"{pull} is already linked to {ref}")
        return
    click.echo(f"linked {pull} to {ref}: its events now reach {_where(config, ref, pull)}{ROW_NOTES.get(row, '')}")


def _where(config: LoadedConfig, ref: WorkItemRef, pull: WorkItemRef) -> str:
    """Which session the pull request's events reach: its own (sessionPerPr) or the work item's."""
    from the_loop.sessions.endpoints import endpoint_for

    record = config.registry.load(str(ref))
    if endpoint_for(config, ref, str(pull), spawn=False) != str(ref):
        entry = record.sessions.get(str(pull)) if record is not None else None
        return (
            entry.tmux_target
            if entry is not None and entry.tmux_target
            else "a session of its own, made on its next event"
        )
    own = record.own if record is not None else None
    return (own.tmux_target if own is not None else "") or "the work item"


def _row(config: LoadedConfig, ref: WorkItemRef, pull: WorkItemRef) -> str:
    """The ``pullRequests`` row (:func:`the_loop.sessions.pull_requests.link`); exits 1 when it cannot be written."""
    from the_loop.sessions import pull_requests
    from the_loop.state import StateError

    try:
        return pull_requests.link(config, ref, pull, actor=operator())
    except (OSError, StateError) as exc:
        click.echo(
            f"error: {pull} is linked to {ref}, but its work-item-state.json row could not be written: {exc}", err=True
        )
        sys.exit(1)
