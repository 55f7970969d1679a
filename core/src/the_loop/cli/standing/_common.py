"""What the ``standing`` subcommands share: the name argument, lookups and the row printer."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.standing import Definition


def check_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse a malformed name as bad input (exit 2) before anything is looked up."""
    from the_loop.standing import valid_name

    if value is not None and not valid_name(value):
        raise click.BadParameter(f"{value!r} is not a standing-session name ([a-z0-9][a-z0-9-]{{0,39}})")
    return value


def lookup(config: LoadedConfig, name: str) -> Definition:
    """The definition of ``name`` (config first, then a created record), or ``error:`` and exit 1."""
    from the_loop.standing import resolve

    definition = resolve(config, name)
    if definition is None:
        click.echo(f"error: no standing session named {name} (declare it under standingSessions.sessions)", err=True)
        sys.exit(1)
    return definition


def finish(rows: list[dict[str, Any]], ok: tuple[str, ...]) -> None:
    """One line per row; exit 1 when any row's outcome is not in ``ok``."""
    failed = False
    for row in rows:
        line = f"{row['name']}: {row['outcome']}" + (f" ({row['detail']})" if row.get("detail") else "")
        if row["outcome"] in ok:
            click.echo(line)
        else:
            failed = True
            click.echo(f"error: {line}", err=True)
    sys.exit(1 if failed else 0)
