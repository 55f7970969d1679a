"""The ``channels.slack`` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from the_loop.config_models import Section


class SlackRead(Section):
    mode: Literal["poll", "socket", "gateway", "off"] = "poll"
    interval_seconds: int = Field(30, ge=1)
    catch_up_seconds: int = Field(900, ge=0)


class SlackReactions(Section):
    enabled: bool = True
    received: str = "eyes"
    completed: str = "white_check_mark"
    error: str = "warning"


class SlackSettings(Section):
    enabled: bool = False
    bot_token_env: str = Field("THE_LOOP_SLACK_BOT_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    app_token_env: str = Field("THE_LOOP_SLACK_APP_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    api_base_url: str = "https://slack.com/api/"
    channel: str = ""
    subscribe: list[str] = Field(default_factory=lambda: ["session.awaiting_input"])
    publish: list[str] = Field(default_factory=lambda: ["work-item.reply"])
    verbosity: str = "normal"
    max_chars: int = Field(1500, ge=100)
    long_messages: Literal["digest", "truncate"] = "digest"
    read: SlackRead = SlackRead()
    reactions: SlackReactions = SlackReactions()
