"""``the-loop standing delete NAME``: stop a created standing session and remove its record."""

from __future__ import annotations

import sys

import click

from the_loop.cli.standing._common import check_name, finish
from the_loop.command import app


@click.command()
@click.argument("name", callback=check_name)
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Stop NAME, then remove its record (a declared session is removed from the config instead)."""
    from the_loop.standing.control import delete as delete_one

    config = app(ctx).config(source="standing")
    try:
        rows = delete_one(config, name)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except LookupError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    finish(rows, ("stopped", "not-running", "deleted"))
