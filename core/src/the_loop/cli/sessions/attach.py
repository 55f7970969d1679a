"""``the-loop sessions attach``: put this terminal on a work item's tmux session."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM, pull_request_of, require_tmux
from the_loop.command import app

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef


@click.command()
@WORK_ITEM
@click.option(
    "--pull-request",
    "pull_request",
    metavar="REF|N",
    help="The session of this pull request of REF instead (one with a session of its own: sessionPerPr).",
)
@click.option("--read-only", is_flag=True, help="Watch without being able to type (tmux attach -r).")
@click.option("--web", is_flag=True, help="Print the web terminal's login link (it carries the credential) instead.")
@click.pass_context
def attach(ctx: click.Context, ref: WorkItemRef, pull_request: str | None, read_only: bool, web: bool) -> None:
    """Attach to REF's session. A closed session is always attached read-only; a paused one stays writable."""
    from the_loop.cli.sessions._fleet import attach_line, fleet_view
    from the_loop.sessions.tmux import runner_for

    config = app(ctx).config(source="sessions")
    record = config.registry.load(str(ref))
    which = str(pull_request_of(ref, pull_request)) if pull_request else str(ref)
    own = record.sessions.get(which) if record else None
    if own is None and fleet_view(config):  # on a fleet's gateway: the item is on a worker, reached over ssh
        line = attach_line(config, which)
        if line is not None:
            click.echo(line)
            return
    if own is None:
        click.echo(f"error: no session recorded for {which}" + (f" on {ref}" if which != str(ref) else ""), err=True)
        sys.exit(1)
    if not own.tmux_target:
        said = (
            f"no tmux session recorded yet for {ref}; its next event starts one"
            if which == str(ref)
            else f"{which} has no tmux session of its own; its events reach {ref}'s session"
        )
        click.echo(f"error: {said}", err=True)
        sys.exit(1)
    if web:
        _print_web_login(config, own.tmux_target)
        return
    if own.status == "closed" and not read_only:
        click.echo(f"note: the session of {which} is closed; attaching read-only", err=True)
        read_only = True
    require_tmux(config)
    runner = runner_for(config)
    state = runner.probe(own.tmux_target)
    if state == "absent":
        click.echo(f"error: tmux session {own.tmux_target} not found (crashed or was killed)", err=True)
        sys.exit(1)
    argv = [*runner.command_prefix, "attach-session", *(["-r"] if read_only else []), "-t", f"={own.tmux_target}"]
    sys.stdout.flush()
    os.execvp(argv[0], argv)


def _print_web_login(config: LoadedConfig, target: str) -> None:
    """The browser terminal is the shared hub session on the same tmux server: open it, then switch to ``target``."""
    from the_loop.daemon.webterminal import login

    found = login(config.state) if config.core.routing.web_terminal.enabled else None
    if found is None:
        click.echo(
            "error: the web terminal is not running (routing.webTerminal.enabled: true, and an ingress service "
            "started: the-loop start)",
            err=True,
        )
        sys.exit(1)
    click.echo(f"open: {found['login']}")
    click.echo(f"then, in it: tmux switch-client -t ={target}")
