"""``the-loop standing stop [NAME]``: end one standing session (or every recorded one), keeping its record."""

from __future__ import annotations

import click

from the_loop.cli.standing._common import check_name, finish
from the_loop.command import app


@click.command()
@click.argument("name", required=False, callback=check_name)
@click.pass_context
def stop(ctx: click.Context, name: str | None) -> None:
    """Stop NAME, or every recorded standing session; the next start resumes the same conversation."""
    from the_loop.sessions.tmux import runner_for
    from the_loop.standing import recorded_names
    from the_loop.standing.control import stop as stop_one

    # Stopping works from the records alone, so a mistake in standingSessions never keeps one running (S8).
    config = app(ctx).config(source="standing", leave_out=("standingSessions",))
    runner = runner_for(config)
    names = [name] if name else recorded_names(config)
    finish([stop_one(config, runner, each) for each in names], ("stopped", "not-running"))
