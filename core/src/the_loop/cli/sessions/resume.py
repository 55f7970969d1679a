"""``the-loop sessions resume``: deliver events to a paused work item again."""

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
def resume(ctx: click.Context, ref: WorkItemRef, comment: bool) -> None:
    """Resume REF: the next event is delivered again (those dropped while paused are not replayed)."""
    from the_loop.sessions import operations

    config = app(ctx).config(source="sessions")
    report(operations.resume(config, ref, source="cli", actor=operator(), comment=comment))
