"""The plugins' commands, without loading the plugins when nothing changed.

Listing a plugin's command takes its name and one-line help, which only its ``loop_register_commands`` knows:
building the plugin host for that costs pluggy, ``importlib.metadata`` and every plugin module (about 60 ms, most of
what ``the-loop --help`` would take). So the list is kept in a small cache file (:mod:`the_loop.cli.cache`), one per
interpreter, rebuilt whenever the installed code it came from may have changed
(:func:`~the_loop.cli.cache.installed_code`).

A process that already has its plugin host (a test's) lists that host's commands, uncached. A host that reported
a broken plugin is not cached, so its warning is printed on every run.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

from the_loop.cli import cache

if TYPE_CHECKING:
    from the_loop.plugins import PluginHost

CACHE_FORMAT = 2


def plugin_commands() -> list[dict[str, Any]]:
    """Every plugin command as ``{plugin, distribution, name, parent, target, help}``, in the host's order."""
    plugins = sys.modules.get("the_loop.plugins")
    if plugins is not None and plugins.built_host() is not None:
        return _listed(plugins.built_host())[0]  # this process has its host (a test's, say): it decides, uncached
    return _cached()


@functools.cache  # a run asks several times (list, help, resolve): the answer cannot change within it
def _cached() -> list[dict[str, Any]]:
    key = "\n".join(["commands", str(CACHE_FORMAT), *cache.installed_code()])
    path = cache.cache_file("commands")
    cached = _valid(cache.read(path, key))
    if cached is not None:
        return cached
    from the_loop.plugins import get_host

    commands, clean = _listed(get_host())
    if clean:
        cache.write(path, key, commands)
    return commands


def _listed(host: PluginHost) -> tuple[list[dict[str, Any]], bool]:
    """``host``'s commands, and whether it loaded every plugin cleanly (only then may they be cached)."""
    commands = [
        {
            "plugin": plugin,
            "distribution": host.infos[plugin].distribution if plugin in host.infos else "?",
            "name": spec.name,
            "parent": spec.parent,
            "target": spec.target,
            "help": spec.help,
        }
        for plugin, spec in host.commands()
    ]
    return commands, not any(info.error for info in host.infos.values())


def _valid(commands: Any) -> list[dict[str, Any]] | None:
    """A stored list, when every item has the fields a listed command has."""
    fields = {"plugin", "distribution", "name", "parent", "target", "help"}
    if not isinstance(commands, list) or not all(isinstance(i, dict) and set(i) == fields for i in commands):
        return None
    return commands
