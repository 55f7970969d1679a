"""``the-loop hooks list``: the ``hooks:`` declaration as the daemon would read it, strictly, importing nothing."""

from __future__ import annotations

import sys

import click

from the_loop.command import FORMAT_OPTION, app, print_json


@click.command("list")
@FORMAT_OPTION
@click.pass_context
def list_hooks(ctx: click.Context, output_format: str) -> None:
    """List the declared lifecycle hooks; exit 1 when the declaration is refused."""
    from the_loop.config import read_yaml
    from the_loop.config.hooks import HookDeclarationError, check_declaration, listing
    from the_loop.config.models import HookEntry

    path = app(ctx).config_ref().path
    try:
        raw = check_declaration(read_yaml(path), path)
    except HookDeclarationError as exc:
        if output_format == "json":
            print_json({"config": str(path), "hooks": [], "error": str(exc)})
        else:
            click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    rows = listing([HookEntry.model_validate(item) for item in raw.get("hooks") or []], path)
    if output_format == "json":
        print_json({"config": str(path), "hooks": rows})
        return
    if not rows:
        click.echo(f"no lifecycle hooks declared (hooks: in {path})")
        return
    click.echo(f"lifecycle hooks declared in {path}, asked in this order after the plugins':")
    for row in rows:
        flags = [flag for flag, on in (("required", row["required"]), ("disabled", not row["enabled"])) if on]
        points = ", ".join(row["on"]) if row["on"] is not None else "every point it handles"
        click.echo(f"{row['name']}  {row['kind']} {row['target']}{'  [' + ', '.join(flags) + ']' if flags else ''}")
        click.echo(f"  on: {points}")
        if row["kind"] == "url":
            click.echo(f"  timeout: {row['timeoutSeconds']:g}s  token: {row['tokenEnv'] or '(none)'}")
        elif row["executor"]:
            click.echo(f"  executor: {row['executor']}")
