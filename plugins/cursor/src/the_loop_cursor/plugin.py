"""Hook implementations of the cursor-agent harness plugin; the adapter is imported only when asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from the_loop import hookimpl

if TYPE_CHECKING:
    from the_loop.interfaces import HarnessAdapter


@hookimpl
def loop_register_harnesses() -> list[type[HarnessAdapter]]:
    from the_loop_cursor.adapter import CursorAdapter

    return [CursorAdapter]
