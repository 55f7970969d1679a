"""``the-loop sessions list``: what this machine's registry holds (read-only, in-process)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from the_loop.command import app, print_json

if TYPE_CHECKING:
    from the_loop.sessions.tmux import ProbeState

COLUMNS = ("Work item", "Harness", "Model", "Session id", "Tmux", "Status", "Control", "Spend", "Last event")


@click.command(name="list")
@click.option("--status", type=click.Choice(["active", "paused", "closed"]), help="Only sessions in this state.")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.pass_context
def list_sessions(ctx: click.Context, status: str | None, output_format: str) -> None:
    """List every registered session, one row per endpoint (a work item's own and its pull requests').

    An active session whose tmux pane has exited or is gone shows as ``down``: the next event respawns it. A pull
    request with no session of its own (its events reach the work item's) shows as ``bound``. A session waiting
    at a decision prompt shows as ``blocked``, one quiet for ``routing.stuck.idleMinutes`` as ``idle``, one its
    budget paused as ``paused (budget)``, and a work item waiting for a slot (``routing.capacity``) as
    ``queued (position N)``."""
    from the_loop.sessions.standing import steering
    from the_loop.sessions.steering import admission
    from the_loop.sessions.tmux import runner_for

    config = app(ctx).config(source="sessions")
    store = config.store
    panes = runner_for(config).probe_all()  # one tmux call for every row
    line = admission.queued(config)
    rows = []
    for record in config.registry.records():
        control = ((store.read(record.work_item) or {}).get("control") or {}).get("command", "")
        steered = steering(config, record.work_item, record, line)
        # the work item's own first, then its pull requests' (issue-260: some run sessions of their own)
        for ref in sorted(record.sessions, key=lambda name: (name != record.work_item, name)):
            endpoint = record.sessions[ref]
            if status and endpoint.status != status:
                continue
            bound = ref != record.work_item and not (endpoint.tmux_target or endpoint.harness_session_id)
            pane = _pane(panes, endpoint.tmux_target) if endpoint.status == "active" and not bound else None
            shown = "bound" if bound and endpoint.status == "active" else endpoint.status
            own = ref == record.work_item
            shown = _steered(shown, steered if own else {}, ref)
            rows.append(
                {
                    "workItem": record.work_item,
                    "endpoint": ref,
                    "harness": endpoint.harness,
                    "model": endpoint.model,
                    "effort": endpoint.effort,
                    "harnessArgs": list(endpoint.harness_args),
                    "harnessSessionId": endpoint.harness_session_id,
                    "tmuxTarget": endpoint.tmux_target,
                    "status": "down" if pane in ("dead", "absent") else shown,
                    "pane": pane,
                    "control": control,
                    "lastEventAt": endpoint.last_event_at,
                    "cwd": endpoint.cwd,
                    "createdAt": endpoint.created_at,
                    "spend": steered["spend"] if own else "",
                    "usage": steered["usage"] if own else None,
                    "blocked": steered["blocked"] if (steered["blocked"] or {}).get("endpoint") == ref else None,
                    "idle": steered["idle"] if own else None,
                    "queued": None,
                }
            )
    listed = {row["workItem"] for row in rows}
    for work_item, position in line.items():  # waiting for a slot: no session yet (a respawn's row is listed)
        if not status and work_item not in listed:
            rows.append(_queued_row(work_item, position))
    if output_format == "json":
        print_json(rows)
        return
    table = [
        (
            row["endpoint"] if row["endpoint"] == row["workItem"] else f"  {row['endpoint']}",  # under its work item
            row["harness"],
            f"{row['model']} ({row['effort']})" if row["effort"] else row["model"],
            row["harnessSessionId"],
            row["tmuxTarget"],
            row["status"],
            row["control"],
            row["spend"],
            row["lastEventAt"] or "",
        )
        for row in rows
    ]
    cells = [COLUMNS, *[tuple(value or "-" for value in row) for row in table]]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(COLUMNS))]
    for row in cells:
        click.echo("  ".join(str(value).ljust(width) for value, width in zip(row, widths, strict=True)).rstrip())
    if not rows:
        click.echo("(no registered sessions)", err=True)


def _steered(shown: str, steered: dict[str, Any], ref: str) -> str:
    """The status a steering state refines: blocked, idle, paused by its budget."""
    if shown == "active" and (steered.get("blocked") or {}).get("endpoint") == ref:
        return "blocked"
    if shown == "active" and steered.get("idle"):
        return "idle"
    if shown == "paused" and (steered.get("usage") or {}).get("exhausted"):
        return "paused (budget)"
    return shown


def _queued_row(work_item: str, position: int) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(
        ("harness", "model", "effort", "harnessSessionId", "tmuxTarget", "pane", "control", "cwd", "createdAt"), ""
    )
    row.update(workItem=work_item, endpoint=work_item, harnessArgs=[], status=f"queued (position {position})")
    row.update(lastEventAt=None, spend="", usage=None, blocked=None, idle=None, queued=position)
    return row


def _pane(panes: dict[str, ProbeState] | None, target: str) -> str:
    """``live``, ``dead``, ``absent`` or ``unknown`` (tmux did not answer)."""
    if panes is None:
        return "unknown"
    return panes.get(target, "absent") if target else "absent"
