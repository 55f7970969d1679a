"""A test plugin for spawned daemons (``THE_LOOP_EXTRA_PLUGINS=…,gh_refusing_hooks``): the ``input_received``
lifecycle point refuses every ``pause`` command, with a reason, and lets everything else through."""

from __future__ import annotations

from typing import Any

from the_loop import hookimpl

REASON = "pauses are frozen during the release"


@hookimpl
def loop_input_received(ctx: Any) -> dict[str, Any] | None:
    if getattr(ctx, "command", "") == "pause":
        return {"proceed": False, "reason": REASON}
    return None
