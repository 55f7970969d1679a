"""``the-loop comment``: the agent talks back — a marked comment on its work item, through the ticket provider of
the ref's scheme. Run inside a session, ``--work-item`` defaults to ``$THE_LOOP_WORK_ITEM``.

The comment is then published to the work item's channels as ``comment.agent``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from the_loop.command import app, parse_work_item, print_json

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import TicketProvider
    from the_loop.refs import WorkItemRef


WORK_ITEM = click.option(
    "--work-item",
    "ref",
    required=True,
    envvar="THE_LOOP_WORK_ITEM",
    show_envvar=True,
    metavar="REF",
    callback=parse_work_item,
    help="The work item to post on, e.g. github:octo/repo#15 (a session's environment sets it).",
)


def provider_for(config: LoadedConfig, ref: WorkItemRef) -> TicketProvider:
    """The ticket provider of the ref's scheme, after it validated the ref; exit 2 when none is installed."""
    providers = config.host.ticket_providers()
    provider_cls = providers.get(ref.provider)
    if provider_cls is None:
        installed = ", ".join(sorted(providers)) or "none"
        click.echo(f"error: no ticket provider for {ref.provider}: refs (installed: {installed})", err=True)
        sys.exit(2)
    provider = provider_cls(config)
    provider.validate(ref)
    return provider


def post_marked(config: LoadedConfig, ref: WorkItemRef, text: str) -> str:
    """Post ``text`` self-marked on ``ref``; the new comment's id. A failed call is one ``error:`` line, exit 1."""
    provider = provider_for(config, ref)
    try:
        return provider.post_comment(ref, provider.mark(text))
    except Exception as exc:
        from the_loop.command import describe_error

        if describe_error(exc) is not None:
            raise  # a config problem (no token): main prints it and exits 2
        click.echo(f"error: could not comment on {ref}: {exc}", err=True)
        sys.exit(1)


def _read_body(body: str | None, body_file: str | None) -> str:
    if (body is None) == (body_file is None):
        raise click.UsageError("give exactly one of --body and --body-file")
    if body_file is not None:
        try:
            body = sys.stdin.read() if body_file == "-" else Path(body_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read {body_file}: {exc}", param_hint="--body-file") from None
    assert body is not None
    if not body.strip():
        raise click.BadParameter("the comment is empty", param_hint="--body/--body-file")
    return body


@click.command()
@WORK_ITEM
@click.option("--body", metavar="TEXT", help="The comment (Markdown).")
@click.option("--body-file", metavar="PATH", help="Read the comment from PATH (UTF-8), or from stdin when PATH is -.")
@click.pass_context
def comment(ctx: click.Context, ref: WorkItemRef, body: str | None, body_file: str | None) -> None:
    """Post a comment on the work item, marked as the-loop's own (so it never comes back as input). Prints
    {"workItem", "commentId"} as JSON."""
    text = _read_body(body, body_file)
    config = app(ctx).config()
    comment_id = post_marked(config, ref, text)
    from the_loop import channels

    channels.publish(config, "comment.agent", ref, text=text, source="agent")
    print_json({"workItem": str(ref), "commentId": comment_id})
