"""``sessions list`` and ``sessions attach`` on a fleet's gateway: every worker's sessions, asked over NATS."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


def fleet_view(config: LoadedConfig) -> bool:
    """Whether this machine shows the fleet: a gateway (or both) with ``fleet.nats.servers`` set."""
    return config.core.fleet.enabled and config.core.instance.role != "worker"


def _gathered(config: LoadedConfig, request: dict[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """The workers' answers; a silent worker is named on stderr (and makes the command exit 1 at its end)."""
    from the_loop.fleet.connection import FleetError
    from the_loop.routing.views import gather

    try:
        answers, silent, live = gather(config, request)
    except FleetError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    timeout = config.core.fleet.ask_timeout_seconds
    for name in silent:
        why = f"did not answer within {timeout:g}s" if name in live else "has items but no heartbeat"
        click.echo(f"warning: worker {name} {why}", err=True)
    return answers, silent, live


def fleet_rows(config: LoadedConfig, status: str | None) -> tuple[list[dict[str, Any]], bool]:
    """Every answering worker's session rows, each stamped with its worker, and whether one was silent (the
    caller prints what came and exits 1)."""
    answers, silent, _live = _gathered(config, {"what": "sessions", "status": status or ""})
    rows = [{**row, "worker": name} for name, answer in sorted(answers.items()) for row in answer.get("sessions", [])]
    return rows, bool(silent)


def attach_line(config: LoadedConfig, work_item: str) -> str | None:
    """The ``ssh -t`` line that attaches to ``work_item``'s session on the worker that has it; None when the fleet
    does not know the item."""
    import shlex

    from the_loop.fleet import shared
    from the_loop.fleet.ask import ask

    fleet = shared(config.core.fleet)
    assignment = fleet.assignments.get(work_item)
    if assignment is None:
        return None
    worker = fleet.workers.get(assignment.worker)
    if worker is None:
        click.echo(f"error: {work_item} is on worker {assignment.worker}, which has no heartbeat", err=True)
        sys.exit(1)
    reply = ask(fleet.nats, [worker.name], {"what": "sessions"}, config.core.fleet.ask_timeout_seconds)[worker.name]
    rows = (reply or {}).get("answer", {}).get("sessions", []) if (reply or {}).get("ok") else None
    if rows is None:
        click.echo(f"error: worker {worker.name} did not answer", err=True)
        sys.exit(1)
    target = next((row["tmuxTarget"] for row in rows if row["endpoint"] == work_item and row["tmuxTarget"]), "")
    if not target:
        click.echo(f"error: worker {worker.name} has no tmux session recorded for {work_item}", err=True)
        sys.exit(1)
    argv = ["ssh", "-t", worker.host or worker.name, *(worker.tmux or ("tmux",)), "attach-session", "-t", f"={target}"]
    return shlex.join(argv)
