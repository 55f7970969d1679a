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

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef
    from the_loop.state.registry import SessionRecord

STATES = ("not-tracked", "idle", "armed", "paused", "disarmed", "parked", "running", "ended", "archived")
ARMING = {"start": "armed", "resume": "armed", "pause": "paused", "stop": "disarmed", "cleanup": "disarmed"}
_TEXT_CAP = 300  # a parked reason or an actor from an agent-writable file is a line, not a document


@click.command()
@click.argument("ref", metavar="REF", callback=parse_work_item)
@FORMAT_OPTION
@click.pass_context
def check(ctx: click.Context, ref: WorkItemRef, output_format: str) -> None:
    """Say where REF stands: not tracked, armed or disarmed, parked at the start gate and why, running where, or
    ended (ARCHIVED — <outcome> once cleanup removed its checkout). Reads records only; exit 1 when one is
    unreadable."""
    config = app(ctx).config(source="cli")
    report = standing(config, ref)
    if output_format == "json":
        print_json(report)
    else:
        for line in render(report):
            click.echo(line)
    for path in report["unreadable"]:
        click.echo(f"warning: {path} is not readable (not a JSON object): the answer leaves it out", err=True)
    if report["unreadable"]:
        sys.exit(1)


# ------------------------------------------------------------------------------------------------- reading


def standing(config: LoadedConfig, ref: WorkItemRef) -> dict[str, Any]:
    """The report ``--format json`` prints (docs/cli.md documents every key)."""
    from the_loop.sessions import choices, workspace
    from the_loop.state import Corrupt, load_json
    from the_loop.state.work_item_state import read as read_state

    unreadable: list[str] = []
    portable_path = config.store.path_for(ref)
    portable: dict[str, Any] = {}
    if load_json(portable_path) is Corrupt:
        unreadable.append(str(portable_path))
    else:
        portable = config.store.read(ref) or {}
    local_path = config.registry.path(str(ref))
    record = None
    if load_json(local_path) is Corrupt:
        unreadable.append(str(local_path))
    else:
        record = config.registry.load(str(ref))
    checkouts = workspace.checkout_paths(config, ref)
    state_file = choices.state_path(config, ref)
    found = None
    problems: list[str] = []
    if state_file is not None and state_file.is_file():
        if load_json(state_file) is Corrupt:
            unreadable.append(str(state_file))
        else:  # the file just found: its checkout is not looked up a second time
            found = read_state(state_file, ref, choices.allowed(config))
            problems = list(found.problems)
    control = _control(portable.get("control"))
    ended = portable.get("ended") if isinstance(portable.get("ended"), dict) else None
    endpoints = _endpoints(config, ref, record)
    parked = _parked(found.parked) if found is not None and found.phase == "phase-selection" else None
    report: dict[str, Any] = {
        "workItem": str(ref),
        "state": "",
        "headline": "",
        "control": control,
        "parked": parked,
        "phase": found.phase if found is not None else "",
        "choices": _choices(found),
        "pullRequests": [{"ref": r.ref, "url": r.url, "state": r.state} for r in found.pull_requests] if found else [],
        "endpoints": endpoints,
        "ended": ended,
        "checkout": str(checkouts[0]) if checkouts else None,
        "stateFile": str(state_file) if state_file is not None and state_file.is_file() else None,
        "unreadable": unreadable,
        "problems": problems,
    }
    tracked = bool(record is not None or any(key not in ("ref", "url") for key in portable) or found is not None)
    report["state"] = _state(report, tracked, archived=ended is not None and not checkouts and record is None)
    report["headline"] = _headline(report)
    return report


def _state(report: dict[str, Any], tracked: bool, *, archived: bool) -> str:
    if report["ended"] is not None:
        return "archived" if archived else "ended"
    live = [e for e in report["endpoints"] if e["status"] in ("active", "paused")]
    if any(not _binding(report["workItem"], endpoint) for endpoint in live):
        return "running"
    if report["parked"] is not None:
        return "parked"
    command = (report["control"] or {}).get("command", "")
    if command in ARMING:
        return ARMING[command]
    return "idle" if tracked else "not-tracked"


