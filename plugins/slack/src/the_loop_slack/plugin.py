"""Hook implementations only; slack-sdk is imported by the providers, never here."""

from __future__ import annotations

from the_loop import hookimpl
from the_loop.interfaces import ConfigSection


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [
        ConfigSection("channels.slack", "the_loop_slack.config:SlackSettings", secrets=("botTokenEnv", "appTokenEnv"))
    ]
