"""``the-loop models check``: measure which declared models and efforts each harness accepts, and record it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from the_loop.command import FORMAT_OPTION, app, print_json

if TYPE_CHECKING:
    from the_loop.sessions.models import VerdictRow


@click.command("check")
@click.option("--harness", metavar="NAME", help="Check this harness only (default: every one a session can run on).")
@click.option("--force", is_flag=True, help="Measure every verdict again, not only the stale ones.")
@FORMAT_OPTION
@click.pass_context
def check(ctx: click.Context, harness: str | None, force: bool, output_format: str) -> None:
    """Measure, for each harness, whether it accepts each declared model and effort level, and record the verdicts
    in local/model-verdicts.json; one line per verdict. A verdict is measured again when it is older than 24 hours
    or the harness's arguments for it changed. Exit 1 when no installed harness can host a session."""
    from the_loop.sessions import models
    from the_loop.sessions.harness import HarnessError

    config = app(ctx).config(source="models")
    try:
        names = sorted(models.harnesses(config, harness))
    except HarnessError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    rows = models.check(config, harness=harness, force=force)
    if output_format == "json":
        print_json(
            {
                "config": str(config.ref.path),
                "file": str(config.state.model_verdicts_path),
                "harnesses": names,
                "verdicts": [{**row.to_json(), "measured": row.measured} for row in rows],
            }
        )
    elif names:
        _print(rows, str(config.ref.path))
    if not names:
        click.echo("error: no installed harness adapter can host a session, so nothing was checked", err=True)
        sys.exit(1)


def _print(rows: list[VerdictRow], config_path: str) -> None:
    from the_loop.cli.models._common import age, line, widths
    from the_loop.sessions.models import _now

    if not rows:
        click.echo(f"nothing to check: no models or effort declared (models:, effort: in {config_path})", err=True)
        return
    now = _now()
    size = widths([(row.harness, row.name, row.verdict) for row in rows])
    for row in rows:
        note = "measured" if row.measured else f"kept (checked {age(now - row.checked_at)} ago)"
        click.echo(line(row.harness, row.kind, row.name, row.verdict, note, size))
