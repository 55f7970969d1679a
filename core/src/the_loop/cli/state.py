"""``the-loop state gitignore`` and ``the-loop state paths``: what the-loop writes, and which of it travels.

Both print the declarations (core's and every installed plugin's ``loop_state_paths``) and read no config: they
describe the layout, not one machine's state root.
"""

from __future__ import annotations

import click

from the_loop.command import FORMAT_OPTION, app, print_json


@click.command()
@click.option(
    "--root-dir",
    default=".the-loop",
    show_default=True,
    metavar="PATH",
    help="The state root relative to the .gitignore that will hold the block.",
)
@click.pass_context
def gitignore(ctx: click.Context, root_dir: str) -> None:
    """Print the .gitignore block that ignores every local path and tracks portable/."""
    from the_loop.state import gitignore_block

    root_name = root_dir.strip().strip("/")
    if not root_name or root_name.startswith("!") or "\n" in root_name:
        click.echo(f"error: --root-dir: {root_dir!r} is not a directory relative to the .gitignore", err=True)
        raise SystemExit(2)
    click.echo(gitignore_block(app(ctx).host.state_paths(), root_name=root_name), nl=False)


@click.command()
@FORMAT_OPTION
@click.pass_context
def paths(ctx: click.Context, output_format: str) -> None:
    """List every generated path under state.root: portable or local, who writes it, what it holds, and why."""
    declared = app(ctx).host.state_paths()
    if output_format == "json":
        print_json(
            [
                {"path": p.path, "portable": p.portable, "owner": p.owner, "holds": p.holds, "why": p.why}
                for p in declared
            ]
        )
        return
    rows = [("PATH", "TRAVELS", "OWNER", "HOLDS — WHY")]
    rows += [(p.path, "portable" if p.portable else "local", p.owner, f"{p.holds} — {p.why}") for p in declared]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        click.echo("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[3]]))
