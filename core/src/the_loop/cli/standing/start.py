"""``the-loop standing start [NAME]``: bring one standing session (or every known one) up."""

from __future__ import annotations

import click

from the_loop.cli.standing._common import check_name, finish, lookup
from the_loop.command import app

OK = ("started", "resumed", "already-running")


@click.command()
@click.argument("name", required=False, callback=check_name)
@click.pass_context
def start(ctx: click.Context, name: str | None) -> None:
    """Start NAME, or every declared and created standing session; a recorded conversation is resumed."""
    from the_loop.cli.sessions._common import require_tmux
    from the_loop.sessions.tmux import runner_for
    from the_loop.standing import all_names, resolve
    from the_loop.standing.control import start as start_one

    config = app(ctx).config(source="standing")
    definitions = [lookup(config, name)] if name else [d for n in all_names(config) if (d := resolve(config, n))]
    require_tmux(config)
    runner = runner_for(config)
    finish([start_one(config, runner, definition) for definition in definitions], OK)
