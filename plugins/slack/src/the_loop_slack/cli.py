"""``the-loop channels …`` commands of the Slack plugin: status, poll, listen, threads.

Nothing here prints a token: only the names of the variables that hold them and whether they are set.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from the_loop.command import FORMAT_OPTION, app, parse_work_item, print_json, undelivered_note


def _channel(ctx: click.Context) -> Any:
    from the_loop_slack.channel import SlackChannel

    return SlackChannel(app(ctx).config())


@click.command("status")
@click.option("--probe", is_flag=True, help="Also ask Slack: auth.test and conversations.info on the channel.")
@FORMAT_OPTION
@click.pass_context
def status(ctx: click.Context, probe: bool, output_format: str) -> None:
    """Show the Slack channel's resolved settings, token presence, bound threads and undelivered backlog.
    Exit 1 when --probe finds a problem."""
    from the_loop.interfaces import ChannelError
    from the_loop.toolkit import channels
    from the_loop.toolkit import outbox as channel_outbox

    channel = _channel(ctx)
    config = channel.config
    settings = channel.settings
    report: dict[str, Any] = {
        "enabled": bool(settings.enabled),
        "channel": settings.channel,
        "apiBaseUrl": settings.api_base_url,
        "readMode": channel.read_mode(),
        "subscribe": list(settings.subscribe),
        "publish": list(settings.publish),
        "maxChars": channel.max_chars(),
        "tokens": {
            "bot": {"env": settings.bot_token_env, "set": bool(os.environ.get(settings.bot_token_env))},
            "app": {"env": settings.app_token_env, "set": bool(os.environ.get(settings.app_token_env))},
        },
        "posting": "local" if os.environ.get(settings.bot_token_env) else "none",
        "threads": len(channels.bindings(config, "slack")),
        "backlog": channel_outbox.backlog(config.state),
    }
    problems: list[str] = []
    if probe:
        findings: dict[str, Any] = {}
        try:
            client = channel.client()
            auth = channel._call(client.auth_test)
            findings["botUser"] = auth.get("user_id")
            home = channel.home()
            info = channel._call(client.conversations_info, channel=home)
            findings["channelId"] = (info.get("channel") or {}).get("id", home)
            problems.extend(f"missing scope {scope}" for scope in channel.missing_scopes())
        except ChannelError as exc:
            problems.append(str(exc))
        report["probe"] = {**findings, "problems": problems}
    if output_format == "json":
        print_json(report)
    else:
        tokens = report["tokens"]
        click.echo(f"enabled     {report['enabled']}")
        click.echo(f"channel     {report['channel'] or '(none)'}  via {report['apiBaseUrl']}")
        click.echo(f"read        {report['readMode']}")
        click.echo(f"subscribe   {', '.join(report['subscribe']) or '(nothing)'}")
        for which in ("bot", "app"):
            state = "set" if tokens[which]["set"] else "unset"
            click.echo(f"{which} token   {tokens[which]['env']} {state}")
        click.echo(f"threads     {report['threads']}")
        backlog = report["backlog"]
        click.echo(f"undelivered {backlog['count'] if backlog else 0}")
        if probe:
            for problem in problems:
                click.echo(f"problem     {problem}")
            if not problems:
                click.echo("probe       ok")
    sys.exit(1 if problems else 0)


@click.command("poll")
@FORMAT_OPTION
@click.pass_context
def poll(ctx: click.Context, output_format: str) -> None:
    """Run one read cycle over every bound Slack thread now. Exit 1 when skipped (Slack off, or read.mode is not
    poll)."""
    from the_loop.toolkit import channels, standing_sink

    channel = _channel(ctx)
    if not channel.enabled(channel.config) or channel.read_mode() != "poll":
        click.echo("skipped: channels.slack is not enabled with read.mode: poll", err=True)
        sys.exit(1)
    counts = channels.read_cycle(channel.config, channel, standing_sink(channel.config))
    if output_format == "json":
        print_json(counts)
    else:
        click.echo(" ".join(f"{key}={value}" for key, value in counts.items()))
    note = undelivered_note(channel.config) if counts.get("accepted") else None
    if note:
        click.echo(note, err=True)


@click.command("listen")
@click.pass_context
def listen(ctx: click.Context) -> None:
    """Run the Socket Mode listener in the foreground (what `the-loop start` runs as slack-listener when
    channels.slack.read.mode is socket). Exit 1 when another listener holds slack-listener.pid."""
    from the_loop.toolkit import run_in_foreground

    channel = _channel(ctx)
    if not channel.enabled(channel.config) or channel.settings.read.mode != "socket":
        click.echo(
            "error: the listener needs channels.slack.enabled: true and channels.slack.read.mode: socket", err=True
        )
        sys.exit(2)
    sys.exit(run_in_foreground(app(ctx), "slack-listener"))


@click.command("threads")
@click.option("--work-item", "ref", metavar="REF", callback=parse_work_item, help="Only this work item.")
@FORMAT_OPTION
@click.pass_context
def threads(ctx: click.Context, ref: Any, output_format: str) -> None:
    """List the work items' Slack threads (channel, thread, origin, permalink). Exit 1 when there are none."""
    from the_loop.toolkit import channels

    config = app(ctx).config()
    found = [
        {"workItem": item, **bound}
        for item, bound in channels.bindings(config, "slack")
        if ref is None or item == str(ref)
    ]
    if output_format == "json":
        print_json(found)
    else:
        for row in found:
            click.echo(f"{row['workItem']}  {row['channel']}  {row['thread']}  {row.get('origin', '')}")
    sys.exit(0 if found else 1)