def _headline(report: dict[str, Any]) -> str:
    state = report["state"]
    if state in ("ended", "archived"):
        return f"{state.upper()} — {report['ended'].get('outcome') or 'unknown'}"
    if state == "parked":
        return f"PARKED at the {report['parked']['gate']} gate"
    return state.upper().replace("-", " ")


def _text(value: object) -> str:
    return value[:_TEXT_CAP] if isinstance(value, str) else ""


def _control(found: object) -> dict[str, str] | None:
    if not isinstance(found, dict) or not isinstance(found.get("command"), str):
        return None
    return {key: _text(found.get(key)) for key in ("command", "source", "actor", "requestedAt", "note")}


def _parked(found: dict[str, Any] | None) -> dict[str, str] | None:
    """The gate's own keys, as text: the file is agent-writable, so nothing else in ``parked`` is shown."""
    if not found:
        return None
    return {key: _text(found.get(key)) for key in ("gate", "reason", "since", "comment") if _text(found.get(key))}


def _choices(found: Any) -> dict[str, Any]:
    if found is None:
        return {}
    from the_loop.sessions.closing.terminal import selections

    return selections(found)


def _endpoints(config: LoadedConfig, ref: WorkItemRef, record: SessionRecord | None) -> list[dict[str, Any]]:
    """Each endpoint as recorded; a live one's pane probed with one tmux call for all of them."""
    if record is None:
        return []
    from the_loop.sessions.tmux import runner_for

    runner = runner_for(config)
    live = [endpoint for endpoint in record.sessions.values() if endpoint.live and endpoint.tmux_target]
    panes = runner.probe_all() if live else {}
    prefix = " ".join(runner.command_prefix)
    rows = []
    for name, endpoint in sorted(record.sessions.items(), key=lambda item: (item[0] != str(ref), item[0])):
        target = endpoint.tmux_target
        pane = None
        if endpoint.live and target:
            pane = "unknown" if panes is None else panes.get(target, "absent")
        read_only = "-r " if endpoint.status == "closed" else ""
        rows.append(
            {
                "ref": name,
                "harness": endpoint.harness,
                "harnessSessionId": endpoint.harness_session_id,
                "model": endpoint.model,
                "effort": endpoint.effort,
                "status": endpoint.status,
                "pane": pane,
                "tmuxTarget": target,
                "cwd": endpoint.cwd,
                "attach": f"{prefix} attach-session {read_only}-t ={target}" if target else "",
            }
        )
    return rows


# ------------------------------------------------------------------------------------------------- text


def render(report: dict[str, Any]) -> list[str]:
    """The text form: the headline, then one line per fact that is there."""
    lines = [f"{report['workItem']}: {report['headline']}"]
    control = report["control"]
    if control:
        state = ARMING.get(control["command"], "control")
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


def _choice_text(found: dict[str, Any]) -> str:
    parts = [f"{key} {value}" for key, value in found.items() if key != "repos"]
    if found.get("repos"):
        parts.append(f"repos {', '.join(found['repos'])}")
    return "; ".join(parts)


def _binding(work_item: str, endpoint: dict[str, Any]) -> bool:
    """A pull request recorded on the work item's session with no session of its own (no tmux, no conversation)."""
    return endpoint["ref"] != work_item and not endpoint["tmuxTarget"] and not endpoint["harnessSessionId"]


def _endpoint_lines(work_item: str, endpoint: dict[str, Any]) -> list[str]:
    own = endpoint["ref"] == work_item
    model = ", ".join(value for value in (endpoint["model"], endpoint["effort"]) if value)
    harness = f"{endpoint['harness'] or '-'}{f' ({model})' if model else ''}"
    status = endpoint["status"] + (f", pane {endpoint['pane']}" if endpoint["pane"] else "")
    if _binding(work_item, endpoint):
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
