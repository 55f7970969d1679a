"""The config a long-running service acts on now (issue-222, A25).

A daemon loads its config once at start; an operator who edits the file (drops a user from
``routing.authorizedUsers``, adds a repository, changes a keyword) expects the running services to follow without a
restart. :class:`ConfigWatcher` hands out the config in force: each call costs one ``stat`` of the file, and only a
change of the file's *content* (its sha256, not just its mtime) loads it again. A new text that does not load — bad
YAML, a bad value, a declared hook that cannot be imported, a moved state path — is reported once
(``config.reload-failed``) and the last good config stays in force, so a typo never stops a daemon.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import TYPE_CHECKING, Any

from the_loop import events

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig


def _stat_key(path: os.PathLike[str] | str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size, info.st_ino


def _digest(path: os.PathLike[str] | str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


class ConfigWatcher:
    """Hands out the current :class:`LoadedConfig`, reloading it when the file's content changes."""

    def __init__(self, config: LoadedConfig) -> None:
        self.path = config.ref.path
        self._config = config
        self._lock = threading.Lock()
        self._stat = _stat_key(self.path)
        self._digest = _digest(self.path)

    def current(self) -> LoadedConfig:
        with self._lock:
            stat = _stat_key(self.path)
            if stat == self._stat:
                return self._config
            self._stat = stat
            digest = _digest(self.path)
            if digest is None or digest == self._digest:  # touched, or briefly missing mid-save: nothing to do
                return self._config
            self._digest = digest
            self._reload()
            return self._config

    def _reload(self) -> None:
        from the_loop.config import ConfigError, load_config
        from the_loop.hooks.executors import HookLoadError, load_declared

        old = self._config
        try:
            new = load_config(self.path, old.host)  # the same plugins: they are not reloaded
            if new.state != old.state:  # the inbox, locks, registry, log and pidfiles of this process live there
                raise ConfigError(
                    f"{self.path}: state.root, routing.registryDir, eventLog.path or webhooks.ghWebhook.pidfile "
                    "changed; restart the services (the-loop restart) to move them"
                )
            load_declared(new)  # L3: no declared hook this process cannot load
        except Exception as exc:  # whatever the new text does wrong, the last good config stays in force
            known = isinstance(exc, (ConfigError, HookLoadError))
            error = str(exc) if known else f"{type(exc).__name__}: {exc}"
            events.emit("config.reload-failed", level="error", path=str(self.path), error=error)
            return
        self._config = new
        events.emit("config.reloaded", path=str(self.path), changed=_changed_keys(old.raw, new.raw))
