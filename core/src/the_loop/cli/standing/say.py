"""``the-loop standing say``: paste text into a running standing session (never starts one)."""

from __future__ import annotations

import click

from the_loop.cli.standing._common import check_name, finish, lookup
from the_loop.command import app


@click.command()
@click.option("--text", required=True, help="What to say.")
@click.option("--actor", default="", help="Who is speaking (recorded for audit; not authentication).")
@click.argument("name", callback=check_name)
@click.pass_context
def say(ctx: click.Context, text: str, actor: str, name: str) -> None:
    """Paste TEXT into standing session NAME, framed with its name and the actor."""
    from the_loop.cli.sessions._common import operator
    from the_loop.standing.control import say_to

    if not text.strip():
        raise click.BadParameter("empty text", param_hint="--text")
    config = app(ctx).config(source="standing")
    lookup(config, name)
    finish([say_to(config, name, text, actor or operator())], ("said",))
