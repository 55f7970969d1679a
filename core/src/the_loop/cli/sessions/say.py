"""``the-loop sessions say``: steer a session without attaching — the text takes the same path an event does."""

from __future__ import annotations

import sys
import uuid
from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, operator, require_tmux
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.option("--text", required=True, help="What to paste into the session (submitted as one message).")
@click.pass_context
def say(ctx: click.Context, ref: WorkItemRef, text: str) -> None:
    """Deliver TEXT into REF's session (FIFO, dedupe, respawn of a crashed session, as for any event)."""
    from the_loop.models import WorkEvent
    from the_loop.sessions.dispatcher import Dispatcher

    if not text.strip():
        raise click.BadParameter("nothing to say", param_hint="--text")
    config = app(ctx).config(source="sessions")
    require_tmux(config)
    event = WorkEvent(
        delivery_id=f"cli-say-{uuid.uuid4()}", work_item=str(ref), text=text, source="cli", actor=operator()
    )
    outcome = Dispatcher(config).dispatch(event)
    if outcome.ok:
        click.echo(f"{outcome.status} to {outcome.tmux_target}")
        return
    if outcome.reason == "no-session":
        click.echo(f"error: {ref} has no session; start it with: the-loop sessions start --work-item {ref}", err=True)
    elif outcome.reason == "session-paused":
        click.echo(f"error: {ref} is paused; resume it with: the-loop sessions resume --work-item {ref}", err=True)
    else:
        click.echo(f"error: not delivered to {ref}: {outcome.error or outcome.reason}", err=True)
    sys.exit(1)
