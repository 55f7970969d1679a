"""Steering a live session beyond its conversation: interrupting a turn, budgets, admission by capacity, and
sessions stuck waiting for a person.

- :mod:`.admission` — a first spawn past ``routing.capacity`` waits in line (``local/admission.json``);
- :mod:`.budgets` — spend per work item (``routing.budgets``), its warning, its pause and its raise;
- :mod:`.stuck` — a decision prompt on the pane (blocked) or nothing moving (idle);
- :mod:`.interrupt` — the harness's own interrupt, then the words that came with it as the next turn;
- :mod:`.watch` — the periodic check that accounts usage, enforces budgets and sees stuck sessions.

Each acts under the work item's dispatch lock, so it takes its turn with the item's deliveries, and each asks the
harness adapter what it supports (``Capabilities.can_interrupt``, ``reports_usage``, ``recognises_prompts``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop import events

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef


def tell(config: LoadedConfig, ref: WorkItemRef, event_type: str, text: str) -> None:
    """Say ``text`` on the ticket (marked) and in every channel subscribed to ``event_type``; best-effort."""
    from the_loop import channels
    from the_loop.control import post_marked

    try:
        post_marked(config, ref, text)
    except Exception as exc:
        events.emit(
            "control.reply_failed", level="warning", work_item=str(ref), reason=event_type, error=str(exc)[:300]
        )
    channels.publish(config, event_type, ref, text=text)
