"""The plugin host: builds the one plugin manager and is the only code that calls hooks.

Built-in plugins are registered first, then every entry point of group ``the_loop.plugins``. A plugin that fails to
import is recorded (``the-loop plugins`` shows it) and skipped; it never stops the daemon. Environment switches:

- ``THE_LOOP_DISABLE_PLUGINS=a,b`` blocks plugins by entry-point name;
- ``THE_LOOP_LOAD_PLUGINS=a,b`` loads only those entry points (``""`` loads none);
- ``THE_LOOP_EXTRA_PLUGINS=pkg.mod,other.mod`` also registers those modules by import path, without installing
  them (a test and operations switch: tests use it to give spawned daemons a fake ingress).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import TYPE_CHECKING, Any

import pluggy

from the_loop import ENTRY_POINT_GROUP, __version__, hookspecs

if TYPE_CHECKING:
    from the_loop.interfaces import (
        Attribute,
        Channel,
        CommandSpec,
        Config,
        ConfigSection,
        EventType,
        GeneratedPath,
        HarnessAdapter,
        ServiceSpec,
        SetupSpec,
        TicketProvider,
    )

DEFAULT_PLUGINS = ("the_loop.default_plugins.core",)


class PluginError(Exception):
    """Two plugins claim one provider name or scheme."""


@dataclass
class PluginInfo:
    """One plugin as ``the-loop plugins`` shows it."""

    name: str
    distribution: str
    version: str
    module: str
    builtin: bool
    error: str = ""
    contributions: dict[str, list[str]] = field(default_factory=dict)
    # Per harness adapter it registers: its capabilities (``tmux_hostable``, ``preassigned_session_id``, …).
    capabilities: dict[str, dict[str, bool]] = field(default_factory=dict)


def _env_names(variable: str) -> set[str] | None:
    value = os.environ.get(variable)
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


class PluginHost:
    """Typed facade over the pluggy manager. Build it with :meth:`create`; tests pass explicit plugins."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.infos: dict[str, PluginInfo] = {}

    # -------------------------------------------------------------------------------------------- building

    @classmethod
    def create(cls, *, load_entrypoints: bool = True, plugins: Iterable[tuple[str, object]] = ()) -> PluginHost:
        pm = pluggy.PluginManager("the_loop")
        for spec_class in hookspecs.SPEC_CLASSES:
            pm.add_hookspecs(spec_class)
        host = cls(pm)
        for module_name in DEFAULT_PLUGINS:
            module = importlib.import_module(module_name)
            host._register(module, module_name.rsplit(".", 1)[-1], "the-loop-core", __version__, builtin=True)
        if load_entrypoints:
            host._load_entrypoints()
            host._load_extra_modules()
        for name, plugin in plugins:
            host._register(plugin, name, "(test)", "", builtin=False)
        pm.check_pending()
        return host

    def _register(self, plugin: object, name: str, dist: str, version: str, *, builtin: bool) -> None:
        module = getattr(plugin, "__name__", type(plugin).__name__)
        info = PluginInfo(name=name, distribution=dist, version=version, module=module, builtin=builtin)
        if name in self.infos:
            info.error = f"plugin name {name!r} already registered by {self.infos[name].distribution}"
            self.infos[f"{name} ({dist})"] = info
            return
        self.pm.register(plugin, name=name)
        self.infos[name] = info

    def _load_entrypoints(self) -> None:
        from importlib.metadata import entry_points

        blocked = _env_names("THE_LOOP_DISABLE_PLUGINS") or set()
        allowed = _env_names("THE_LOOP_LOAD_PLUGINS")
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in blocked or (allowed is not None and ep.name not in allowed):
                continue
            dist = ep.dist.name if ep.dist else "?"
            version = ep.dist.version if ep.dist else "?"
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin is reported, never fatal
                self.infos[ep.name] = PluginInfo(
                    ep.name, dist, version, ep.value, builtin=False, error=f"{type(exc).__name__}: {exc}"
                )
                print(f"warning: plugin {ep.name} ({dist}) failed to load: {exc}", file=sys.stderr)
                continue
            self._register(plugin, ep.name, dist, version, builtin=False)

    def _load_extra_modules(self) -> None:
        """Register each module named in ``THE_LOOP_EXTRA_PLUGINS`` (in order), reported like an entry point."""
        names = [part.strip() for part in os.environ.get("THE_LOOP_EXTRA_PLUGINS", "").split(",") if part.strip()]
        for module_name in dict.fromkeys(names):
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:  # reported, never fatal, like a broken entry point
                error = f"{type(exc).__name__}: {exc}"
                self.infos[module_name] = PluginInfo(module_name, "(extra)", "", module_name, False, error=error)
                print(f"warning: plugin {module_name} (THE_LOOP_EXTRA_PLUGINS) failed to load: {exc}", file=sys.stderr)
                continue
            self._register(module, module_name, "(extra)", "", builtin=False)

    def unregister(self, name: str) -> None:
        self.pm.unregister(name=name)
        self.infos.pop(name, None)

    # ---------------------------------------------------------------------------------------- calling hooks

    def implementations(self, hook_name: str) -> list[Any]:
        """The implementations of ``hook_name`` in the one order every caller uses: ``tryfirst`` ones, then the
        rest in registration order (built-ins first; pluggy itself would call the last registered first), then
        ``trylast`` ones. Wrappers are left out: nothing here calls through pluggy's wrapper chain."""
        order = {name: index for index, (name, _plugin) in enumerate(self.pm.list_name_plugin())}
        found = [i for i in getattr(self.pm.hook, hook_name).get_hookimpls() if not (i.hookwrapper or i.wrapper)]
        return sorted(
            found, key=lambda i: (0 if i.tryfirst else 2 if i.trylast else 1, order.get(i.plugin_name, len(order)))
        )

    def _collect(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call every implementation of a list-returning hook on its own and attribute each item to its plugin.

        Implementations are called in :meth:`implementations` order; one that raises is reported on its plugin's
        info and skipped, so a broken plugin cannot take the others down.
        """
        results: list[tuple[str, Any]] = []
        for impl in self.implementations(hook_name):
            name = impl.plugin_name
            try:
                items = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
            except Exception as exc:
                message = f"{hook_name} raised {type(exc).__name__}: {exc}"
                if name in self.infos and message not in self.infos[name].error:
                    self.infos[name].error = "; ".join(filter(None, [self.infos[name].error, message]))
                print(f"warning: plugin {name}: {message}", file=sys.stderr)
                continue
            results.extend((name, item) for item in items or ())
        return results

    def _note(self, kind: str, pairs: list[tuple[str, Any]], label: Any) -> None:
        for plugin_name, item in pairs:
            info = self.infos.get(plugin_name)
            if info is not None:
                names = info.contributions.setdefault(kind, [])
                if label(item) not in names:
                    names.append(label(item))

    def commands(self) -> list[tuple[str, CommandSpec]]:
        pairs = self._collect("loop_register_commands")
        self._note("commands", pairs, lambda c: f"{c.parent} {c.name}" if c.parent else c.name)
        return pairs

    def setups(self) -> list[tuple[str, SetupSpec]]:
        pairs = self._collect("loop_register_setup")
        self._note("setup", pairs, lambda s: f"init --{s.name}")
        return pairs

    def config_sections(self) -> list[tuple[str, ConfigSection]]:
        pairs = self._collect("loop_config_sections")
        self._note("config sections", pairs, lambda s: s.path)
        return pairs

    def event_types(self) -> list[EventType]:
        pairs = self._collect("loop_event_types")
        self._note("event types", pairs, lambda e: e.name)
        return [item for _, item in pairs]

    def state_paths(self) -> list[GeneratedPath]:
        pairs = self._collect("loop_state_paths")
        return [item for _, item in pairs]

    def record_attributes(self) -> list[Attribute]:
        return [item for _, item in self._collect("loop_record_attributes")]

    def services(self, config: Config) -> list[ServiceSpec]:
        pairs = self._collect("loop_register_services", config=config)
        self._note("services", pairs, lambda s: s.name)
        seen: dict[str, ServiceSpec] = {}
        for _, spec in pairs:
            seen.setdefault(spec.name, spec)  # core first: a plugin cannot replace a core service
        return list(seen.values())

    def ingresses(self, config: Config) -> list[Any]:
        pairs = self._collect("loop_register_ingresses", config=config)
        self._note("ingresses", pairs, _ingress_label)
        return [item for _, item in pairs]

    def _named(self, hook_name: str, kind: str, attr: str) -> dict[str, Any]:
        pairs = self._collect(hook_name)
        self._note(kind, pairs, lambda cls: getattr(cls, attr))
        found: dict[str, Any] = {}
        for plugin_name, cls in pairs:
            name = getattr(cls, attr)
            if name in found:
                raise PluginError(f"{kind} {name!r} is provided twice (again by plugin {plugin_name})")
            found[name] = cls
        return found

    def harnesses(self) -> dict[str, type[HarnessAdapter]]:
        return self._named("loop_register_harnesses", "harnesses", "name")

    def ticket_providers(self) -> dict[str, type[TicketProvider]]:
        return self._named("loop_register_ticketing", "ticketing", "scheme")

    def channels(self) -> dict[str, type[Channel]]:
        return self._named("loop_register_channels", "channels", "name")

    def describe(self) -> list[PluginInfo]:
        """Every plugin with everything it contributes (for ``the-loop plugins``)."""
        self.commands()
        self.config_sections()
        self.setups()
        self.event_types()
        harnesses = self._collect("loop_register_harnesses")
        self._note("harnesses", harnesses, lambda cls: cls.name)
        for plugin_name, cls in harnesses:
            capabilities = getattr(cls, "capabilities", None)
            if plugin_name in self.infos and is_dataclass(capabilities) and not isinstance(capabilities, type):
                self.infos[plugin_name].capabilities[cls.name] = asdict(capabilities)
        for hook_name, kind, attr in (
            ("loop_register_ticketing", "ticketing", "scheme"),
            ("loop_register_channels", "channels", "name"),
        ):
            self._note(kind, self._collect(hook_name), lambda cls, attr=attr: getattr(cls, attr))
        return list(self.infos.values())


def _ingress_label(ingress: Any) -> str:
    """``github (webhook /gh-webhook)``, ``jira (poll source)``: what ``the-loop plugins`` shows for an ingress."""
    from the_loop.interfaces import PollSource, WebhookIngress

    name = getattr(ingress, "name", type(ingress).__name__)
    if isinstance(ingress, WebhookIngress):
        return f"{name} (webhook {ingress.path})"
    if isinstance(ingress, PollSource):
        return f"{name} (poll source)"
    return str(name)


_host: PluginHost | None = None


def get_host() -> PluginHost:
    """The process-wide host, built on first use (the CLI and daemons); tests build their own."""
    global _host
    if _host is None:
        _host = PluginHost.create()
    return _host


def built_host() -> PluginHost | None:
    """The process-wide host if it was built or set already, else None (nothing is built)."""
    return _host


def set_host(host: PluginHost | None) -> None:
    global _host
    _host = host
