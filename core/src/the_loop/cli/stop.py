"""``the-loop stop [SERVICE]...``: stop every running service, enabled or not, one row per service."""

from __future__ import annotations

import sys

import click

from the_loop.cli.start import chosen_services, show, standing_lifecycle


@click.command()
@click.argument("names", nargs=-1, metavar="[SERVICE]...")
@click.pass_context
def stop(ctx: click.Context, names: tuple[str, ...]) -> None:
    """Stop every running service (or only the named ones), whatever the config says.

    Sends SIGTERM to the process holding each pidfile lock and waits for the lock to clear (30 s, or
    $THE_LOOP_STOP_TIMEOUT); deletes stale pidfiles. Exit 0 iff every service is stopped or was not running."""
    from the_loop.daemon import services

    config, specs = chosen_services(ctx, names)
    rows = []
    for row in services.stop_services(specs):
        show(row)
        rows.append(row)
    # A standing session's record keeps its conversation: the next start resumes it.
    standing_ok = True if names else standing_lifecycle(config, "stop")
    sys.exit(0 if services.stop_ok(rows) and standing_ok else 1)
