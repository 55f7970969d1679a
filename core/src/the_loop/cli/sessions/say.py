"""``the-loop sessions say``: steer a session without attaching — the text takes the same path an event does."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, operator, report, require_tmux
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.option("--text", required=True, help="What to paste into the session (submitted as one message).")
@click.pass_context
def say(ctx: click.Context, ref: WorkItemRef, text: str) -> None:
    """Deliver TEXT into REF's session (FIFO, dedupe, respawn of a crashed session, as for any event)."""
    from the_loop.sessions import operations

    if not text.strip():
        raise click.BadParameter("nothing to say", param_hint="--text")
    config = app(ctx).config(source="sessions")
    require_tmux(config)
    report(operations.say(config, ref, text, source="cli", actor=operator()))
