"""The kickoff repository picker on Slack: its blocks, and a ``block_actions`` payload read as a neutral press.

Up to five repositories are buttons (``the-loop:kickoff-repo:<i>``), more are one ``static_select``
(``the-loop:kickoff-repo``); every value is an operator-declared repository, and the question names nothing of the
member's message. Core decides what a press may do (:func:`the_loop.channels.answer_press`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from the_loop.interfaces import Press

ACTION = "the-loop:kickoff-repo"
BUTTONS = 5
QUESTION = "the-loop: which repository should this issue be opened in?"


def _text(value: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": value[:75]}  # Slack's limit for a button or option label


def blocks(options: Sequence[str]) -> list[dict[str, Any]]:
    if len(options) <= BUTTONS:
        elements = [
            {"type": "button", "action_id": f"{ACTION}:{i}", "text": _text(repo), "value": repo}
            for i, repo in enumerate(options)
        ]
    else:
        choices = [{"text": _text(repo), "value": repo} for repo in options[:100]]
        elements = [
            {"type": "static_select", "action_id": ACTION, "placeholder": _text("Repository"), "options": choices}
        ]
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": QUESTION}},
        {"type": "actions", "elements": elements},
    ]


def press_of(payload: Mapping[str, Any]) -> Press | None:
    """The press a ``block_actions`` payload carries on the picker, or None (another payload or control)."""
    if payload.get("type") != "block_actions":
        return None
    action = next(iter(payload.get("actions") or []), None) or {}
    action_id = str(action.get("action_id") or "")
    if action_id != ACTION and not action_id.startswith(ACTION + ":"):
        return None
    value = action.get("value") or (action.get("selected_option") or {}).get("value") or ""
    container = payload.get("container") or {}
    message = payload.get("message") or {}
    channel = (payload.get("channel") or {}).get("id") or container.get("channel_id") or ""
    control = str(container.get("message_ts") or message.get("ts") or "")
    kickoff = str(message.get("thread_ts") or "")
    user = str((payload.get("user") or {}).get("id") or "")
    if not (channel and control and kickoff and user):
        return None
    return Press(str(channel), kickoff, control, user, "kickoff-repo", str(value))
