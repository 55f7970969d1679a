"""``the-loop sessions pause``: hold off deliveries to a work item's session; its tmux session is left as it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import COMMENT_OPTION, WORK_ITEM, operator, report
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@COMMENT_OPTION
@click.pass_context
def pause(ctx: click.Context, ref: WorkItemRef, comment: bool) -> None:
    """Pause REF: events are dropped (never replayed) until resume; tmux and the conversation are untouched."""
    from the_loop.sessions import operations

    config = app(ctx).config(source="sessions")
    done = operations.pause(config, ref, source="cli", actor=operator(), comment=comment)
    if done.effect == "paused":
        done.message = f"paused {ref}: events are dropped until `the-loop sessions resume --work-item {ref}`"
    report(done)
    if done.effect == "paused" and done.tmux_target:
        click.echo(f"  tmux session {done.tmux_target} is untouched (attaching still gives you the keyboard)")
