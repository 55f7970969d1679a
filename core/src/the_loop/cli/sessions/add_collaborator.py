"""``the-loop sessions add-collaborator``: let someone speak to one work item, as ``the-loop add-collaborator``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, run_grant

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


def as_tokens(people: tuple[str, ...]) -> str:
    """``dana`` and ``@dana`` are the same login; ``slack:U0DANA1`` names a Slack member."""
    return " ".join(p if p.startswith(("@", "slack:")) else f"@{p}" for p in people)


@click.command("add-collaborator")
@WORK_ITEM
@click.argument("people", nargs=-1, required=True, metavar="LOGIN...")
@click.option("--note", default="", help="Why, or where it was agreed (kept with the grant).")
@click.pass_context
def add_collaborator(ctx: click.Context, ref: WorkItemRef, people: tuple[str, ...], note: str) -> None:
    """Put LOGIN (a GitHub login, or slack:U… for a Slack member) on REF's collaborators: their comments reach
    its session, and nothing else — no control command, no start, no arming."""
    run_grant(ctx, ref, "add-collaborator", as_tokens(people), note)
