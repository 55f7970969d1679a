"""``the-loop sessions answer``: answer the decision prompt a session waits at (a tool permission, a selection)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, operator, report, require_tmux
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.argument("option")
@click.pass_context
def answer(ctx: click.Context, ref: WorkItemRef, option: str) -> None:
    """Pick OPTION (its number, or its label's first word) of the prompt REF's session shows, as posted on the
    ticket (`session.blocked`). Nothing is pressed unless that prompt is still on the screen."""
    from the_loop.sessions import operations

    config = app(ctx).config(source="sessions")
    require_tmux(config)
    report(operations.answer_prompt(config, ref, option, source="cli", actor=operator()))
