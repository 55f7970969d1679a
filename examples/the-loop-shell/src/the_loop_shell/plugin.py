"""Hook implementations only: the adapter module is imported when core first asks for harnesses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop import hookimpl
from the_loop.interfaces import ConfigSection

if TYPE_CHECKING:
    from the_loop.interfaces import HarnessAdapter


@hookimpl
def loop_register_harnesses() -> list[type[HarnessAdapter]]:
    from the_loop_shell.adapter import ShellAgentAdapter

    return [ShellAgentAdapter]


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [ConfigSection("shellAgent", "the_loop_shell.config:ShellAgentSettings")]
