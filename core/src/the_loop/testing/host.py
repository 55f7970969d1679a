"""The plugin host a test builds (the ``plugin_host`` fixture): a module of its own, so the fixtures' helpers (the
``world``) can name it without importing the pytest plugin."""

from __future__ import annotations

from the_loop.plugins import PluginHost


class TestHost(PluginHost):
    """A host for one test: ``register(obj, name)`` adds a plugin and undoes on teardown."""

    __test__ = False

    def register(self, plugin: object, name: str) -> None:
        self._register(plugin, name, "(test)", "", builtin=False)
