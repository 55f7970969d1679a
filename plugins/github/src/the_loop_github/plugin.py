"""Hook implementations only; PyGithub is imported by the providers, never here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from the_loop import hookimpl
from the_loop.interfaces import ConfigSection, EventType

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import TicketProvider


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [ConfigSection("integrations.github", "the_loop_github.config:GitHubSettings", secrets=("api.tokenEnv",))]


@hookimpl
def loop_register_ingresses(config: LoadedConfig) -> list[Any]:
    if not config.core.webhooks.gh_webhook.enabled:
        return []
    from the_loop_github.webhook import GitHubWebhook

    return [GitHubWebhook(config)]


@hookimpl
def loop_register_ticketing() -> list[type[TicketProvider]]:
    from the_loop_github.ticketing import GitHubTicketProvider

    return [GitHubTicketProvider]


@hookimpl
def loop_event_types() -> list[EventType]:
    return [
        EventType("webhook.received", "a GitHub delivery was verified and parsed (gh_event, action, delivery_id)"),
        EventType("webhook.rejected", "a GitHub delivery was refused: invalid-signature, invalid-payload, …"),
        EventType("reaction.added", "a reaction was put on a GitHub comment or issue (kind, repository, id)"),
        EventType("reaction.failed", "a reaction could not be put on GitHub (reason, error); nothing else changes"),
    ]
