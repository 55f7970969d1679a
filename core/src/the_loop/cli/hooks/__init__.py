"""``the-loop hooks [list|points]``: the operator's declared lifecycle hooks and the points they can run at.

Both read only the config's ``hooks:`` declaration and the code's catalog of points: no hook is imported and no
remote hook is contacted. Without a subcommand, ``the-loop hooks`` lists the declaration.
"""

from __future__ import annotations

import click

from the_loop.cli.hooks.list import list_hooks
from the_loop.cli.hooks.points import points
from the_loop.command import FORMAT_OPTION


@click.group(invoke_without_command=True)
@FORMAT_OPTION
@click.pass_context
def hooks(ctx: click.Context, output_format: str) -> None:
    """Show the declared lifecycle hooks (the default) or the points they can run at."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_hooks, output_format=output_format)


hooks.add_command(list_hooks)
hooks.add_command(points)
