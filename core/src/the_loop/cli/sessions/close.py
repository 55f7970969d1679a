"""``the-loop sessions close``: close a work item's session in the registry and keep or kill its tmux session."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import WORK_ITEM
from the_loop.command import FORMAT_OPTION, app, print_json

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef
    from the_loop.sessions.closing import CloseResult, EndpointClose


def describe(endpoint: EndpointClose, attach: str) -> str:
    """One line saying what a close did to an endpoint's tmux session; ``attach`` is how to read a kept one."""
    target = endpoint.tmux_target
    harness = ""
    if endpoint.harness_ok is True:
        harness = ", its harness ended"
    elif endpoint.harness_ok is False:
        harness = f", but its harness may still run ({endpoint.error})"
    if endpoint.tmux == "retained":
        return f"tmux session {target} kept with its scrollback{harness}; read it with: {attach}"
    if endpoint.tmux == "killed":
        return f"tmux session {target} killed"
    if endpoint.tmux == "gone":
        return f"tmux session {target} was already gone"
    if endpoint.tmux == "none":
        return "no tmux session was recorded"
    return f"warning: {endpoint.error}"


def print_close(result: CloseResult) -> None:
    for endpoint in result.endpoints:
        prefix = "" if endpoint.endpoint == result.work_item else f"{endpoint.endpoint}: "
        read = f"the-loop sessions attach --work-item {result.work_item} (read-only)"
        click.echo(f"  {prefix}{describe(endpoint, read)}")
    for path in result.checkouts_removed:
        click.echo(f"  removed the checkout {path} (uncommitted work in it is gone)")


@click.command()
@WORK_ITEM
@click.option(
    "--keep-tmux/--kill-tmux",
    "keep_tmux",
    default=None,
    help="Keep the tmux session readable (harness ended) or kill it (default: routing.tmux.keepSessionOnClose).",
)
@FORMAT_OPTION
@click.pass_context
def close(ctx: click.Context, ref: WorkItemRef, keep_tmux: bool | None, output_format: str) -> None:
    """Close REF's session: registry closed, tmux kept or killed. Records no control command; keeps the checkout."""
    from the_loop.sessions.closing import close_session

    config = app(ctx).config(source="sessions")
    result = close_session(config, ref, kill_tmux=None if keep_tmux is None else not keep_tmux)
    acted = result.was_live or any(e.tmux == "killed" for e in result.endpoints)
    if output_format == "json":
        print_json(result.to_dict())
    elif acted:
        click.echo(f"closed {ref}" if result.was_live else f"{ref} was already closed")
        print_close(result)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if not acted:
        if output_format != "json":
            click.echo(f"error: {ref} has no live session to close", err=True)
        sys.exit(1)
