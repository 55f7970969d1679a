"""``the-loop sessions stop``: end a work item's session the way its closing would, and disarm it."""

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
    ticket_comment,
)
from the_loop.cli.sessions.close import print_close
from the_loop.command import FORMAT_OPTION, app, print_json

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@COMMENT_OPTION
@FORMAT_OPTION
@click.pass_context
def stop(ctx: click.Context, ref: WorkItemRef, comment: bool, output_format: str) -> None:
    """Stop REF: record `stop` (no event starts it again until `sessions start`), then close its session."""
    from the_loop.sessions.closing import close_session

    config = app(ctx).config(source="sessions")
    record_control(config, ref, "stop")  # first: from here on no event may spawn it
    result = close_session(config, ref, remove_checkout=True)
    control_event(ref, "stop", "stopped" if result.was_live else "no-session")
    if output_format == "json":
        print_json(result.to_dict())
    elif result.was_live:
        click.echo(f"stopped {ref}: session closed; no event starts it again until `the-loop sessions start`")
        print_close(result)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if not result.was_live:
        if output_format != "json":
            click.echo(
                f"error: {ref} has no live session to stop (the stop is recorded in its control state)", err=True
            )
        sys.exit(1)
    if comment:
        ticket_comment(config, ref, f"the-loop: {operator() or 'an operator'} stopped this work item from the CLI.")
