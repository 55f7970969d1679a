"""The operator's declared hooks at run time: loading ``hooks:`` entries into executors, and calling them.

Together they act as one built-in plugin that :func:`the_loop.hooks.lifecycle.run` asks after every installed plugin.
They are not registered with pluggy, so no plugin's ``tryfirst``/``trylast`` can reorder them: the operator has the
last word.

- A **local** entry (``module`` or ``path``) holds a :class:`~the_loop.hooks.lifecycle.LifecycleHooks` subclass (the
  only
  one in the module, or the one ``executor`` names; ``executor`` may also name a ready instance), built with the
  entry's ``with`` keyword arguments. It handles the points its class overrides. A ``path`` file is executed once
  per resolved path per process, so an edit applies at the next start.
- A **remote** entry (``url``) is a JSON-RPC 2.0 endpoint called over HTTP for every point.

``on`` narrows either kind to the points it lists. Daemons load the declaration when they start and refuse to
start when any entry fails (:func:`load_declared`); one-shot commands load it lazily at the first point they reach
and run hookless when it fails (``hooks.load_failed``, once).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import itertools
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from the_loop.hooks.chain import Hook, HookFailure
from the_loop.lifecycle import POINTS, LifecycleContext, LifecycleHooks

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.config.models import HookEntry

__all__ = ["HookLoadError", "LoadedHook", "RemoteExecutor", "declared_hooks", "load_declared", "reset"]


class HookLoadError(Exception):
    """A declared hook cannot be loaded; ``str()`` names the entry."""


@dataclass(frozen=True)
class LoadedHook:
    """One entry, ready to call: its executor and the points it runs at."""

    name: str
    required: bool
    points: tuple[str, ...]
    executor: Any  # a LifecycleHooks instance or a RemoteExecutor

    def hook(self, point: str) -> Hook:
        method = getattr(self.executor, point)
        return Hook(f"hooks:{self.name}", self.required, method)


# ------------------------------------------------------------------------------------------------- remote


class RemoteError(HookFailure):
    """A remote hook's call failed (unreachable, HTTP error, timeout, not a JSON-RPC 2.0 reply)."""


