"""the-loop core: hookspecs, plugin host, config, state, event log and CLI.

Plugins import the implementation marker from here::

    from the_loop import hookimpl
"""

import pluggy

__all__ = ["__version__", "hookimpl"]

# A constant rather than importlib.metadata: reading distribution metadata costs ~35 ms on every start-up.
# tests/test_packaging.py keeps it equal to core/pyproject.toml's version.
__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("the_loop")
"""Marker for hook implementations: decorate a function in your plugin module with ``@hookimpl``."""
