"""``the-loop standing create NAME``: make a standing session at run time (its record is its definition)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from the_loop.cli.standing._common import check_name, finish
from the_loop.cli.standing.start import OK
from the_loop.command import app


@click.command()
@click.argument("name", callback=check_name)
@click.option("--harness", default=None, help="The harness (default: routing.defaultHarness, else claude).")
@click.option("--cwd", default=None, help="Where it runs; must exist (default: routing.spawnWorkdir).")
@click.option("--prompt", default="", help="The operator's brief, appended to the fixed directive.")
@click.option(
    "--prompt-file", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Read the brief from a file."
)
@click.option("--description", default="", help="One line saying what it is for.")
@click.option("--harness-arg", "harness_args", multiple=True, help="A launch argument (repeatable; default: inherit).")
@click.option("--slack", is_flag=True, help="Announce it in a Slack thread whose replies reach it.")
@click.option("--slack-channel", default="", help="The conversation id of that thread (default: channels.slack).")
@click.option("--no-auto-start", is_flag=True, help="`the-loop start` leaves it alone.")
@click.option("--no-start", is_flag=True, help="Record it without starting it.")
@click.pass_context
def create(
    ctx: click.Context,
    name: str,
    harness: str | None,
    cwd: str | None,
    prompt: str,
    prompt_file: Path | None,
    description: str,
    harness_args: tuple[str, ...],
    slack: bool,
    slack_channel: str,
    no_auto_start: bool,
    no_start: bool,
) -> None:
    """Record standing session NAME and start it; a start that fails leaves no record behind."""
    from the_loop.standing import inherit
    from the_loop.standing.control import create as create_one

    if prompt and prompt_file:
        raise click.UsageError("give --prompt or --prompt-file, not both")
    if prompt_file is not None:
        try:
            prompt = prompt_file.read_text(encoding="utf-8")  # a created session's record holds the brief itself
        except OSError as exc:
            hint = "--prompt-file"
            raise click.BadParameter(f"cannot read {prompt_file}: {exc.strerror or exc}", param_hint=hint) from None
    config = app(ctx).config(source="standing")
    definition = inherit(
        config,
        name,
        declared=False,
        harness=harness,
        harness_args=harness_args or None,
        cwd=cwd,
        description=description,
        prompt=prompt,
        auto_start=not no_auto_start,
        slack_enabled=slack,
        slack_channel=slack_channel,
    )
    try:
        rows = create_one(config, definition, start_now=not no_start)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    finish(rows, ("created", *OK))
