"""Hook implementations only; the ``jira`` library is imported by the providers, never here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from the_loop import hookimpl
from the_loop.interfaces import CommandSpec, ConfigSection, EventType, SetupSpec

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import TicketProvider


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [
        ConfigSection(
            "integrations.jira",
            "the_loop_jira.config:JiraSettings",
            secrets=("api.emailEnv", "api.tokenEnv", "webhook.secretEnv"),
        )
    ]


@hookimpl
def loop_register_setup() -> list[SetupSpec]:
    return [
        SetupSpec(
            "jira",
            "SITE/PROJECT",
            "Watch this Jira project with the poller (acme.atlassian.net/ENG), checked against Jira first.",
            "the_loop_jira.init:jira",
            prompt="Jira project to watch, as SITE/PROJECT",
            options=(
                ("jira-repository", "OWNER/REPO", "Where the --jira project's code lives (checked out per ticket)."),
                ("jira-server-url", "URL", "Where Jira requests go for --jira, when not the site itself."),
                ("jira-deployment", "KIND", "cloud, cloud-scoped or data-center (default: from the --jira site)."),
            ),
        )
    ]


@hookimpl
def loop_register_ingresses(config: LoadedConfig) -> list[Any]:
    raw = config.raw_at("integrations.jira")
    if not isinstance(raw, dict) or not raw.get("site"):
        return []
    found: list[Any] = []
    if any(source.provider == "jira" for source in config.core.polling.sources):
        from the_loop_jira.poll import JiraPollSource

        found.append(JiraPollSource(config))
    if config.core.webhooks.gh_webhook.enabled and (raw.get("webhook") or {}).get("secretEnv"):
        from the_loop_jira.webhook import JiraWebhook

        found.append(JiraWebhook(config))  # answers 404 while the secret variable is unset (J21)
    return found


@hookimpl
def loop_register_ticketing() -> list[type[TicketProvider]]:
    from the_loop_jira.ticketing import JiraTicketProvider

    return [JiraTicketProvider]


@hookimpl
def loop_register_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            "jira", "Check whether the Jira configuration is usable (offline).", "the_loop_jira.doctor:jira", "doctor"
        )
    ]


@hookimpl
def loop_event_types() -> list[EventType]:
    # webhook.*, poll.comment_forwarded|settled, poll.item_error and poll.closure_detected are core's (every ingress).
    return [
        EventType("jira.doorbell_failed", "a verified Jira doorbell could not be followed up (Jira unreachable, …)"),
        EventType("arm.refused", "a ticket was not armed: mirror (the Jira copy of a GitHub issue)"),
    ]
