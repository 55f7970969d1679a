"""The plugins' commands, without loading the plugins when nothing changed.

Listing a plugin's command takes its name and one-line help, which only its ``loop_register_commands`` knows:
building the plugin host for that costs pluggy, ``importlib.metadata`` and every plugin module (about 60 ms, most of
what ``the-loop --help`` would take). So the list is kept in a small cache file, one per interpreter, and rebuilt
whenever anything it came from may have changed. Its key covers:

- the-loop's version and the interpreter;
- ``sys.path`` (but its first entry, the script's folder or the working directory) and every distribution's
  ``entry_points.txt`` on it (an install, upgrade or removal changes one);
- the source files of the modules the ``the_loop.plugins`` entry points name (an edit to an editable plugin);
- the environment switches that change which plugins load (``THE_LOOP_EXTRA_PLUGINS`` and the others).

A process that already has its plugin host (a test's) lists that host's commands, uncached. A host that reported
a broken plugin is not cached, so its warning is printed on every run. The file lives in the installation,
``<sys.prefix>/var/cache/the-loop/`` (nothing is written to the home directory), or in ``$THE_LOOP_CACHE_DIR``;
when it cannot be read or written the host is built, as it would be without a cache. Deleting it is always safe.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import zlib
from typing import TYPE_CHECKING, Any

from the_loop import ENTRY_POINT_GROUP, __version__

if TYPE_CHECKING:
    from the_loop.plugins import PluginHost

CACHE_FORMAT = 1
# What the plugin host reads from the environment to choose plugins (a test keeps this in step with it).
ENV_SWITCHES = ("THE_LOOP_EXTRA_PLUGINS", "THE_LOOP_DISABLE_PLUGINS", "THE_LOOP_LOAD_PLUGINS")


def plugin_commands() -> list[dict[str, Any]]:
    """Every plugin command as ``{plugin, distribution, name, parent, target, help}``, in the host's order."""
    plugins = sys.modules.get("the_loop.plugins")
    if plugins is not None and plugins.built_host() is not None:
        return _listed(plugins.built_host())[0]  # this process has its host (a test's, say): it decides, uncached
    return _cached()


@functools.cache  # a run asks several times (list, help, resolve): the answer cannot change within it
def _cached() -> list[dict[str, Any]]:
    key = cache_key()
    path = cache_path()
    cached = _read(path, key) if path is not None else None
    if cached is not None:
        return cached
    from the_loop.plugins import get_host

    commands, clean = _listed(get_host())
    if clean and path is not None:
        _write(path, key, commands)
    return commands


def cache_path() -> str | None:
    """This interpreter's cache file: in ``$THE_LOOP_CACHE_DIR`` when it is set (empty turns the cache off), else
    in the installation itself, ``<sys.prefix>/var/cache/the-loop/``, beside the bytecode Python caches there too.
    None when there is nowhere to keep it."""
    base = os.environ.get("THE_LOOP_CACHE_DIR")
    if base is None:
        base = os.path.join(sys.prefix, "var", "cache", "the-loop")
    if not os.path.isabs(base):
        return None
    # One file per interpreter; the name need not be unique: the key inside decides.
    return os.path.join(base, f"commands-{zlib.crc32(sys.executable.encode()):08x}.json")


def cache_key() -> str:
    """Everything the plugin commands come from (see the module docstring), as one string. It is stored whole
    and compared whole: no digest to compute (hashlib alone would cost ~7 ms) and no collision to fear."""
    parts = [str(CACHE_FORMAT), __version__, sys.executable]
    parts += [f"{name}={os.environ.get(name, '')}" for name in ENV_SWITCHES]
    modules: list[str] = [
        part.strip() for part in os.environ.get("THE_LOOP_EXTRA_PLUGINS", "").split(",") if part.strip()
    ]
    # sys.path[0] is the script's folder or the working directory (``python -m``): it differs from run to run and
    # installs nothing, so it is left out (a plugin module found there still counts through its source file).
    for entry in sys.path[1:]:
        parts.append(f"path:{entry}")
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            points = os.path.join(entry, name, "entry_points.txt")
            stamp = _stamp(points)
            if stamp:
                parts.append(f"{name}:{stamp}")
                modules += _plugin_modules(points)
    parts += [f"{module}:{_stamp(_source(module) or '')}" for module in modules]
    return "\n".join(parts)


def _stamp(path: str) -> str:
    try:
        info = os.stat(path)
    except OSError:
        return ""
    return f"{info.st_mtime_ns}:{info.st_size}"


def _plugin_modules(entry_points_txt: str) -> list[str]:
    """The modules the ``the_loop.plugins`` section of an ``entry_points.txt`` names (``name = module:attr``)."""
    try:
        with open(entry_points_txt, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    modules, inside = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            inside = line == f"[{ENTRY_POINT_GROUP}]"
        elif inside and "=" in line:
            modules.append(line.split("=", 1)[1].strip().split(":", 1)[0].strip())
    return modules


def _source(module: str) -> str | None:
    """Where ``module``'s source is on ``sys.path``, found without importing it (None when not found)."""
    relative = module.replace(".", os.sep)
    for entry in sys.path:
        for candidate in (f"{relative}.py", os.path.join(relative, "__init__.py")):
            path = os.path.join(entry or ".", candidate)
            if os.path.isfile(path):
                return path
    return None


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


def _read(path: str, key: str) -> list[dict[str, Any]] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("commands"), list):
        return None
    fields = {"plugin", "distribution", "name", "parent", "target", "help"}
    commands = data["commands"]
    if not all(isinstance(item, dict) and set(item) == fields for item in commands):
        return None
    return commands


def _write(path: str, key: str, commands: list[dict[str, Any]]) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = f"{path}.{os.getpid()}.partial"
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump({"key": key, "commands": commands}, handle)
        os.replace(partial, path)  # a reader sees the old file or the new one, never half of one
    except OSError:
        pass  # no cache: the next run builds the host again
