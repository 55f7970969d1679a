"""Hook implementations only; PyGithub is imported by the providers, never here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from the_loop import hookimpl
from the_loop.interfaces import CommandSpec, ConfigSection, EventType, SetupSpec

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import TicketProvider


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [ConfigSection("integrations.github", "the_loop_github.config:GitHubSettings", secrets=("api.tokenEnv",))]


@hookimpl
def loop_register_setup() -> list[SetupSpec]:
    return [
        SetupSpec(
            "github",
            "[HOST/]OWNER/REPO",
            "Watch this GitHub repository with the poller (no public URL needed), checked against GitHub first.",
            "the_loop_github.init:github",
            prompt="GitHub repository to watch, as OWNER/REPO",
            options=(
                ("api-url", "URL", "GitHub's API for --github: GitHub Enterprise or another compatible server."),
                ("create-label", "", "Create the arming label on the --github repository when it lacks it."),
            ),
        )
    ]


@hookimpl
def loop_register_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            "github",
            "Check the GitHub setup against GitHub (token, repositories, label, poller).",
            "the_loop_github.doctor:github",
            "doctor",
        )
    ]


@hookimpl
def loop_register_ingresses(config: LoadedConfig) -> list[Any]:
    found: list[Any] = []
    if config.core.webhooks.gh_webhook.enabled:
        from the_loop_github.webhook import GitHubWebhook

        found.append(GitHubWebhook(config))
    if any(source.provider == "github" for source in config.core.polling.sources):
        from the_loop_github.poll import GitHubPollSource  # building it is a pure parse: no I/O

        found.append(GitHubPollSource(config))
    return found


@hookimpl
def loop_register_ticketing() -> list[type[TicketProvider]]:
    from the_loop_github.ticketing import GitHubTicketProvider

    return [GitHubTicketProvider]


@hookimpl
def loop_event_types() -> list[EventType]:
    return [
        EventType("reaction.added", "a reaction was put on a GitHub comment or issue (kind, repository, id)"),
        EventType("reaction.failed", "a reaction could not be put on GitHub (reason, error); nothing else changes"),
        EventType("poll.provider_error", "the GitHub poll source could not poll at all (no repositories)"),
        EventType(
            "poll.scope_degraded", "a repository's issue listing is disabled (410): issues skipped for 60 cycles"
        ),
        EventType("poll.scope_recovered", "a quarantined repository's issue listing answers again"),
        EventType("poll.unauthorized", "a polled item's author may not start it, and no start command is recorded"),
        EventType("poll.comment_failed", "a comment's delivery budget (polling.maxRetries) is spent; it is given up"),
        EventType("poll.spawn_failed", "the spawn budget of a polled item is spent (attempts); it is given up"),
        EventType("poll.giveup_reported", "the give-up notice was posted on the polled item (never quoting it)"),
        EventType("poll.giveup_report_failed", "the give-up notice could not be posted; the give-up stands"),
        EventType("poll.rearmed", "comments given up by an older version got a fresh budget (comments, version)"),
        EventType("poll.attempts_released", "at a stop, attempts of comments never delivered were given back"),
        EventType("poll.item_filtered", "a listed item lacks a required arming label (once per change of the set)"),
    ]
