"""``the-loop standing restart NAME``: stop one standing session, then start it again with the same conversation."""

from __future__ import annotations

import click

from the_loop.cli.standing._common import check_name, finish, lookup
from the_loop.cli.standing.start import OK
from the_loop.command import app


@click.command()
@click.argument("name", callback=check_name)
@click.pass_context
def restart(ctx: click.Context, name: str) -> None:
    """Stop NAME, then start it again; its recorded conversation is resumed."""
    from the_loop.cli.sessions._common import require_tmux
    from the_loop.standing.control import act

    config = app(ctx).config(source="standing")
    lookup(config, name)
    require_tmux(config)
    finish(act(config, name, "restart"), ("stopped", "not-running", *OK))
