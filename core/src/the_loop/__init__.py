"""the-loop core: hookspecs, plugin host, config, state, event log and CLI.

Plugins import the implementation marker from here::

    from the_loop import hookimpl
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pluggy

    hookimpl: pluggy.HookimplMarker

__all__ = ["ENTRY_POINT_GROUP", "__version__", "hookimpl"]

# A constant rather than importlib.metadata: reading distribution metadata costs ~35 ms on every start-up.
# tests/test_packaging.py keeps it equal to core/pyproject.toml's version.
__version__ = "0.1.0"

ENTRY_POINT_GROUP = "the_loop.plugins"
"""The entry point group a plugin distribution registers its plugin module under."""


def __getattr__(name: str) -> Any:
    # ``hookimpl`` is made on first use: pluggy costs ~30 ms, and `the-loop --help` never needs it.
    if name == "hookimpl":
        import pluggy

        marker = pluggy.HookimplMarker("the_loop")
        globals()["hookimpl"] = marker
        return marker
    raise AttributeError(f"module 'the_loop' has no attribute {name!r}")
