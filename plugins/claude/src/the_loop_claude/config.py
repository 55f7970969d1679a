"""The ``integrations.claude`` config section (new: the reference has no such section)."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationInfo, field_validator, model_validator

from the_loop.config.models import Section


class ClaudeSettings(Section):
    # The Claude Code executable: a name looked up on PATH, or a path (``~`` expanded).
    binary: str = "claude"
    # Pre-seeding of Claude Code's user config file, so a first session on a fresh machine is a conversation and
    # not a first-run screen. Each writes only where the value is not already set that way.
    complete_onboarding: bool = True  # hasCompletedOnboarding: the first-run screens (theme, login, checks)
    approve_api_key: bool = True  # customApiKeyResponses.approved: "Do you want to use this API key?"
    # The operator's word that this box is a sandbox: sessions get IS_SANDBOX=1, which Claude Code requires to run
    # with a bypass permission mode as root.
    sandbox: bool = False
    # Claude Code updates itself inside a running session unless DISABLE_AUTOUPDATER=1, which sessions get unless
    # this is true.
    auto_update: bool = False

    @field_validator("binary")
    @classmethod
    def _binary(cls, value: str) -> str:
        # A leading "-" would be read as an option by `env -u …` in front of it in the pane command.
        if not value.strip() or value.startswith("-"):
            raise ValueError("must name an executable (a name on PATH or a path), not be empty or start with '-'")
        return value

    @model_validator(mode="after")
    def _root_needs_a_sandbox(self, info: ValidationInfo) -> ClaudeSettings:
        """As root, Claude Code exits at once in a bypass permission mode unless told the box is a sandbox."""
        if self.sandbox or os.geteuid() != 0:
            return self
        from the_loop_claude.trust import wants_bypass

        if wants_bypass("auto", _claude_args((info.context or {}).get("root"))):
            raise ValueError(
                "routing.harnessArgs.claude asks for a bypass permission mode and the-loop runs as root, which "
                "Claude Code refuses outside a sandbox: set integrations.claude.sandbox: true if this box is one "
                "(sessions then get IS_SANDBOX=1), or drop the bypass flag, or run the-loop as another user"
            )
        return self


def _claude_args(root: Any) -> list[str]:
    """``routing.harnessArgs.claude`` from the raw file (strings only; the core model checks the rest)."""
    node: Any = root
    for key in ("routing", "harnessArgs", "claude"):
        node = node.get(key) if isinstance(node, dict) else None
    return [arg for arg in node if isinstance(arg, str)] if isinstance(node, list) else []
