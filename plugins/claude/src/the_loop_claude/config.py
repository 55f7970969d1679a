"""The ``integrations.claude`` config section (new: the reference has no key for the binary)."""

from __future__ import annotations

from pydantic import field_validator

from the_loop.config_models import Section


class ClaudeSettings(Section):
    # The Claude Code executable: a name looked up on PATH, or a path (``~`` expanded).
    binary: str = "claude"

    @field_validator("binary")
    @classmethod
    def _binary(cls, value: str) -> str:
        # A leading "-" would be read as an option by `env -u …` in front of it in the pane command.
        if not value.strip() or value.startswith("-"):
            raise ValueError("must name an executable (a name on PATH or a path), not be empty or start with '-'")
        return value
