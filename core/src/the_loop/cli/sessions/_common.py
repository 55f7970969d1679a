"""What the ``sessions`` subcommands share: the ref option, the operator's identity, control records."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from the_loop import events
from the_loop.command import parse_work_item

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef
    from the_loop.sessions.operations import Done


WORK_ITEM = click.option(
    "--work-item",
    "ref",
    required=True,
    metavar="REF",
    callback=parse_work_item,
    help="The work item, e.g. github:octo/repo#15.",
)


def operator() -> str:
    """Who ran the command: the local user (recorded as the actor of a CLI control command)."""
    try:
        return getpass.getuser()
    except Exception:
        return ""


def record_control(config: LoadedConfig, ref: WorkItemRef, command: str, note: str = "") -> None:
    """Record a control command given on this machine's command line (``source: cli``)."""
    from the_loop.control import record

    record(config, ref, command, source="cli", actor=operator(), note=note)


def control_event(ref: WorkItemRef, command: str, effect: str, **fields: Any) -> None:
    events.emit(
        "control.command", work_item=str(ref), command=command, source="cli", actor=operator(), effect=effect, **fields
    )


def report(done: Done, details: Callable[[], None] | None = None, *, quiet: bool = False) -> None:
    """Print an operation's outcome the CLI way: its line on stdout (then ``details``), or ``error:`` on stderr and
    exit 1; its warnings on stderr. ``quiet`` (a JSON document was printed instead) leaves out both lines."""
    import sys

    if done.ok and not quiet:
        click.echo(done.message)
        if details is not None:
            details()
    elif not done.ok and not quiet:
        click.echo(f"error: {done.message}", err=True)
    for warning in done.warnings:
        click.echo(f"warning: {warning}", err=True)
    if not done.ok:
        sys.exit(1)


def ticket_comment(config: LoadedConfig, ref: WorkItemRef, text: str) -> None:
    """Best-effort: tell the people on the ticket what the operator did; no provider installed → nothing."""
    from the_loop.control import post_marked

    try:
        post_marked(config, ref, text)
    except Exception as exc:
        click.echo(f"warning: could not comment on {ref}: {exc}", err=True)


COMMENT_OPTION = click.option(
    "--comment/--no-comment",
    default=True,
    show_default=True,
    help="Also post a marked comment on the work item saying what was done (when its tracker is installed).",
)


def set_status(config: LoadedConfig, ref: WorkItemRef, status: str) -> bool:
    """Pause or resume the work item's own session; False when there was none to change."""
    from the_loop.control import set_session_status

    return set_session_status(config, ref, status)


def require_tmux(config: LoadedConfig) -> None:
    """For a command that drives tmux in this process: one clear error (exit 2) when tmux is not installed."""
    import shutil
    import sys

    from the_loop.daemon import TMUX_INSTALL
    from the_loop.sessions.tmux import runner_for

    if shutil.which(runner_for(config).binary) is None:
        click.echo(f"error: missing dependency: tmux — {TMUX_INSTALL}", err=True)
        sys.exit(2)


def watch_lines(config: LoadedConfig, ref: WorkItemRef) -> list[str]:
    """Where to watch ``ref``'s session: ``sessions attach``, and the browser terminal when one is running."""
    lines = [f"watch: the-loop sessions attach --work-item {ref} --read-only"]
    if config.core.routing.web_terminal.enabled:
        from the_loop.daemon.webterminal import login

        found = login(config.state)
        if found is not None:
            lines.append(f"in a browser: {found['url']} (log in with the-loop sessions attach --web --work-item {ref})")
    return lines


def pull_request_of(ref: WorkItemRef, value: str) -> WorkItemRef:
    """``--pull-request``: a full ref, or a bare number meaning that number in the work item's repository."""
    from the_loop.refs import RefError, parse_ref

    text = value.strip()
    if text.isascii() and text.isdigit():
        if ref.key_form:
            raise click.BadParameter(f"{ref} has no repository: give the pull request as a full ref")
        text = f"{ref.provider}:{ref.repository}#{int(text)}"
    try:
        pull_request = parse_ref(text)
    except RefError as exc:
        raise click.BadParameter(f"{exc} — or a bare number in {ref}'s repository") from None
    if pull_request.number < 1:
        raise click.BadParameter("a pull request number is 1 or more")
    if pull_request == ref:
        raise click.BadParameter("a work item cannot be its own pull request")
    return pull_request


def run_grant(ctx: click.Context, ref: WorkItemRef, command: str, words: str, note: str = "") -> None:
    """``sessions add-collaborator|remove-collaborator|add-channel|remove-channel``: what the ticket keyword does,
    recorded as the local user (``source: cli``); a refusal is one ``error:`` line and exit 1."""
    from the_loop.command import app
    from the_loop.sessions.grants import grant

    config = app(ctx).config(source="sessions")
    done = grant(config, ref, command, words, by=operator(), source="cli", note=note)
    if done.ok:
        control_event(ref, command, done.effect)
    else:
        events.emit(
            "control.rejected",
            work_items=[str(ref)],
            command=command,
            actor=operator(),
            reason=done.effect,
            source="cli",
        )
    report(done)
