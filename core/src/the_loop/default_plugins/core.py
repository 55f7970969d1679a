"""Core as a plugin: its event types, state paths, record attributes and services."""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop import hookimpl
from the_loop.interfaces import Attribute, EventType, GeneratedPath, PollSource, ServiceSpec, WebhookIngress

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


@hookimpl
def loop_event_types() -> list[EventType]:
    from the_loop.events import CORE_EVENT_TYPES

    return list(CORE_EVENT_TYPES)


@hookimpl
def loop_state_paths() -> list[GeneratedPath]:
    from the_loop.state import GENERATED_PATHS

    return list(GENERATED_PATHS)


@hookimpl
def loop_record_attributes() -> list[Attribute]:
    from the_loop.state import ATTRIBUTES

    return list(ATTRIBUTES)


def webhook_problems(config: LoadedConfig) -> list[str]:
    """The receiver's: each installed route's own (its secret), or none installed at all."""
    routes = [i for i in config.host.ingresses(config) if isinstance(i, WebhookIngress)]
    if not routes:
        return ["no webhook route is installed (pip install 'the-loop[github]' or 'the-loop[jira]')"]
    return [problem for route in routes for problem in route.problems()] + routing_problems(config)


def poller_problems(config: LoadedConfig) -> list[str]:
    polling = config.core.polling
    if not polling.sources:
        return ["polling.sources is empty: name at least one source (provider and scopes)"]
    sources = {i.name: i for i in config.host.ingresses(config) if isinstance(i, PollSource)}
    installed = set(sources)
    problems = [
        f"polling.sources[{index}].provider: {source.provider!r} has no installed poll source "
        f"(installed: {', '.join(sorted(installed)) or 'none'})"
        for index, source in enumerate(polling.sources)
        if source.provider not in installed
    ]
    for name in dict.fromkeys(source.provider for source in polling.sources):  # a token, repositories … (B R4)
        check = getattr(sources.get(name), "check_dependencies", None)
        problems += list(check()) if callable(check) else []
    return problems + routing_problems(config)


def routing_problems(config: LoadedConfig) -> list[str]:
    """Decision 8, for the routing services: while ``routing.enabled`` they spawn sessions, so the default harness
    must be an installed tmux-hostable adapter. With routing off they only accept and log events."""
    from the_loop.sessions.harness import harness_problems  # start-up speed: core's hooks load with every command

    spawns = config.core.routing.enabled and config.core.instance.role != "gateway"  # a gateway spawns nothing
    return harness_problems(config) if spawns else []


def config_problems(config: LoadedConfig) -> list[str]:
    """What stops the enabled services from running (``config validate`` exits 2 on any): the webhook secret,
    the poll sources and, while ``routing.enabled``, the default harness (decision 8)."""
    core = config.core
    problems: list[str] = []
    if core.webhooks.gh_webhook.enabled:
        problems += webhook_problems(config)
    if core.polling.enabled:
        problems += poller_problems(config)
    problems += routing_problems(config)
    if core.fleet.enabled:
        problems += fleet_problems(config)
    return list(dict.fromkeys(problems))


@hookimpl
def loop_register_services(config: LoadedConfig) -> list[ServiceSpec]:
    layout = config.state
    core = config.core
    services = [
        ServiceSpec(
            name="gh-webhook",
            enabled=core.webhooks.gh_webhook.enabled,
            enabled_by="webhooks.ghWebhook.enabled",
            pidfile=layout.pidfile("gh-webhook"),
            logfile=layout.logfile("gh-webhook"),
            run="the_loop.ingress.server:run_service",
            ingress=True,
            problems=tuple(webhook_problems(config)) if core.webhooks.gh_webhook.enabled else (),
        ),
        ServiceSpec(
            name="poller",
            enabled=core.polling.enabled,
            enabled_by="polling.enabled",
            pidfile=layout.pidfile("poller"),
            logfile=layout.logfile("poller"),
            run="the_loop.ingress.poller:run_service",
            ingress=True,
            problems=tuple(poller_problems(config)) if core.polling.enabled else (),
        ),
    ]
    if core.fleet.enabled:  # only a fleet has it: a single machine's services are what they always were
        services.append(
            ServiceSpec(
                name="fleet-worker",
                enabled=core.instance.role != "gateway",
                enabled_by="instance.role",
                pidfile=layout.pidfile("fleet-worker"),
                logfile=layout.logfile("fleet-worker"),
                run="the_loop.routing.owner:run_service",
                problems=tuple(fleet_problems(config)),
            )
        )
    return services


def fleet_problems(config: LoadedConfig) -> list[str]:
    """What stops a fleet process: a credential variable ``fleet.nats`` names but the environment lacks."""
    from the_loop.fleet.connection import missing_credentials

    return missing_credentials(config.core.fleet.nats)
