"""``the-loop sessions interrupt``: stop a session's current turn (its conversation kept), then say what next."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, operator, report, require_tmux
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.option("--text", default="", help="What the session does instead: delivered as its next turn.")
@click.pass_context
def interrupt(ctx: click.Context, ref: WorkItemRef, text: str) -> None:
    """Press the harness's own interrupt in REF's session (Claude Code: Escape), then deliver TEXT as the next
    turn. A paused or stopped session is left alone (exit 1)."""
    from the_loop.sessions import operations

    config = app(ctx).config(source="sessions")
    require_tmux(config)
    report(operations.interrupt(config, ref, text, source="cli", actor=operator()))
