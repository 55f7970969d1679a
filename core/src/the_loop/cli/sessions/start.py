"""``the-loop sessions start``: arm a work item and spawn its session now, in this process."""

from __future__ import annotations

import sys
import uuid
from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import (
    COMMENT_OPTION,
    WORK_ITEM,
    control_event,
    operator,
    record_control,
    require_tmux,
    set_status,
    ticket_comment,
    watch_lines,
)
from the_loop.command import app
from the_loop.control import arming_refusal

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@COMMENT_OPTION
@click.pass_context
def start(ctx: click.Context, ref: WorkItemRef, comment: bool) -> None:
    """Arm REF and start its session (resume it if paused). Exit 0 once the session is registered."""
    from the_loop import events
    from the_loop.models import WorkEvent
    from the_loop.sessions.dispatcher import Dispatcher

    config = app(ctx).config(source="sessions")
    record = config.registry.load(str(ref))
    own = record.own if record else None
    if own is not None and own.status in ("active", "paused"):
        record_control(config, ref, "start")
        if own.status == "paused":
            set_status(config, ref, "active")
            control_event(ref, "start", "resumed")
            click.echo(f"resumed {ref} (tmux session {own.tmux_target or 'not spawned yet'})")
        else:
            control_event(ref, "start", "noop")
            click.echo(f"{ref} already has a session: {own.tmux_target or '(no tmux session yet)'}")
        for line in watch_lines(config, ref):
            click.echo(f"  {line}")
        return
    require_tmux(config)  # before anything is recorded: a start that cannot spawn arms nothing
    refusal = arming_refusal(config, ref)
    if refusal is not None:
        events.emit("control.rejected", work_items=[str(ref)], command="start", actor=operator(), reason=refusal)
        click.echo(f"error: {refusal}", err=True)
        sys.exit(1)
    record_control(config, ref, "start")
    event = WorkEvent(
        delivery_id=f"cli-start-{uuid.uuid4()}",
        work_item=str(ref),
        text=f"{operator() or 'An operator'} started this work item from the command line (the-loop sessions start).",
        spawn=True,
        source="cli",
        actor=operator(),
    )
    outcome = Dispatcher(config).dispatch(event)  # asks work_item_start once for this arming (lifecycle hooks)
    if outcome.reason == "hook-refused":
        refusal = f"a lifecycle hook refused the start: {outcome.error or 'no reason given'}"
        events.emit("control.rejected", work_items=[str(ref)], command="start", actor=operator(), reason=refusal)
        click.echo(f"error: {refusal}", err=True)
        sys.exit(1)
    if not outcome.ok:
        control_event(ref, "start", "failed", error=outcome.error or outcome.reason)
        click.echo(f"error: could not start {ref}: {outcome.error or outcome.reason}", err=True)
        sys.exit(1)
    control_event(ref, "start", "started", tmux_target=outcome.tmux_target)
    click.echo(f"started {ref} in tmux session {outcome.tmux_target}")
    for line in watch_lines(config, ref):
        click.echo(f"  {line}")
    if comment:
        ticket_comment(config, ref, f"the-loop: {operator() or 'an operator'} started this work item from the CLI.")
