"""Hook implementations only: Starlette, uvicorn and the pages are imported by the service, never here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop import hookimpl
from the_loop.interfaces import CommandSpec, ConfigSection, EventType, GeneratedPath, ServiceSpec

if TYPE_CHECKING:
    from the_loop.interfaces import Config

SERVICE = "service"  # the reference's name for the control plane's process
TOKENS_FILE = "local/web-tokens.json"


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [
        ConfigSection("service", "the_loop_web.config:ServiceSettings"),
        ConfigSection("web", "the_loop_web.config:WebSettings"),
    ]


@hookimpl
def loop_register_commands() -> list[CommandSpec]:
    return [CommandSpec("web", "The web control plane: access tokens, a login link.", "the_loop_web.cli:web")]


@hookimpl
def loop_register_services(config: Config) -> list[ServiceSpec]:
    """The control plane: a service of `the-loop start` when service.enabled (off by default: putting a control
    surface on a port is the operator's decision). Listed only when the config has a service section or its pidfile
    is there (so `stop` still finds one whose section was removed), keeping `status` free of a row for those who
    installed the plugin and never configured it."""
    pidfile = config.state.pidfile(SERVICE)
    if config.raw_at("service") is None and not pidfile.exists():
        return []
    settings = config.section("service")
    problems = []
    if settings.tls.enabled:
        from pathlib import Path

        for key, name in (("certFile", settings.tls.cert_file), ("keyFile", settings.tls.key_file)):
            if not Path(name).expanduser().is_file():
                problems.append(f"service.tls.{key}: {name} is not a readable file")
    return [
        ServiceSpec(
            name=SERVICE,
            enabled=bool(settings.enabled),
            enabled_by="service.enabled",
            pidfile=pidfile,
            logfile=config.state.logfile(SERVICE),
            run="the_loop_web.service:run_service",
            problems=tuple(problems),
            owner="web",
            url=settings.url,
            health="/api/v1/health",
        )
    ]


@hookimpl
def loop_state_paths() -> list[GeneratedPath]:
    return [
        GeneratedPath(
            TOKENS_FILE,
            False,
            "the web control plane's access tokens (name, role, SHA-256 of the token) and one-time login links",
            "credentials of this machine's control plane; a token is never stored, only its hash",
            owner="web",
        ),
    ]


@hookimpl
def loop_event_types() -> list[EventType]:
    return [
        EventType("web.started", "the web control plane listens: url, tls"),
        EventType("web.stopped", "the web control plane stopped"),
        EventType("web.login", "a person logged in to the web control plane: principal, role, how (token or link)"),
        EventType("web.login_failed", "a login was refused: reason, peer (never the token)"),
        EventType("web.login_limited", "logins from one peer are refused for a while: too many failures"),
        EventType("web.logout", "a web session ended: principal"),
        EventType("web.refused", "a request was refused: status, reason, path, peer, principal (never a credential)"),
        EventType("web.error", "a request failed on a bug of the control plane: path, error, at (file:line)"),
        EventType("web.action", "an action through the API: action, work_item, principal, ok, effect"),
        EventType("web.terminal_opened", "a browser terminal attached to a session: work_item, principal, read_only"),
        EventType("web.terminal_closed", "a browser terminal detached: work_item, principal, seconds"),
        EventType("web.token_created", "the-loop web token create: name, role"),
        EventType("web.token_revoked", "the-loop web token revoke: name"),
    ]
