"""``the-loop doctor jira``: whether the Jira configuration is usable, offline (J31). Names env vars, never values."""

from __future__ import annotations

import os
import sys

import click

from the_loop.command import app


def _set(names: list[str]) -> bool:
    return any(os.environ.get(name, "").strip() for name in names)


def report_lines(config: object) -> tuple[list[str], bool]:
    """The report and whether it found a problem (``[!]``)."""
    from the_loop_jira.ticketing import settings_of

    raw = config.raw_at("integrations.jira")  # type: ignore[attr-defined]
    if not isinstance(raw, dict) or not raw:
        return ["[?] integrations.jira is not configured"], False
    settings = settings_of(config)  # type: ignore[arg-type]
    lines: list[str] = []
    if not settings.site:
        lines.append("[!] integrations.jira.site is not set")
    else:
        lines.append(
            f"[ok] {settings.site} ({settings.deployment}) → {settings.server()}, REST v{settings.rest_version}"
        )
    wanted = [("integrations.jira.api.tokenEnv", settings.api.token_env)]
    if settings.cloud:
        wanted.insert(0, ("integrations.jira.api.emailEnv", settings.api.email_env))
    for key, names in wanted:
        if not names:
            lines.append(f"[!] {key} names no variable")
        elif _set(names):
            lines.append(f"[ok] {' or '.join(names)} is set")
        else:
            lines.append(f"[!] {' or '.join(names)} is not set ({key})")
    secret = settings.webhook.secret_env
    if secret:
        state = "is set: /jira-webhook answers" if _set([secret]) else "is not set: /jira-webhook answers 404"
        lines.append(f"[ok] {secret} {state}")
    if not settings.projects:
        lines.append("[!] integrations.jira.projects is empty")
    for key, project in settings.projects.items():
        lines.append(f"[ok] {key} → {project.repository}" if project.repository else f"[ok] {key} → mirror-only")
    return lines, any(line.startswith("[!]") for line in lines)


@click.command()
@click.pass_context
def jira(ctx: click.Context) -> None:
    """Check the Jira configuration without contacting Jira: site and server, each credential variable (named,
    never printed), and each project's GitHub repository.

    Exit 0 when usable (or not configured); 1 when any line is a problem."""
    lines, problem = report_lines(app(ctx).config())
    for line in lines:
        click.echo(line)
    sys.exit(1 if problem else 0)
