"""The ``channels.slack`` config section.

Values that would read out of range are brought back, failing closed (D §2.1): an unknown ``read.mode`` reads as
``off`` (never as a reading mode), a ``publish`` grant outside the catalog is dropped (a typo never widens a grant),
a ``subscribe`` name outside the catalog is kept (a custom event), each with a warning.
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from the_loop.config.models import Section

log = logging.getLogger("the_loop_slack.config")

READ_MODES = ("poll", "socket", "gateway", "off")
SUBSCRIBABLE = (
    "session.awaiting_input",
    "session.blocked",
    "session.idle",
    "budget.warning",
    "budget.exhausted",
    "admission.queued",
    "decision-pending",
    "phase-approval-pending",
    "pr-review-pending",
    "security-sign-off-pending",
    "conflict-escalated",
    "work-item-complete",
    "phase.started",
    "phase.completed",
    "phase.progress",
    "work-item.closed",
    "comment.agent",
    "comment.human",
    "standing.started",
)
PUBLISHABLE = (
    "work-item.reply",
    "gate.feedback",
    "control.command",
    "work-item.create",
    "context.added",
    "decision.recorded",
    "instance.command",
    "standing.command",
)


class SlackRead(Section):
    mode: str = "poll"
    interval_seconds: int = Field(30, ge=1)
    catch_up_seconds: int = 900  # <= 0: at connect only; 1-59 reads as 60

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, value: str) -> str:
        if value not in READ_MODES:
            log.warning("channels.slack.read.mode: %r is not one of %s; reading is off", value, ", ".join(READ_MODES))
            return "off"
        return value


class SlackReactions(Section):
    enabled: bool = True
    received: str = "eyes"
    completed: str = "white_check_mark"
    error: str = "warning"


class SlackKickoff(Section):
    repo: str = ""  # the fallback repository when a message names none; must be declared when any are
    labels: list[str] = Field(default_factory=list)

    @field_validator("repo")
    @classmethod
    def _declared(cls, value: str, info: ValidationInfo) -> str:
        # A fallback outside the declared set would open issues where no one asked the-loop to work.
        root = (info.context or {}).get("root") or {}
        declared = root.get("repositories") if isinstance(root, dict) else None
        known = {str(entry).lower() for entry in declared} if isinstance(declared, list) else set()
        if value and known and value.lower() not in known:
            raise ValueError(f"{value!r} is not one of the declared repositories")
        return value


class SlackSettings(Section):
    enabled: bool = False
    bot_token_env: str = Field("THE_LOOP_SLACK_BOT_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    app_token_env: str = Field("THE_LOOP_SLACK_APP_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    api_base_url: str = "https://slack.com/api/"
    channel: str = ""
    # What asks a person to act is on by default: a question, a decision prompt, a quiet session, a budget.
    subscribe: list[str] = Field(
        default_factory=lambda: [
            "session.awaiting_input",
            "session.blocked",
            "session.idle",
            "budget.warning",
            "budget.exhausted",
        ]
    )
    publish: list[str] = Field(default_factory=lambda: ["work-item.reply"])
    verbosity: str = "normal"
    max_chars: int = 1500  # below 200 reads as 1500; capped at 2900
    long_messages: Literal["digest", "truncate"] = "digest"
    read: SlackRead = SlackRead()
    reactions: SlackReactions = SlackReactions()
    kickoff: SlackKickoff = SlackKickoff()

    @field_validator("subscribe")
    @classmethod
    def _custom_events_kept(cls, value: list[str]) -> list[str]:
        for name in value:
            if name not in SUBSCRIBABLE:
                log.warning("channels.slack.subscribe: %r is not a known event type; kept as a custom one", name)
        return list(dict.fromkeys(value))

    @field_validator("publish")
    @classmethod
    def _grants_only(cls, value: list[str]) -> list[str]:
        kept = []
        for name in value:
            if name not in PUBLISHABLE:
                log.warning("channels.slack.publish: %r is not a grant (%s); dropped", name, ", ".join(PUBLISHABLE))
            elif name not in kept:
                kept.append(name)
        return kept
