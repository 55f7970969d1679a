"""``the-loop plugins``: every plugin the host found, what it contributes, and any load error.

Services and ingresses depend on the config (a plugin registers only what its section enables), so they are listed
only when the config loads; a plugin that failed to import is shown with its error rather than hidden.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from the_loop.command import FORMAT_OPTION, app, print_json

if TYPE_CHECKING:
    from the_loop.plugins import PluginInfo

# The contribution kinds the host records, in the order they are shown.
KINDS = ("commands", "config sections", "event types", "services", "ingresses", "harnesses", "ticketing", "channels")


@click.command()
@FORMAT_OPTION
@click.pass_context
def plugins(ctx: click.Context, output_format: str) -> None:
    """List installed plugins and what each provides."""
    from the_loop.config import ConfigError

    context = app(ctx)
    host = context.host
    try:
        config = context.config(warn=False)
        host.services(config)  # each records what every plugin contributes on its info
        host.ingresses(config)
    except ConfigError as exc:
        click.echo(f"warning: services and ingresses not listed: {exc}", err=True)
    infos = host.describe()

    if output_format == "json":
        print_json([_as_json(info) for info in infos])
        return
    for info in infos:
        flags = " [built-in]" if info.builtin else ""
        click.echo(f"{info.name}  {info.distribution} {info.version}{flags}  ({info.module})")
        if info.error:
            click.echo(f"  error: {info.error}")
        for kind in KINDS:
            if info.contributions.get(kind):
                names = info.contributions[kind]
                if kind == "harnesses":
                    names = [f"{name} ({_capabilities(info.capabilities.get(name))})" for name in names]
                click.echo(f"  {kind}: {', '.join(names)}")
        if not any(info.contributions.values()) and not info.error:
            click.echo("  (contributes nothing yet)")
    sys.stdout.flush()


def _as_json(info: PluginInfo) -> dict[str, Any]:
    """One plugin as a JSON object: every kind present (empty when it contributes none), camelCase keys."""
    contributions = {kind: info.contributions.get(kind, []) for kind in KINDS}
    contributions.update((kind, names) for kind, names in info.contributions.items() if kind not in KINDS)
    return {
        "name": info.name,
        "distribution": info.distribution,
        "version": info.version,
        "builtin": info.builtin,
        "module": info.module,
        "error": info.error or None,
        "contributions": {_camel(kind): names for kind, names in contributions.items()},
        "capabilities": {
            harness: {_camel(key.replace("_", " ")): value for key, value in flags.items()}
            for harness, flags in info.capabilities.items()
        },
    }


# How each capability reads in the text listing, when it is there and when it is not.
_CAPABILITY_WORDS = {
    "tmux_hostable": ("tmux-hostable", "not tmux-hostable"),
    "preassigned_session_id": ("pre-assigned session id", "no pre-assignable session id"),
    "can_resume": ("can resume", "cannot resume"),
    "can_interrupt": ("can interrupt", "no interrupt"),
    "reports_usage": ("reports usage", "no usage"),
    "recognises_prompts": ("recognises prompts", "no prompts"),
}


def _capabilities(flags: dict[str, bool] | None) -> str:
    if not flags:
        return "capabilities unknown"
    shown = []
    for key, value in flags.items():
        present, absent = _CAPABILITY_WORDS.get(key, (key, f"not {key}"))
        shown.append(present if value else absent)
    return ", ".join(shown)


def _camel(kind: str) -> str:
    first, *rest = kind.split()
    return first + "".join(word.capitalize() for word in rest)
