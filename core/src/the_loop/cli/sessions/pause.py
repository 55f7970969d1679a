"""``the-loop sessions pause``: hold off deliveries to a work item's session; its tmux session is left as it is."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import (
    COMMENT_OPTION,
    WORK_ITEM,
    control_event,
    operator,
    record_control,
    set_status,
    ticket_comment,
)
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@COMMENT_OPTION
@click.pass_context
def pause(ctx: click.Context, ref: WorkItemRef, comment: bool) -> None:
    """Pause REF: events are dropped (never replayed) until resume; tmux and the conversation are untouched."""

    config = app(ctx).config(source="sessions")
    record_control(config, ref, "pause")  # recorded even with no session: the operator's intent outlives it
    record = config.registry.load(str(ref))
    own = record.own if record else None
    if own is None or not own.live:
        control_event(ref, "pause", "no-session")
        click.echo(f"error: {ref} has no live session to pause (the pause is recorded in its control state)", err=True)
        sys.exit(1)
    if own.status == "paused":
        control_event(ref, "pause", "noop")
        click.echo(f"{ref} is already paused")
        return
    set_status(config, ref, "paused")
    control_event(ref, "pause", "paused", tmux_target=own.tmux_target or None)
    click.echo(f"paused {ref}: events are dropped until `the-loop sessions resume --work-item {ref}`")
    if own.tmux_target:
        click.echo(f"  tmux session {own.tmux_target} is untouched (attaching still gives you the keyboard)")
    if comment:
        ticket_comment(config, ref, f"the-loop: {operator() or 'an operator'} paused this work item from the CLI.")
