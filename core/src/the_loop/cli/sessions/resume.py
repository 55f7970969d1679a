"""``the-loop sessions resume``: deliver events to a paused work item again."""

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
def resume(ctx: click.Context, ref: WorkItemRef, comment: bool) -> None:
    """Resume REF: the next event is delivered again (those dropped while paused are not replayed)."""
    from the_loop.control import recorded

    config = app(ctx).config(source="sessions")
    record = config.registry.load(str(ref))
    own = record.own if record else None
    pause_recorded = recorded(config, ref) == "pause"
    if not (own is not None and own.status == "paused") and not pause_recorded:
        control_event(ref, "resume", "nothing-to-resume")
        click.echo(f"error: nothing to resume: {ref} is not paused", err=True)
        sys.exit(1)
    record_control(config, ref, "resume")
    if own is not None and own.status == "paused":
        set_status(config, ref, "active")
        control_event(ref, "resume", "resumed", tmux_target=own.tmux_target or None)
        click.echo(f"resumed {ref}: events are delivered to {own.tmux_target or 'its session'} again")
    else:
        control_event(ref, "resume", "recorded")
        click.echo(f"resumed {ref}: the recorded pause is lifted")
    if comment:
        ticket_comment(config, ref, f"the-loop: {operator() or 'an operator'} resumed this work item from the CLI.")
