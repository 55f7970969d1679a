"""``the-loop daemon run SERVICE [--once]``: one service in the foreground (what ``start`` spawns)."""

from __future__ import annotations

import sys

import click

from the_loop.command import app


@click.command()
@click.argument("service")
@click.option("--once", is_flag=True, help="One cycle (poller) or start-then-stop (HTTP server), then exit.")
@click.pass_context
def run(ctx: click.Context, service: str, once: bool) -> None:
    """Run SERVICE in this process until SIGTERM/SIGINT: the systemd (Type=simple) and cron form.

    Exit 0 after a clean stop; 1 when it cannot start (misconfigured, lock held, missing tmux); 2 for an
    unknown service or a config that cannot load."""
    from the_loop import daemon

    sys.exit(daemon.run(app(ctx), service, once=once))
