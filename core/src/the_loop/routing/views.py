"""One view of the fleet: what a worker tells the gateway (:func:`answer`), and the gateway asking them all
(:func:`gather`).

A request is ``{"what": "sessions", "status": …}`` or ``{"what": "status"}``; a worker answers from its own state
with what a single machine's ``sessions list --format json`` prints, or its counts. ``gather`` asks every live
worker at once (``fleet.askTimeoutSeconds``), and names as silent both a live worker that did not answer and one
that has items assigned but no heartbeat: a silent worker is never an empty success.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


def answer(config: LoadedConfig, request: dict[str, Any]) -> Any:
    """A worker's answer to one of the gateway's questions, from its own state."""
    from the_loop.sessions.listing import session_rows

    what = request.get("what")
    if what == "sessions":
        status = request.get("status")
        return {"sessions": session_rows(config, status if isinstance(status, str) and status else None)}
    if what == "status":
        instance = config.core.instance
        records = config.registry.records()
        live = sum(1 for record in records if record.own is not None and record.own.live)
        return {
            "capacity": instance.capacity.sessions,
            "live": live,
            "records": len(records),
            "scope": instance.scope.mode,
        }
    raise ValueError(f"unknown request {what!r}")


def gather(config: LoadedConfig, request: dict[str, Any]) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """(each answering worker's answer by name, the silent workers, the live workers' heartbeats by name).
    Raises :class:`~the_loop.fleet.connection.FleetError` when NATS cannot be reached."""
    from the_loop.fleet import shared
    from the_loop.fleet.ask import ask

    fleet = shared(config.core.fleet)
    live = {worker.name: worker for worker in fleet.workers.live()}
    assigned = {assignment.worker for assignment in fleet.assignments.all()}
    replies = ask(fleet.nats, sorted(live), request, config.core.fleet.ask_timeout_seconds)
    answers = {name: reply["answer"] for name, reply in replies.items() if reply is not None and reply.get("ok")}
    silent = sorted({name for name in live if name not in answers} | (assigned - set(live)))
    return answers, silent, live
