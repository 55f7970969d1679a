"""``the-loop restart [SERVICE]...``: ``stop``, then ``start``."""

from __future__ import annotations

import sys

import click

from the_loop import __version__
from the_loop.cli.start import chosen_services, show, standing_lifecycle


@click.command()
@click.argument("names", nargs=-1, metavar="[SERVICE]...")
@click.pass_context
def restart(ctx: click.Context, names: tuple[str, ...]) -> None:
    """Stop, then start, every service (or only the named ones). Exit 0 iff both halves are ok."""
    from the_loop.daemon import services

    click.echo(f"the-loop {__version__}")
    config, specs = chosen_services(ctx, names)
    if names:
        sys.exit(0 if services.restart_services(config, specs, show) else 1)
    stopped = standing_lifecycle(config, "stop")  # stop then start: the same conversation is resumed
    ok = services.restart_services(config, specs, show)
    sys.exit(0 if standing_lifecycle(config, "start") and ok and stopped else 1)
