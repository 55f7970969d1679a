"""``the-loop sessions add-channel``: make a Slack room one work item's conversation, as ``the-loop add-channel``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, run_grant

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command("add-channel")
@WORK_ITEM
@click.argument("channel", metavar="TYPE@ID")
@click.option(
    "--listen",
    type=click.Choice(["mentions", "all"]),
    default="mentions",
    show_default=True,
    help="Which messages in the room reach the work item: those mentioning the bot, or all.",
)
@click.option("--note", default="", help="Why, or where it was agreed (kept with the declaration).")
@click.pass_context
def add_channel(ctx: click.Context, ref: WorkItemRef, channel: str, listen: str, note: str) -> None:
    """Declare CHANNEL (slack@C0123ABCD, by id) as REF's conversation: its updates are posted there, top-level,
    and authorized people's messages there reach it. One channel per work item, one work item per channel."""
    run_grant(ctx, ref, "add-channel", f"{channel} --listen {listen}", note)
