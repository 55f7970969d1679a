"""``the-loop config validate`` and ``the-loop config show``.

``validate`` loads the config the way every command does (core and every installed plugin section), then lists
the keys nobody claims and checks the names of providers against what is installed (decision 8). Exit 0 when
the config is clean, 1 when it loads but has unknown keys, 2 when it cannot be used.

``show`` prints the effective config: every core key with its default filled in, and every plugin section.
Secrets are never in the config (only the names of the variables holding them), so nothing here can print one.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from the_loop.command import FORMAT_OPTION, app, print_json

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


@click.command()
@FORMAT_OPTION
@click.pass_context
def validate(ctx: click.Context, output_format: str) -> None:
    """Check the config; exit 2 on an error, 1 on unknown keys."""
    from the_loop.config import ConfigError
    from the_loop.default_plugins.core import config_problems
    from the_loop.sessions.harness import harness_problems

    context = app(ctx)
    ref = context.config_ref()
    try:
        config = context.config(warn=False)
    except ConfigError as exc:
        if output_format == "json":
            print_json(_report(str(ref.path), None, [], [], [str(exc)]))
        raise

    warnings = [w for w in dict.fromkeys(config.warnings) if not w.startswith("config: unknown key ")]
    problems = config_problems(config)
    warnings += [
        f"{problem} (needed once routing.enabled is true)"
        for problem in harness_problems(config)
        if problem not in problems
    ]

    if output_format == "json":
        print_json(_report(str(ref.path), str(config.state.root), warnings, config.unknown_keys, problems))
    else:
        for warning in warnings:
            click.echo(f"warning: {warning}", err=True)
        for problem in problems:
            click.echo(f"error: {problem}", err=True)
        for key in config.unknown_keys:
            click.echo(f"unknown key: {key}")
        if not problems and not config.unknown_keys:
            click.echo(f"config OK: {ref.path}")
        elif not problems:
            click.echo(f"{ref.path}: {len(config.unknown_keys)} unknown key(s); no core or plugin section claims them")
    if problems:
        sys.exit(2)
    if config.unknown_keys:
        sys.exit(1)


def _report(
    path: str, root: str | None, warnings: list[str], unknown: list[str], problems: list[str]
) -> dict[str, Any]:
    return {
        "ok": not problems and not unknown,
        "configPath": path,
        "stateRoot": root,
        "warnings": warnings,
        "unknownKeys": unknown,
        "problems": problems,
    }


@click.command()
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="Output format; json adds the config's path and state root.",
)
@click.pass_context
def show(ctx: click.Context, output_format: str) -> None:
    """Print the effective config (defaults filled in, no secrets)."""
    config = app(ctx).config()
    effective = effective_config(config)
    if output_format == "json":
        print_json(
            {
                "configPath": str(config.ref.path),
                "configSource": config.ref.source,
                "configExists": config.ref.exists,
                "stateRoot": str(config.state.root),
                "config": effective,
            }
        )
        return
    import yaml

    found = "" if config.ref.exists else " (no such file: defaults only)"
    click.echo(f"# effective config of {config.ref.path} (chosen by {config.ref.source}){found}")
    click.echo(f"# state root: {config.state.root}")
    click.echo(yaml.safe_dump(effective, sort_keys=False, allow_unicode=True), nl=False)


def effective_config(config: LoadedConfig) -> dict[str, Any]:
    """Core's keys with defaults, each plugin section nested at its dotted path, and the state root resolved."""
    data: dict[str, Any] = config.core.model_dump(mode="json", by_alias=True)
    data["state"]["root"] = str(config.state.root)
    for path, section in config.sections.items():
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = section.model_dump(mode="json", by_alias=True) if hasattr(section, "model_dump") else section
    # Round-trip through JSON so YAML output never carries Python-specific tags.
    return json.loads(json.dumps(data, default=str))
