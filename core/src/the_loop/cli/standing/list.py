"""``the-loop standing list``: declared and created standing sessions, with tmux's answer on whether each runs."""

from __future__ import annotations

import click

from the_loop.command import app, print_json


@click.command(name="list")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def list_standing(ctx: click.Context, output_format: str) -> None:
    """List every standing session: declared in config or recorded on this machine."""
    from the_loop.standing.control import listing

    found = listing(app(ctx).config(source="standing"))
    if output_format == "json":
        print_json(found)
        return
    for row in found:
        running = "running" if row["running"] else row["status"]
        click.echo(f"{row['name']}  {row['harness']}  {running}  {row['tmuxTarget']}  {row['description']}".rstrip())
    if not found:
        click.echo("(no standing sessions)", err=True)
