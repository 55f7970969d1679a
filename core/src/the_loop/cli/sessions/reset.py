"""``the-loop sessions reset``: wipe work items' session and control state so they start over."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from the_loop.cli.sessions._common import operator
from the_loop.command import FORMAT_OPTION, app, print_json

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef
    from the_loop.sessions.closing import ResetReport


def _parse_all(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[WorkItemRef]:
    """Every ref, or a usage error for the first bad one — before anything is reset."""
    from the_loop.refs import RefError, parse_ref

    try:
        return list(dict.fromkeys(parse_ref(value) for value in values))
    except RefError as exc:
        raise click.BadParameter(str(exc)) from None


def _print(report: ResetReport, tmux: str) -> None:
    if not report.found:
        click.echo(f"{report.work_item}: nothing recorded")
        return
    dry = report.dry_run
    click.echo(f"{'would reset' if dry else 'reset'} {report.work_item}")
    if report.was_live:
        target = report.live_session or "-"
        how = {"retained": "kept", "killed": "killed", "gone": "already gone"}.get(report.tmux, report.tmux or "ended")
        line = f"  {'would end' if dry else 'ended'} its live session: tmux session {target} {how}"
        if report.tmux == "retained":
            line += f" — read it with: {tmux} attach -r -t {target} (sessions attach no longer finds it)"
        click.echo(line)
    named = [name for name in report.removed if name != "checkout"]
    if named:
        click.echo(f"  {'would remove' if dry else 'removed'}: {', '.join(named)}")
    if "channels" in report.removed:
        click.echo(f"  {'would forget' if dry else 'forgot'} its conversation threads: its next event opens a new one")
    for path in report.checkouts:
        if dry:
            click.echo(f"  would remove the checkout {path} — uncommitted work in it would be lost")
        else:
            click.echo(f"  removed the checkout {path} — uncommitted work in it is gone")


@click.command()
@click.option(
    "--work-item",
    "refs",
    multiple=True,
    metavar="REF",
    callback=_parse_all,
    help="A work item to reset (repeatable).",
)
@click.option("--all", "all_items", is_flag=True, help="Reset every work item this machine has state for.")
@click.option("--dry-run", is_flag=True, help="List what would be removed, and change nothing.")
@FORMAT_OPTION
@click.pass_context
def reset(ctx: click.Context, refs: list[WorkItemRef], all_items: bool, dry_run: bool, output_format: str) -> None:
    """Reset work items: a live session is closed (tmux per keepSessionOnClose), the local record deleted, the
    portable record wiped (control, poll, pullRequests, collaborators, collaborationChannels, channels, lifecycle
    and ended: the file goes), the poll clock dropped, and the checkout removed unless keepCheckoutOnClose. The
    repository is never touched."""
    from the_loop.refs import RefError, parse_ref
    from the_loop.sessions.closing import reset as reset_item
    from the_loop.sessions.tmux import runner_for

    if not refs and not all_items:
        raise click.UsageError("name the work items to reset: --work-item REF (repeatable), or --all")
    if refs and all_items:
        raise click.UsageError("--work-item and --all exclude each other")
    config = app(ctx).config(source="sessions")
    if all_items:
        known = [record.work_item for record in config.registry.records()]
        known += [record["ref"] for record in config.store.list()]
        found = set()
        for text in known:
            try:
                found.add(parse_ref(text))
            except RefError:
                click.echo(f"warning: skipping {text!r}: not a work-item ref", err=True)
        refs = sorted(found, key=str)
    runner = runner_for(config)
    reports = [reset_item(config, ref, dry_run=dry_run, actor=operator(), runner=runner) for ref in refs]
    for warning in dict.fromkeys(w for report in reports for w in report.warnings):
        click.echo(f"warning: {warning}", err=True)
    if output_format == "json":
        print_json([report.to_dict() for report in reports])
        return
    if not reports:
        click.echo("nothing to reset", err=True)
    for report in reports:
        _print(report, " ".join(runner.command_prefix))
