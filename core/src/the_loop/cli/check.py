"""``the-loop check REF``: where a work item stands, from the records alone.

It reads the three per-item files — the portable record, this machine's session record and the checkout's
``work-item-state.json`` — and at most one tmux call (``list-panes -a``, only when a live session is recorded, to
say whether its pane still runs). It asks no ticket provider anything and writes nothing.

Exit 0 when it answered, 1 when one of the three files is unreadable (what could be read is still printed, and the
file is named), 2 for a bad ref or config.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from the_loop.command import FORMAT_OPTION, app, parse_work_item, print_json
from the_loop.sessions import standing

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef


@click.command()
@click.argument("ref", metavar="REF", callback=parse_work_item)
@FORMAT_OPTION
@click.pass_context
def check(ctx: click.Context, ref: WorkItemRef, output_format: str) -> None:
    """Say where REF stands: not tracked, armed or disarmed, parked at the start gate and why, running where, or
    ended (ARCHIVED — <outcome> once cleanup removed its checkout). Reads records only; exit 1 when one is
    unreadable."""
    config = app(ctx).config(source="cli")
    report = standing.standing(config, ref)
    if output_format == "json":
        print_json(report)
    else:
        for line in render(report):
            click.echo(line)
    for path in report["unreadable"]:
        click.echo(f"warning: {path} is not readable (not a JSON object): the answer leaves it out", err=True)
    if report["unreadable"]:
        sys.exit(1)


# ------------------------------------------------------------------------------------------------- text


def render(report: dict[str, Any]) -> list[str]:
    """The text form: the headline, then one line per fact that is there."""
    lines = [f"{report['workItem']}: {report['headline']}"]
    control = report["control"]
    if control:
        state = standing.ARMING.get(control["command"], "control")
        by = f" by {control['actor']}" if control["actor"] else ""
        lines.append(f"  {state}: {control['command']}{by} ({control['source'] or '-'}) at {control['requestedAt']}")
    if report["state"] == "not-tracked":
        lines.append("  nothing on this machine records it: no session, no portable record, no work-item-state.json")
    parked = report["parked"]
    if parked:
        lines.append(f"  why: {parked.get('reason') or '-'}")
        lines.append(f"  since: {parked.get('since') or '-'}")
        if parked.get("comment"):
            lines.append(f"  checklist: comment {parked['comment']} on the ticket")
    if report["choices"]:
        lines.append(f"  choices: {_choice_text(report['choices'])}")
    for row in report["pullRequests"]:
        lines.append(f"  pull request {row['ref']}: {row['state']}")
    for endpoint in report["endpoints"]:
        lines.extend(_endpoint_lines(report["workItem"], endpoint))
    lines.extend(_steering_lines(report["steering"]))
    if report["state"] == "armed" and not report["endpoints"]:
        lines.append("  no session yet: its next event starts one")
    ended = report["ended"]
    if ended:
        lines.extend(_ended_lines(ended, report))
    if report["checkout"]:
        lines.append(f"  checkout: {report['checkout']}")
    for problem in report["problems"]:
        lines.append(f"  ignored in work-item-state.json: {problem}")
    return lines


def _steering_lines(steering: dict[str, Any]) -> list[str]:
    lines = []
    if steering["queued"]:
        lines.append(f"  queued: position {steering['queued']} in line for a slot (routing.capacity)")
    if steering["spend"]:
        exhausted = (steering["usage"] or {}).get("exhausted")
        lines.append(
            f"  spend: {steering['spend']}" + (f" (paused: its {exhausted} budget is spent)" if exhausted else "")
        )
    blocked = steering["blocked"]
    if blocked:
        options = ", ".join(f"{o.get('key')} {o.get('label')}" for o in blocked["options"] if isinstance(o, dict))
        lines.append(f"  blocked since {blocked.get('since') or '-'}: {blocked.get('text') or '-'} ({options})")
    if steering["idle"]:
        lines.append(f"  idle since {steering['idle'].get('since') or '-'} (nudged {steering['idle'].get('nudgedAt')})")
    return lines


def _choice_text(found: dict[str, Any]) -> str:
    parts = [f"{key} {value}" for key, value in found.items() if key != "repos"]
    if found.get("repos"):
        parts.append(f"repos {', '.join(found['repos'])}")
    return "; ".join(parts)


def _endpoint_lines(work_item: str, endpoint: dict[str, Any]) -> list[str]:
    own = endpoint["ref"] == work_item
    model = ", ".join(value for value in (endpoint["model"], endpoint["effort"]) if value)
    harness = f"{endpoint['harness'] or '-'}{f' ({model})' if model else ''}"
    status = endpoint["status"] + (f", pane {endpoint['pane']}" if endpoint["pane"] else "")
    if standing.binding(work_item, endpoint):
        return [f"  pull request {endpoint['ref']}: bound, its events reach the work item's session"]
    lines = [f"  {'session' if own else 'pull request session'} {endpoint['ref']}: {harness}, {status}"]
    if not endpoint["tmuxTarget"]:
        if endpoint["status"] != "closed":
            lines.append("    no tmux session yet: its next event starts one")
    else:
        lines.append(f"    tmux {endpoint['tmuxTarget']} in {endpoint['cwd'] or '-'}")
        if own:
            read_only = " --read-only" if endpoint["status"] == "closed" else ""
            lines.append(f"    attach: the-loop sessions attach --work-item {work_item}{read_only}")
        else:
            lines.append(f"    attach: {endpoint['attach']}")
    return lines


def _ended_lines(ended: dict[str, Any], report: dict[str, Any]) -> list[str]:
    by = f" by {ended['actor']}" if ended.get("actor") else ""
    seen = f", seen by the {ended['source']}" if ended.get("source") else ""
    how = f"{ended.get('state') or '-'} ({ended.get('reason') or '-'})"
    lines = [f"  ended: {how} at {ended.get('at') or '-'}{by}{seen}"]
    terminal = ended.get("terminal")
    if isinstance(terminal, dict):
        lines.append(f"  terminal record (taken {terminal.get('recordedAt') or '-'}):")
        if terminal.get("phase"):
            lines.append(f"    phase: {terminal['phase']}")
        if terminal.get("selections"):
            lines.append(f"    choices: {_choice_text(terminal['selections'])}")
        for row in terminal.get("pullRequests") or []:
            if isinstance(row, dict):
                lines.append(f"    pull request {row.get('ref')}: {row.get('state')}")
        names = terminal.get("evidence") or []
        if names:
            lines.append(f"    evidence in {terminal.get('specDir')}/evidence: {', '.join(map(str, names))}")
    else:
        lines.append("  no terminal record: no checkout could be read when it ended")
    if report["state"] == "ended" and report["endpoints"]:
        lines.append("  its session record is still here: cleanup has not run (the-loop sessions cleanup)")
    return lines
