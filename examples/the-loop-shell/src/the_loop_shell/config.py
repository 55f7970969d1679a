"""The ``shellAgent`` config section."""

from __future__ import annotations

from the_loop.config.models import Section


class ShellAgentSettings(Section):
    # Where the agent keeps one transcript per conversation; a relative path is taken beside the config file.
    transcript_dir: str = "~/.the-loop-shell"
