"""``the-loop sessions remove-collaborator``: take someone off one work item's collaborators."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, run_grant
from the_loop.cli.sessions.add_collaborator import as_tokens

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command("remove-collaborator")
@WORK_ITEM
@click.argument("people", nargs=-1, required=True, metavar="LOGIN...")
@click.pass_context
def remove_collaborator(ctx: click.Context, ref: WorkItemRef, people: tuple[str, ...]) -> None:
    """Take LOGIN off REF's collaborators: their comments are dropped at the ingress again."""
    run_grant(ctx, ref, "remove-collaborator", as_tokens(people))
