"""Small files that spare a command work it would otherwise redo on every run: the plugins' commands (for
``--help``, :mod:`the_loop.cli.plugin_commands`) and what ``status`` reads of the config and the plugins
(:mod:`the_loop.cli.status`).

Each file holds a key and a payload. A reader that finds no file, a broken one or another key computes the answer
as it would without a cache (and writes it again). The key always covers the installed code (:func:`installed_code`);
each user adds what its answer also comes from. Keys are stored whole and compared whole: no digest to compute
(``hashlib`` alone would cost ~7 ms) and no collision to fear.

The files live in the installation, ``<sys.prefix>/var/cache/the-loop/`` (nothing is written to the home directory),
or in ``$THE_LOOP_CACHE_DIR`` (empty turns caching off); when they cannot be read or written, nothing is cached.
Deleting them is always safe.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Iterable
from typing import Any

from the_loop import ENTRY_POINT_GROUP, __version__

# What the plugin host reads from the environment to choose plugins (a test keeps this in step with it).
ENV_SWITCHES = ("THE_LOOP_EXTRA_PLUGINS", "THE_LOOP_DISABLE_PLUGINS", "THE_LOOP_LOAD_PLUGINS")


def cache_file(kind: str) -> str | None:
    """This interpreter's ``kind`` cache file: in ``$THE_LOOP_CACHE_DIR`` when it is set, else in the installation
    itself, beside the bytecode Python caches there too. None when there is nowhere to keep it."""
    base = os.environ.get("THE_LOOP_CACHE_DIR")
    if base is None:
        base = os.path.join(sys.prefix, "var", "cache", "the-loop")
    if not os.path.isabs(base):
        return None
    # One file per interpreter; the name need not be unique: the key inside decides.
    return os.path.join(base, f"{kind}-{zlib.crc32(sys.executable.encode()):08x}.json")


def installed_code() -> list[str]:
    """The key's parts that say which code would answer:

    - the-loop's version and the interpreter;
    - ``sys.path`` (but its first entry, the script's folder or the working directory) and every distribution's
      ``entry_points.txt`` on it (an install, upgrade or removal changes one);
    - the source files of the modules the ``the_loop.plugins`` entry points name (an edit to an editable plugin);
    - the environment switches that change which plugins load (``THE_LOOP_EXTRA_PLUGINS`` and the others).
    """
    parts = [__version__, sys.executable]
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
            found = stamp(points)
            if found:
                parts.append(f"{name}:{found}")
                modules += _plugin_modules(points)
    parts += [f"{module}:{stamp(_source(module) or '')}" for module in modules]
    return parts


def stamp(path: str | os.PathLike[str]) -> str:
    """``mtime:size:mode`` of ``path``, "" when it cannot be read: what changes when the file is written or its
    mode is."""
    try:
        info = os.stat(path)
    except OSError:
        return ""
    return f"{info.st_mtime_ns}:{info.st_size}:{info.st_mode:o}"


def module_sources(packages: Iterable[str]) -> dict[str, str]:
    """Each loaded module of ``packages`` (top-level names) by its source file, with that file's :func:`stamp`:
    what a payload computed by those modules depends on beyond the entry points."""
    wanted = set(packages)
    sources = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and name.partition(".")[0] in wanted:
            sources[path] = stamp(path)
    return sources


def unchanged(stamps: Any) -> bool:
    """Whether every ``{path: stamp}`` still holds (a payload's :func:`module_sources`, say)."""
    return isinstance(stamps, dict) and all(stamp(path) == found for path, found in stamps.items())


def read(path: str | None, key: str) -> Any:
    """The payload stored under ``key``, or None (no file, a broken one, another key)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    return data.get("payload")


def write(path: str | None, key: str, payload: Any) -> None:
    """Store ``payload`` under ``key``; a reader sees the old file or the new one, never half of one."""
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = f"{path}.{os.getpid()}.partial"
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump({"key": key, "payload": payload}, handle)
        os.replace(partial, path)
    except OSError:
        pass  # no cache: the next run computes it again


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
