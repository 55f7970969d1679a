"""``the-loop hooks points``: every lifecycle point, its context type, facts and decisions, from the code."""

from __future__ import annotations

import json

import click

from the_loop.command import FORMAT_OPTION, print_json


@click.command()
@FORMAT_OPTION
def points(output_format: str) -> None:
    """List the lifecycle points: when each fires, its facts and its decisions with their defaults."""
    from the_loop.hooks.lifecycle import CONTEXTS

    rows = [
        {
            "point": point,
            "context": cls.__name__,
            "fires": cls.fires,
            "facts": list(cls.fact_names()),
            "decisions": cls.decision_defaults(),
            "summary": cls.effect,
        }
        for point, cls in CONTEXTS.items()
    ]
    if output_format == "json":
        print_json({"points": rows})
        return
    for row in rows:
        decisions = ", ".join(f"{name}={json.dumps(value)}" for name, value in row["decisions"].items())
        click.echo(f"{row['point']}  ({row['context']})")
        click.echo(f"  fires: {row['fires']}")
        click.echo(f"  facts: {', '.join(row['facts'])}")
        click.echo(f"  decisions: {decisions}  — {row['summary']}")
