"""``the-loop sessions list``: what this machine's registry holds (read-only, in-process)."""

from __future__ import annotations

import click

from the_loop.cli._app import app, print_json

COLUMNS = ("Work item", "Harness", "Model", "Session id", "Tmux", "Status", "Control", "Last event")


@click.command(name="list")
@click.option("--status", type=click.Choice(["active", "paused", "closed"]), help="Only sessions in this state.")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_context
def list_sessions(ctx: click.Context, status: str | None, output_format: str) -> None:
    """List every registered session, one row per endpoint (a work item's own and its pull requests')."""
    from the_loop.registry import SessionRegistry
    from the_loop.store import WorkItemStore

    config = app(ctx).config(source="sessions")
    store = WorkItemStore(config.state, config=config)
    rows = []
    for record in SessionRegistry(config.state).records():
        control = ((store.read(record.work_item) or {}).get("control") or {}).get("command", "")
        for ref, endpoint in record.sessions.items():
            if status and endpoint.status != status:
                continue
            rows.append(
                {
                    "workItem": record.work_item,
                    "endpoint": ref,
                    "harness": endpoint.harness,
                    "model": endpoint.model,
                    "effort": endpoint.effort,
                    "harnessSessionId": endpoint.harness_session_id,
                    "tmuxTarget": endpoint.tmux_target,
                    "status": endpoint.status,
                    "control": control,
                    "lastEventAt": endpoint.last_event_at,
                    "cwd": endpoint.cwd,
                    "createdAt": endpoint.created_at,
                }
            )
    if output_format == "json":
        print_json(rows)
        return
    table = [
        (
            row["endpoint"],
            row["harness"],
            f"{row['model']} ({row['effort']})" if row["effort"] else row["model"],
            row["harnessSessionId"],
            row["tmuxTarget"],
            row["status"],
            row["control"],
            row["lastEventAt"] or "",
        )
        for row in rows
    ]
    cells = [COLUMNS, *[tuple(value or "-" for value in row) for row in table]]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(COLUMNS))]
    for row in cells:
        click.echo("  ".join(str(value).ljust(width) for value, width in zip(row, widths, strict=True)).rstrip())
    if not rows:
        click.echo("(no registered sessions)", err=True)
