"""What a worker tells the gateway about itself (:func:`answer`), and the gateway's fleet-wide view (:func:`gather`).

A request is ``{"what": "sessions" | "events" | "status", …}``; the answer is JSON. ``gather`` asks every live
worker (and names the ones assigned items but silent) over :mod:`the_loop.fleet.ask`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


def answer(config: LoadedConfig, request: dict[str, Any]) -> Any:
    what = request.get("what")
    if what == "sessions":
        rows = []
        for record in config.registry.records():
            for ref, endpoint in record.sessions.items():
                rows.append(
                    {
                        "workItem": record.work_item,
                        "endpoint": ref,
                        "status": endpoint.status,
                        "harness": endpoint.harness,
                        "tmux": endpoint.tmux_target,
                        "sessionId": endpoint.harness_session_id,
                    }
                )
        return {"sessions": rows}
    raise ValueError(f"unknown request {what!r}")
