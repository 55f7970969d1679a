"""Hook implementations only; slack-sdk is imported by the channel and the listener, never here."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from the_loop import hookimpl
from the_loop.interfaces import CommandSpec, ConfigSection, EventType, ServiceSpec, SetupSpec

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import Channel


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [
        ConfigSection("channels.slack", "the_loop_slack.config:SlackSettings", secrets=("botTokenEnv", "appTokenEnv"))
    ]


@hookimpl
def loop_register_setup() -> list[SetupSpec]:
    return [
        SetupSpec(
            "slack",
            "CHANNEL",
            "Give each work item a thread in this Slack channel (its id, C…), checked against Slack first.",
            "the_loop_slack.init:slack",
            prompt="Slack channel id for the work items' threads",
            options=(("slack-api-url", "URL", "Slack's Web API for --slack (another Slack-compatible server)."),),
        )
    ]


@hookimpl
def loop_register_channels() -> list[type[Channel]]:
    from the_loop_slack.channel import SlackChannel

    return [SlackChannel]


@hookimpl
def loop_event_types() -> list[EventType]:
    return [
        EventType("channel.scope_missing", "the Slack token lacks scopes the configuration needs (scopes), at connect"),
        EventType("channel.scope_probe_failed", "the listener could not check the Slack token's scopes at connect"),
    ]


@hookimpl
def loop_register_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            "status",
            "Show the Slack channel's settings, tokens (names only) and backlog.",
            "the_loop_slack.cli:status",
            "channels",
        ),
        CommandSpec("poll", "Read every bound Slack thread once now.", "the_loop_slack.cli:poll", "channels"),
        CommandSpec(
            "listen", "Run the Socket Mode listener in the foreground.", "the_loop_slack.cli:listen", "channels"
        ),
        CommandSpec("threads", "List the work items' Slack threads.", "the_loop_slack.cli:threads", "channels"),
    ]


@hookimpl
def loop_register_services(config: LoadedConfig) -> list[ServiceSpec]:
    """The Socket Mode listener: a service of `the-loop start` when channels.slack.read.mode is socket. Listed
    only when the config has a channels.slack section or a listener's pidfile is there (so `stop` still finds
    one whose section was removed), keeping `status` free of a Slack row for those who never configured it."""
    pidfile = config.state.pidfile("slack-listener")
    if config.raw_at("channels.slack") is None and not pidfile.exists():
        return []
    settings = config.section("channels.slack")
    enabled = bool(settings.enabled) and settings.read.mode == "socket"
    problems = []
    if enabled:
        for variable in (settings.bot_token_env, settings.app_token_env):
            if not os.environ.get(variable):
                problems.append(f"the environment variable {variable} is not set")
        if not settings.channel:
            problems.append("channels.slack.channel is empty")
    return [
        ServiceSpec(
            name="slack-listener",
            enabled=enabled,
            enabled_by="channels.slack.enabled and read.mode: socket",
            pidfile=pidfile,
            logfile=config.state.logfile("slack-listener"),
            run="the_loop_slack.listener:run_service",
            problems=tuple(problems),
            owner="slack",
            ingress=True,
        )
    ]
