"""Hook implementations only; PyGithub is imported by the providers, never here."""

from __future__ import annotations

from the_loop import hookimpl
from the_loop.interfaces import ConfigSection


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [ConfigSection("integrations.github", "the_loop_github.config:GitHubSettings", secrets=("api.tokenEnv",))]
