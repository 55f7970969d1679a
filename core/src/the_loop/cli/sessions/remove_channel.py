"""``the-loop sessions remove-channel``: undeclare one work item's room; its conversation goes back to the central
channel at the next update."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, run_grant

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command("remove-channel")
@WORK_ITEM
@click.argument("channel", metavar="TYPE@ID")
@click.pass_context
def remove_channel(ctx: click.Context, ref: WorkItemRef, channel: str) -> None:
    """Undeclare CHANNEL for REF: messages there no longer reach it."""
    run_grant(ctx, ref, "remove-channel", channel)
