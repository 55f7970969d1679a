"""``the-loop start [SERVICE]...``: start every enabled service detached, one row per service."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from the_loop import __version__
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.daemon.services import Row
    from the_loop.interfaces import ServiceSpec


def chosen_services(ctx: click.Context, names: tuple[str, ...]) -> tuple[LoadedConfig, list[ServiceSpec]]:
    """The loaded config and the named services (every service when none is named); an unknown name exits 2.
    Shared by ``start``, ``stop`` and ``restart``."""
    from the_loop.daemon import services

    application = app(ctx)
    config = application.config()
    try:
        return config, services.select(application.host.services(config), names)
    except services.UnknownService as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


def show(row: Row) -> None:
    for line in row.lines():
        click.echo(line)


@click.command()
@click.argument("names", nargs=-1, metavar="[SERVICE]...")
@click.option(
    "--foreground",
    is_flag=True,
    help="Run the one named SERVICE in this terminal until Ctrl-C (the same as `the-loop daemon run SERVICE`).",
)
@click.pass_context
def start(ctx: click.Context, names: tuple[str, ...], foreground: bool) -> None:
    """Start every enabled service (or only the named ones) detached.

    A service counts as started only once it holds its pidfile lock. Exit 0 unless a service failed or is
    misconfigured."""
    from the_loop.daemon import services

    if foreground:
        if len(names) != 1:
            click.echo("error: --foreground runs exactly one service: the-loop start --foreground SERVICE", err=True)
            sys.exit(2)
        from the_loop import daemon

        sys.exit(daemon.run(app(ctx), names[0], once=False))
    click.echo(f"the-loop {__version__}")
    config, specs = chosen_services(ctx, names)
    rows = []
    for row in services.start_services(config, specs):
        show(row)
        rows.append(row)
    standing_ok = True if names else standing_lifecycle(config, "start")
    sys.exit(0 if services.start_ok(rows) and standing_ok else 1)


def standing_lifecycle(config: LoadedConfig, action: str) -> bool:
    """After the services: start the autoStart standing sessions, or stop every recorded one; a line each."""
    from the_loop.standing.control import start_auto, stop_recorded

    rows = start_auto(config) if action == "start" else stop_recorded(config)
    good = ("started", "resumed", "already-running") if action == "start" else ("stopped", "not-running")
    for row in rows:
        detail = f" ({row['detail']})" if row.get("detail") else ""
        click.echo(f"standing {row['name']}: {row['outcome']}{detail}")
    return all(row["outcome"] in good for row in rows)
