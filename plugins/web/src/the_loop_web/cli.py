"""``the-loop web``: access tokens for the web control plane, and a one-time login link for this machine's operator."""

from __future__ import annotations

import getpass
import sys
from typing import TYPE_CHECKING

import click

from the_loop import events
from the_loop.command import FORMAT_OPTION, app, print_json

if TYPE_CHECKING:
    from the_loop.interfaces import Config
    from the_loop_web.tokens import TokenStore


def store_of(config: Config) -> TokenStore:
    from the_loop_web.plugin import TOKENS_FILE
    from the_loop_web.tokens import TokenStore

    return TokenStore(config.state.root / TOKENS_FILE, config.state.lock_for("web-tokens"))


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


@click.group()
def web() -> None:
    """The web control plane: `token create|list|revoke`, and `open` for a login link."""


@web.group()
def token() -> None:
    """Named access tokens, each with a role: viewer (read, read-only terminal) or operator (actions, typing)."""


@token.command()
@click.argument("name")
@click.option("--role", type=click.Choice(["viewer", "operator"]), required=True, help="What the token may do.")
@click.pass_context
def create(ctx: click.Context, name: str, role: str) -> None:
    """Create a token NAME and print it alone on stdout, once: only its hash is kept."""
    from the_loop_web.tokens import TokenError

    config = app(ctx).config(source="cli")
    try:
        secret = store_of(config).create(name, role)
    except TokenError as exc:
        _fail(str(exc))
    events.emit("web.token_created", name=name, role=role)
    click.echo(secret)
    if sys.stderr.isatty():
        click.echo(f"created {role} token {name!r}: it is shown this once", err=True)


@token.command(name="list")
@FORMAT_OPTION
@click.pass_context
def list_tokens(ctx: click.Context, output_format: str) -> None:
    """List the tokens: name, role, when created (never a token)."""
    from the_loop_web.tokens import TokenError

    config = app(ctx).config(source="cli")
    try:
        rows = store_of(config).listing()
    except TokenError as exc:
        _fail(str(exc))
    if output_format == "json":
        print_json(rows)
        return
    if not rows:
        click.echo("(no tokens: create one with the-loop web token create NAME --role viewer|operator)", err=True)
        return
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        click.echo(f"{row['name'].ljust(width)}  {row['role'].ljust(8)}  {row['createdAt']}")


@token.command()
@click.argument("name")
@click.pass_context
def revoke(ctx: click.Context, name: str) -> None:
    """Revoke token NAME: requests with it, and logins made with it, are refused from now on."""
    from the_loop_web.tokens import TokenError

    config = app(ctx).config(source="cli")
    try:
        found = store_of(config).revoke(name)
    except TokenError as exc:
        _fail(str(exc))
    if not found:
        _fail(f"no token named {name!r}")
    events.emit("web.token_revoked", name=name)
    click.echo(f"revoked {name}")


@web.command(name="open")
@click.option("--role", type=click.Choice(["viewer", "operator"]), default="operator", show_default=True)
@click.pass_context
def open_link(ctx: click.Context, role: str) -> None:
    """Print a login link for this machine's operator: it works once, within ten minutes. The secret is in the
    link's #fragment, which a browser never sends to a server or a proxy's log."""
    from the_loop_web.tokens import LINK_SECONDS, TokenError

    config = app(ctx).config(source="cli")
    settings = config.section("service")
    try:
        user = getpass.getuser()
    except Exception:
        user = "operator"
    try:
        secret = store_of(config).create_link(user, role)  # type: ignore[arg-type]
    except TokenError as exc:
        _fail(str(exc))
    click.echo(f"{settings.url}/login#link={secret}")
    if not settings.enabled:
        click.echo("note: service.enabled is false: start the control plane first (the-loop start)", err=True)
    click.echo(f"(one use, within {LINK_SECONDS // 60} minutes)", err=True)
