"""``the-loop status``: which services run, from their locks alone; read-only and fast."""

from __future__ import annotations

import sys

import click

from the_loop.command import FORMAT_OPTION, app, print_json


@click.command()
@FORMAT_OPTION
@click.pass_context
def status(ctx: click.Context, output_format: str) -> None:
    """Show the config and state in use, then each service: running or not, enabled or not, and the poller's
    heartbeat. Writes nothing, starts nothing.

    Exit 0 iff every enabled service runs; 1 otherwise; 2 when the config cannot load."""
    from the_loop.daemon import services

    application = app(ctx)
    config = application.config()
    report = services.status_report(config, application.host.services(config))
    if output_format == "json":
        print_json(report)
    else:
        for line in services.format_status(report, config.ref.exists):
            click.echo(line)
    sys.exit(0 if report["ok"] else 1)
