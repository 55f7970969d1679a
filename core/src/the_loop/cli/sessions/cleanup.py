"""``the-loop sessions cleanup``: release a finished work item's local resources, keeping its portable record."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, operator
from the_loop.command import FORMAT_OPTION, app, print_json

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.option(
    "--comment/--no-comment",
    default=None,
    help="Also post a marked comment on the work item saying it was cleaned up (default: routing.cleanup.comment, "
    "off: cleanup touches nothing remote).",
)
@FORMAT_OPTION
@click.pass_context
def cleanup(ctx: click.Context, ref: WorkItemRef, comment: bool | None, output_format: str) -> None:
    """Clean up REF: kill every endpoint's tmux session (harness ended first), remove its checkout and delete its
    local record, whatever the keep settings say; keep its portable record, with `cleanup` as its last control
    command so no event spawns it again. Touches nothing remote unless --comment (or routing.cleanup.comment) asks
    for a comment on the ticket. Exit 1 when a step failed."""
    from the_loop.sessions import operations

    config = app(ctx).config(source="sessions")
    done = operations.cleanup(config, ref, source="cli", actor=operator(), comment=comment)
    report = done.result
    if output_format == "json":
        print_json(report.to_dict())
    elif not report.found:
        click.echo(f"cleaned up {ref}: nothing was left on this machine (recorded cleanup as its control command)")
    else:
        click.echo(f"cleaned up {ref}")
        if report.terminal_recorded:
            click.echo("  recorded its ending from the checkout first (ended.terminal)")
        for item in report.removed:
            if item.startswith("tmux:"):
                click.echo(f"  killed tmux session {item.removeprefix('tmux:')} (its harness ended first)")
            elif item == "checkout":
                click.echo("  removed its checkout (uncommitted work in it is gone)")
            elif item == "session":
                click.echo("  deleted its local session record")
        click.echo("  kept its portable record; its control command is now cleanup")
    for warning in done.warnings:
        prefix = "error" if warning.startswith("cleanup of ") else "warning"
        click.echo(f"{prefix}: {warning}", err=True)
    if not done.ok:
        sys.exit(1)
