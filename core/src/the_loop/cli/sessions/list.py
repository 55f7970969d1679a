"""``the-loop sessions list``: what this machine's registry holds (read-only, in-process)."""

from __future__ import annotations

import sys

import click

from the_loop.cli.sessions._fleet import fleet_rows, fleet_view
from the_loop.command import app, print_json

COLUMNS = ("Work item", "Harness", "Model", "Session id", "Tmux", "Status", "Control", "Spend", "Last event")


@click.command(name="list")
@click.option("--status", type=click.Choice(["active", "paused", "closed"]), help="Only sessions in this state.")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_context
def list_sessions(ctx: click.Context, status: str | None, output_format: str) -> None:
    """List every registered session, one row per endpoint (a work item's own and its pull requests').

    An active session whose tmux pane has exited or is gone shows as ``down``: the next event respawns it. A pull
    request with no session of its own (its events reach the work item's) shows as ``bound``. A session waiting
    at a decision prompt shows as ``blocked``, one quiet for ``routing.stuck.idleMinutes`` as ``idle``, one its
    budget paused as ``paused (budget)``, and a work item waiting for a slot (``routing.capacity``) as
    ``queued (position N)``."""
    from the_loop.sessions.listing import session_rows

    config = app(ctx).config(source="sessions")
    fleet, silent = fleet_view(config), False
    if fleet:
        rows, silent = fleet_rows(config, status)  # every worker's, asked over NATS
    else:
        rows = session_rows(config, status)
    if output_format == "json":
        print_json(rows)
        sys.exit(1 if silent else 0)
    columns = ("Worker", *COLUMNS) if fleet else COLUMNS
    table = [
        (
            *((row["worker"],) if fleet else ()),
            row["endpoint"] if row["endpoint"] == row["workItem"] else f"  {row['endpoint']}",  # under its work item
            row["harness"],
            f"{row['model']} ({row['effort']})" if row["effort"] else row["model"],
            row["harnessSessionId"],
            row["tmuxTarget"],
            row["status"],
            row["control"],
            row["spend"],
            row["lastEventAt"] or "",
        )
        for row in rows
    ]
    cells = [columns, *[tuple(value or "-" for value in row) for row in table]]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(columns))]
    for row in cells:
        click.echo("  ".join(str(value).ljust(width) for value, width in zip(row, widths, strict=True)).rstrip())
    if not rows:
        click.echo("(no registered sessions)", err=True)
    if silent:  # a silent worker is named above: what it holds is not listed, so this is no success
        sys.exit(1)
