"""``the-loop models list``: the declared models and efforts, with each harness's recorded verdict and its age."""

from __future__ import annotations

import click

from the_loop.command import FORMAT_OPTION, app, print_json


@click.command("list")
@FORMAT_OPTION
@click.pass_context
def list_models(ctx: click.Context, output_format: str) -> None:
    """List the declared models and effort levels with each harness's recorded verdict (ok, refused, unknown) and
    its age, from local/model-verdicts.json; measures nothing (the-loop models check does)."""
    from the_loop.cli.models._common import age, line, widths
    from the_loop.sessions import models

    config = app(ctx).config(source="models")
    rows = models.listing(config)
    if output_format == "json":
        print_json(
            {
                "config": str(config.ref.path),
                "file": str(config.state.model_verdicts_path),
                "models": config.core.models,
                "effort": config.core.effort,
                "harnesses": sorted(models.harnesses(config)),
                "verdicts": rows,
            }
        )
        return
    declared = (
        f"models: {', '.join(config.core.models) or '(none)'}; effort: {', '.join(config.core.effort) or '(none)'}"
    )
    click.echo(f"declared in {config.ref.path}: {declared}")
    size = widths([(row["harness"], row["name"], row["verdict"] or "-") for row in rows])
    for row in rows:
        if row["verdict"] is None:
            note = "never checked"
        else:
            note = f"checked {age(row['ageSeconds'])} ago{', stale' if row['stale'] else ''}"
        if row["args"] is None:
            note += "; this harness takes no such choice"
        click.echo(line(row["harness"], row["kind"], row["name"], row["verdict"] or "-", note, size))
    if any(row["stale"] for row in rows):
        click.echo("some verdicts are missing or stale: the-loop models check measures them", err=True)
