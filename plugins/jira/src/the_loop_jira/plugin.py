"""Hook implementations only; the ``jira`` library is imported by the providers, never here."""

from __future__ import annotations

from the_loop import hookimpl
from the_loop.interfaces import ConfigSection


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [
        ConfigSection(
            "integrations.jira",
            "the_loop_jira.config:JiraSettings",
            secrets=("api.emailEnv", "api.tokenEnv", "webhook.secretEnv"),
        )
    ]
