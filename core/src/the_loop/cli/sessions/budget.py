"""``the-loop sessions budget``: raise a work item's budget (``routing.budgets``), as ``the-loop budget`` does."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, operator, report
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.argument("amount")
@click.pass_context
def budget(ctx: click.Context, ref: WorkItemRef, amount: str) -> None:
    """Add AMOUNT to REF's budget: +5usd (the currency of routing.budgets.currency), +200000tokens, +50k tokens,
    +30min or +2h. A session its budget paused resumes once every measure is under its limit again."""
    from the_loop.sessions import operations

    report(operations.raise_budget(app(ctx).config(source="sessions"), ref, amount, source="cli", actor=operator()))
