"""``the-loop doctor github``: whether the GitHub setup in the config works, asked of GitHub itself.

The token (where it came from, whose it is, its scopes), each configured repository (readable, issues on, comments
allowed), the arming label on each (``--create-label`` creates a missing one), the poller's last cycle when the
poller polls GitHub, the webhook route's secret when the receiver is on, and, while routing is on, the harness the
sessions run (installed and starting). Every finding has its remedy; exit 1 on
any. Names variables, never values.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from the_loop.command import app
from the_loop_github import checks
from the_loop_github.token import find, remedy


def report(config: Any, create_label: bool) -> checks.Report:
    from the_loop_github.ticketing import GitHubTicketProvider

    found = checks.Report()
    provider = GitHubTicketProvider(config)
    settings = provider.settings()
    names = settings.api.token_env
    repositories = [name for name in config.core.repositories if checks.split(name) is not None]
    if not repositories:
        found.problem(
            "repositories is empty", "list the [HOST/]OWNER/REPO to work on (the-loop init --github OWNER/REPO)"
        )
    by_host: dict[str, list[str]] = {}
    for name in repositories:
        host, full_name = checks.split(name)  # type: ignore[misc]
        by_host.setdefault(host, []).append(full_name)
    label = config.core.routing.auto_execute_labels[0] if config.core.routing.auto_execute_labels else ""
    for host, names_on_host in (by_host or {"": []}).items():  # no repositories: the token is still asked about
        token, source = find(names, host)
        base_url = provider.api_base(host)
        if not token:
            found.problem(f"no GitHub token found for {host or 'github.com'}", remedy(names))
            continue
        with checks.client(base_url, token) as client:
            who = checks.token(client, source, base_url, remedy(names), found)
            for full_name in names_on_host if who is not None else []:
                repo = checks.repository(client, full_name, who, found)
                if repo is not None and label:
                    checks.label(
                        repo, label, lambda: create_label, "create it: the-loop doctor github --create-label", found
                    )
    _poller(config, found)
    _webhook(config, found)
    _harness(config, found)
    return found


def _harness(config: Any, found: checks.Report) -> None:
    """While routing is on, the harness its sessions run must be installed and start (as ``init`` checks)."""
    if not config.core.routing.enabled:
        return
    from the_loop.toolkit import harness_findings

    problems = harness_findings(config)
    for finding in problems:
        found.problem(finding.problem, finding.remedy)
    if not problems:
        found.ok(f"the harness {config.core.routing.default_harness} is installed and runs")


def _poller(config: Any, found: checks.Report) -> None:
    polling = config.core.polling
    if not polling.enabled or not any(source.provider == "github" for source in polling.sources):
        return
    from the_loop.toolkit import read_json

    heartbeat = read_json(config.state.poll_status_path)
    cycle = heartbeat.get("lastCycle") if isinstance(heartbeat, dict) else None
    if not isinstance(cycle, dict):
        found.problem("the poller has not finished a cycle yet", "start it: the-loop start (then the-loop status)")
        return
    failed = [scope for scope in cycle.get("scopesFailed") or [] if isinstance(scope, dict)]
    for scope in failed:
        found.problem(
            f"the poller's last cycle ({heartbeat.get('lastCycleAt')}) failed for {scope.get('scope')}: "
            f"{scope.get('error')}",
            "fix what the line says; the next cycle tries again",
        )
    if not failed:
        found.ok(f"the poller's last cycle ({heartbeat.get('lastCycleAt')}) read every repository")


def _webhook(config: Any, found: checks.Report) -> None:
    webhook = config.core.webhooks.gh_webhook
    if not webhook.enabled:
        return
    if webhook.allow_unsigned:
        found.ok(f"the receiver takes unsigned deliveries on {webhook.path} (webhooks.ghWebhook.allowUnsigned)")
    elif os.environ.get(webhook.secret_env):
        found.ok(f"the receiver checks signatures on {webhook.path} with {webhook.secret_env}")
    else:
        found.problem(
            f"{webhook.secret_env} is not set: the receiver refuses every delivery on {webhook.path}",
            f"export {webhook.secret_env} with the secret of the repository's webhook",
        )


@click.command()
@click.option("--create-label", is_flag=True, help="Create the arming label on each repository that lacks it.")
@click.pass_context
def github(ctx: click.Context, create_label: bool) -> None:
    """Check the GitHub setup against GitHub: the token and whose it is, each repository and its arming label, the
    poller's last cycle, the webhook's secret and the harness. Names variables, never values.

    Exit 0 when everything works; 1 when anything does not (each line says how to fix it)."""
    found = report(app(ctx).config(), create_label)
    for line in found.lines:
        click.echo(line)
    sys.exit(1 if found.findings else 0)
