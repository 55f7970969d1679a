"""``the-loop sessions stop``: end a work item's session the way its closing would, and disarm it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import COMMENT_OPTION, WORK_ITEM, operator, report
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
    from the_loop.sessions import operations

    config = app(ctx).config(source="sessions")
    done = operations.stop(config, ref, source="cli", actor=operator(), comment=comment)
    if output_format == "json":
        print_json(done.result.to_dict())
    report(done, lambda: print_close(done.result), quiet=output_format == "json")
