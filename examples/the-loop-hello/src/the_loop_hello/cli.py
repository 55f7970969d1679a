"""The ``the-loop hello`` command."""

from __future__ import annotations

import click

from the_loop import events
from the_loop.command import app


@click.command()
@click.argument("name")
@click.pass_context
def hello(ctx: click.Context, name: str) -> None:
    """Greet NAME with the configured greeting, and log it."""
    config = app(ctx).config()
    settings = config.section("hello")
    for _ in range(settings.times):
        click.echo(f"{settings.greeting}, {name}")
    events.emit("hello.said", name_length=len(name))
