"""Hook implementations only: everything else is imported when it is used."""

from __future__ import annotations

from the_loop import hookimpl
from the_loop.interfaces import CommandSpec, ConfigSection, EventType


@hookimpl
def loop_register_commands() -> list[CommandSpec]:
    return [CommandSpec("hello", "Greet someone and log it.", "the_loop_hello.cli:hello")]


@hookimpl
def loop_config_sections() -> list[ConfigSection]:
    return [ConfigSection("hello", "the_loop_hello.config:HelloSettings")]


@hookimpl
def loop_event_types() -> list[EventType]:
    return [EventType("hello.said", "the hello command greeted someone")]
