"""``the-loop standing attach NAME``: put this terminal on a standing session's tmux session."""

from __future__ import annotations

import os
import sys

import click

from the_loop.cli.standing._common import check_name, lookup
from the_loop.command import app


@click.command()
@click.argument("name", callback=check_name)
@click.option("--read-only", is_flag=True, help="Watch without being able to type (tmux attach -r).")
@click.pass_context
def attach(ctx: click.Context, name: str, read_only: bool) -> None:
    """Attach to standing session NAME (loop-standing-NAME)."""
    from the_loop.cli.sessions._common import require_tmux
    from the_loop.sessions.tmux import runner_for

    config = app(ctx).config(source="standing")
    target = lookup(config, name).target
    require_tmux(config)
    runner = runner_for(config)
    if runner.probe(target) in ("absent", "unknown"):
        click.echo(f"error: {target} is not running; start it with: the-loop standing start {name}", err=True)
        sys.exit(1)
    argv = [*runner.command_prefix, "attach-session", *(["-r"] if read_only else []), "-t", f"={target}"]
    sys.stdout.flush()
    os.execvp(argv[0], argv)
