"""Interrupting a turn: the harness's own interrupt (Claude Code: Escape), then the words that came with it.

``the-loop interrupt: use the other API`` (on the ticket, relayed from the item's Slack thread, or ``sessions
interrupt`` on the CLI) is a :class:`~the_loop.models.WorkEvent` of kind ``interrupt``: it takes the item's
dispatch lock like every delivery, and the inbox hands it out ahead of the item's other waiting events. The keys
are pressed in the pane the way a paste is made (aimed at the pane, no client resolved, only into a live one);
then the adapter's ``interrupted_check`` is polled until the turn has stopped, for at most
``routing.tmux.interruptTimeoutSeconds``, and the words are delivered as the next turn. A paused or dead session is
left alone (the event is dropped and the ticket told). A harness that declares no interrupt gets the words as an
ordinary delivery, said so in the event log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from the_loop import events
from the_loop.interfaces import Launch
from the_loop.sessions.tmux import DeliveryError, TmuxError

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.interfaces import HarnessAdapter
    from the_loop.sessions.tmux import TmuxRunner
    from the_loop.state.registry import Endpoint

POLL_SECONDS = 0.05
KIND = "interrupt"


@dataclass(frozen=True)
class Pressed:
    """What the interrupt did: ``stopped`` once the harness said its turn ended, within ``seconds``."""

    pressed: bool
    stopped: bool
    seconds: float
    error: str = ""


def press(config: LoadedConfig, runner: TmuxRunner, adapter: HarnessAdapter, endpoint: Endpoint) -> Pressed:
    """Press ``adapter``'s interrupt keys in ``endpoint``'s pane and wait until its turn stopped."""
    if not adapter.capabilities.can_interrupt or not adapter.interrupt_keys():
        return Pressed(False, False, 0.0, f"{adapter.name} declares no interrupt")
    target = endpoint.tmux_target
    launch = Launch("", endpoint.harness_session_id, Path(endpoint.cwd or "."), tuple(endpoint.harness_args))
    check = adapter.interrupted_check(launch)  # before the keys: it may note where the transcript ends
    started = time.monotonic()
    try:
        runner.send_keys(target, adapter.interrupt_keys())
    except DeliveryError as exc:
        return Pressed(False, False, 0.0, str(exc))
    deadline = started + config.core.routing.tmux.interrupt_timeout_seconds
    while True:
        try:
            if check(lambda: runner.capture(target)):
                return Pressed(True, True, time.monotonic() - started)
        except TmuxError as exc:
            return Pressed(True, False, time.monotonic() - started, str(exc))
        if time.monotonic() >= deadline:
            return Pressed(True, False, time.monotonic() - started, "the harness did not say its turn stopped")
        time.sleep(POLL_SECONDS)


def logged(work_item: str, endpoint: Endpoint, pressed: Pressed, delivery_id: str, actor: str) -> None:
    events.emit(
        "session.interrupted",
        level="info" if pressed.stopped or not pressed.pressed else "warning",
        work_item=work_item,
        harness=endpoint.harness,
        tmux_target=endpoint.tmux_target,
        pressed=pressed.pressed,
        stopped=pressed.stopped,
        seconds=round(pressed.seconds, 3),
        error=pressed.error or None,
        delivery_id=delivery_id,
        actor=actor or None,
    )


def next_turn(text: str, actor: str, source: str) -> str:
    """The words that came with the interrupt, as the session's next turn ("" when none came)."""
    if not text.strip():
        return ""
    where = {"cli": "the CLI", "web": "the web control plane"}.get(source, f"the {source}")
    return f"{actor or 'An operator'} interrupted your turn from {where} and says:\n\n{text.strip()}"
