"""Every session this machine's registry holds, one row per endpoint: what ``sessions list`` prints, and what a
fleet's worker tells the gateway (:mod:`the_loop.routing.views`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.sessions.tmux import ProbeState


def session_rows(config: LoadedConfig, status: str | None = None) -> list[dict[str, Any]]:
    """The rows, the work item's own session first and then its pull requests'; items waiting in line last."""
    from the_loop.sessions.standing import steering
    from the_loop.sessions.steering import admission
    from the_loop.sessions.tmux import runner_for

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
    return rows


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