class RemoteExecutor:
    """Calls one remote hook: a JSON-RPC 2.0 ``POST`` per point, the Bearer token read from ``token_env`` at call
    time (never stored, never logged). Handles every point."""

    def __init__(
        self, url: str, *, token_env: str = "", headers: dict[str, str] | None = None, timeout: float = 10
    ) -> None:
        self.url = url
        self.token_env = token_env
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._client: Any = None

    def _http(self) -> Any:
        """One client per executor, kept for the process: a new one per call costs ~30 ms (its TLS context)."""
        import socket

        import httpx

        with self._lock:
            if self._client is None:
                nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
                self._client = httpx.Client(transport=httpx.HTTPTransport(socket_options=nodelay))
            return self._client

    def __getattr__(self, point: str) -> Any:
        if point not in POINTS:
            raise AttributeError(point)
        return lambda ctx: self.call(point, ctx)

    def call(self, point: str, ctx: LifecycleContext) -> dict[str, Any] | None:
        import httpx

        headers = {"Content-Type": "application/json", "Accept": "application/json", **self.headers}
        if self.token_env:
            token = os.environ.get(self.token_env)
            if not token:
                raise RemoteError(f"{self.token_env} is not set (tokenEnv); nothing was sent")
            headers["Authorization"] = f"Bearer {token}"
        with self._lock:
            request_id = next(self._ids)
        body = {"jsonrpc": "2.0", "id": request_id, "method": point, "params": ctx.to_params()}
        try:
            response = self._http().post(self.url, json=body, headers=headers, timeout=self.timeout)
        except httpx.TimeoutException:
            raise RemoteError(f"no answer within {self.timeout:g}s (timeoutSeconds)") from None
        except httpx.HTTPError as exc:
            raise RemoteError(f"{type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise RemoteError(f"HTTP {response.status_code} from {self.url}")
        try:
            reply = response.json()
        except ValueError:
            raise RemoteError("the reply is not JSON") from None
        return _result(reply, request_id)


def _result(reply: Any, request_id: int) -> dict[str, Any] | None:
    """The ``result`` of a JSON-RPC 2.0 reply to ``request_id``, or :class:`RemoteError`."""
    if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
        raise RemoteError("the reply is not JSON-RPC 2.0")
    if reply.get("id") != request_id or isinstance(reply.get("id"), bool):
        raise RemoteError(f"the reply's id {reply.get('id')!r} is not the request's {request_id}")
    if "error" in reply:
        error = reply["error"] if isinstance(reply["error"], dict) else {}
        raise RemoteError(f"the hook answered error {error.get('code')}: {error.get('message')}")
    if "result" not in reply:
        raise RemoteError("the reply has no result")
    result = reply["result"]
    if result is not None and not isinstance(result, dict):
        raise RemoteError(f"the result is a {type(result).__name__}, not an object or null")
    return result


# -------------------------------------------------------------------------------------------------- local

_path_modules: dict[str, ModuleType] = {}
_path_lock = threading.Lock()


def _module_at(path: str) -> ModuleType:
    """Execute the ``.py`` file at ``path`` once per process (under a private module name) and keep it."""
    with _path_lock:
        if path in _path_modules:
            return _path_modules[path]
        if not os.path.isfile(path):
            raise HookLoadError(f"{path} does not exist")
        name = "the_loop_hook_" + hashlib.sha256(path.encode()).hexdigest()[:16]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise HookLoadError(f"{path} cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look a class's module up here
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        _path_modules[path] = module
        return module


def _local_executor(module: ModuleType, entry: HookEntry) -> LifecycleHooks:
    if entry.executor:
        found = getattr(module, entry.executor, None)
        if found is None:
            raise HookLoadError(f"executor {entry.executor!r} is not defined in {module.__name__}")
        if isinstance(found, LifecycleHooks):
            if entry.with_:
                raise HookLoadError(f"executor {entry.executor!r} is an instance already: it takes no `with`")
            return found
        if not (isinstance(found, type) and issubclass(found, LifecycleHooks)):
            raise HookLoadError(f"executor {entry.executor!r} is not a LifecycleHooks subclass or instance")
        cls = found
    else:
        classes = {
            value
            for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, LifecycleHooks) and value is not LifecycleHooks
        }
        if len(classes) != 1:
            found_names = ", ".join(sorted(c.__name__ for c in classes)) or "none"
            raise HookLoadError(
                f"expected exactly one LifecycleHooks subclass (found {found_names}); name one with `executor`"
            )
        (cls,) = classes
    try:
        return cls(**entry.with_)
    except Exception as exc:
        raise HookLoadError(f"{cls.__name__}(**with) raised {type(exc).__name__}: {exc}") from None


def load_entry(entry: HookEntry, config_path: Path) -> LoadedHook:
    """Build one enabled entry's executor; :class:`HookLoadError` naming the entry when it cannot be."""
    from the_loop.config.hooks import hook_target

    target = hook_target(entry, config_path)
    try:
        if entry.url:
            executor: Any = RemoteExecutor(
                entry.url, token_env=entry.token_env, headers=entry.headers, timeout=entry.timeout_seconds
            )
            handled: tuple[str, ...] = POINTS
        else:
            module = importlib.import_module(target) if entry.module else _module_at(target)
            executor = _local_executor(module, entry)
            handled = type(executor).handled_points()
    except HookLoadError as exc:
        raise HookLoadError(f"hook {entry.name}: {exc}") from None
    except BaseException as exc:  # an import-time error of the operator's code, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise HookLoadError(f"hook {entry.name}: loading {target} raised {type(exc).__name__}: {exc}") from None
    points = tuple(point for point in handled if entry.on is None or point in entry.on)
    return LoadedHook(entry.name, entry.required, points, executor)


# ----------------------------------------------------------------------------------------------- registry

_loaded: dict[int, tuple[LoadedConfig, list[LoadedHook]]] = {}
_registry_lock = threading.Lock()


def load_declared(config: LoadedConfig) -> list[LoadedHook]:
    """Load every enabled entry of ``config`` now (a daemon's start). Raises :class:`HookLoadError` on the first
    failure; on success emits ``hooks.loaded`` (when anything is declared) and keeps the result for the points."""
    from the_loop import events

    declared = list(config.core.hooks)  # checked by load_config already
    hooks = [load_entry(entry, config.ref.path) for entry in declared if entry.enabled]
    with _registry_lock:
        _loaded[id(config)] = (config, hooks)
    if declared:
        events.emit("hooks.loaded", hooks=[hook.name for hook in hooks], count=len(hooks), config=str(config.ref.path))
    return hooks


def _hooks_for(config: LoadedConfig) -> list[LoadedHook]:
    """The loaded hooks of ``config``, loading them lazily the first time (a one-shot command): a failure runs
    hookless and is reported once (``hooks.load_failed``)."""
    from the_loop import events

    with _registry_lock:
        found = _loaded.get(id(config))
    if found is not None and found[0] is config:
        return found[1]
    try:
        return load_declared(config)
    except HookLoadError as exc:
        with _registry_lock:
            _loaded[id(config)] = (config, [])
        events.emit("hooks.load_failed", level="warning", error=str(exc), strict=False)
        print(f"warning: lifecycle hooks not loaded, running without them: {exc}", file=sys.stderr)
        return []


def declared_hooks(config: LoadedConfig, point: str) -> Iterator[Hook]:
    """The chain's operator part at ``point``: each loaded entry that runs there, in declaration order."""
    for loaded in _hooks_for(config):
        if point in loaded.points:
            yield loaded.hook(point)


def reset() -> None:
    """Forget what was loaded (tests; a path module stays executed once per process)."""
    with _registry_lock:
        _loaded.clear()
