"""Hook implementations of the Claude Code harness plugin; the adapter is imported only when asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop import hookimpl
from the_loop.interfaces import ConfigSection

if TYPE_CHECKING:
    from the_loop.interfaces import HarnessAdapter


@hookimpl
def loop_register_harnesses() -> list[type[HarnessAdapter]]:
    from the_loop_claude.adapter import ClaudeAdapter

    return [ClaudeAdapter]


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [ConfigSection("integrations.claude", "the_loop_claude.config:ClaudeSettings")]
