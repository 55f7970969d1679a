"""Finding, reading and checking ``cli-config.yaml``.

Resolution order: ``-c/--config`` > ``$THE_LOOP_CLI_CONFIG`` > ``./.the-loop/cli-config.yaml`` (if a file) >
``~/.the-loop/cli-config.yaml``. A missing file means a fresh install: defaults apply. Every problem with the file
raises :class:`ConfigError` with one line naming the file and the key; the CLI prints it as ``error: …`` and exits 2.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from the_loop.config.errors import ConfigError
from the_loop.state import DEFAULT_STATE_ROOT, StateLayout

if TYPE_CHECKING:
    from pydantic import BaseModel

    from the_loop.config.models import CoreConfig
    from the_loop.interfaces import TicketProvider
    from the_loop.plugins import PluginHost
    from the_loop.refs import WorkItemRef
    from the_loop.state.registry import SessionRegistry
    from the_loop.state.store import WorkItemStore

CONFIG_ENV = "THE_LOOP_CLI_CONFIG"
CONFIG_NAME = "cli-config.yaml"


@dataclass(frozen=True)
class ConfigRef:
    """Which config file was chosen, and why."""

    path: Path
    source: Literal["flag", "env", "cwd", "home"]

    @property
    def exists(self) -> bool:
        return self.path.is_file()


def resolve_config_path(flag: str | os.PathLike[str] | None = None) -> ConfigRef:
    """Pick the config file; cheap (no reads), so commands can show provenance before loading."""
    # abspath, not Path.absolute(): a relative "../x" becomes one clean path, the same in every child process.
    if flag:
        return ConfigRef(Path(os.path.abspath(Path(flag).expanduser())), "flag")
    from_env = os.environ.get(CONFIG_ENV)
    if from_env:
        return ConfigRef(Path(os.path.abspath(Path(from_env).expanduser())), "env")
    local = Path.cwd() / ".the-loop" / CONFIG_NAME
    if local.is_file():
        return ConfigRef(local.absolute(), "cwd")
    return ConfigRef(Path.home() / ".the-loop" / CONFIG_NAME, "home")


def state_root_for(config_path: Path, root: str) -> Path:
    """Anchor ``state.root``: ``~`` expanded, absolute kept, relative beside the config file — or beside its
    parent when the config sits in a ``.the-loop`` folder, so ``<repo>/.the-loop/cli-config.yaml`` →
    ``<repo>/.the-loop``. Never the cwd."""
    path = Path(root).expanduser()
    if path.is_absolute():
        return path
    anchor = config_path.parent
    if anchor.name == ".the-loop":
        anchor = anchor.parent
    return (anchor / path).absolute()


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse a config file into a mapping, or raise ConfigError naming the file (and line)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"{path}:{where}: {problem}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the document must be a mapping of keys, not {type(doc).__name__}")
    return doc


@dataclass
class LoadedConfig:
    """A config that loaded: its provenance, raw mapping, core model, state layout and warnings, and the plugin
    host it was loaded with. The host travels with the config because the sections it validated mean something
    only with those plugins; everything that needs an installed provider asks ``config.host``, never a global."""

    ref: ConfigRef
    raw: dict[str, Any]
    core: CoreConfig
    state: StateLayout
    host: PluginHost = field(repr=False, compare=False)
    warnings: list[str] = field(default_factory=list)
    sections: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unknown_keys: list[str] = field(default_factory=list)  # key paths no core or plugin section claims
    env_file_names: list[str] = field(default_factory=list)  # every name env.file defines

    def section(self, path: str) -> Any:
        """A plugin's validated section model (defaults when the key is absent)."""
        return self.sections[path]

    @functools.cached_property
    def store(self) -> WorkItemStore:
        """The portable records under this config's state (``portable/``), with its plugins' sections and ticket
        links."""
        from the_loop.state.store import WorkItemStore  # start-up speed: status and events never open it

        return WorkItemStore(self.state, config=self)

    @functools.cached_property
    def registry(self) -> SessionRegistry:
        """The session records under this config's state (``local/``)."""
        from the_loop.state.registry import SessionRegistry  # start-up speed: status and events never open it

        return SessionRegistry(self.state)

    def raw_at(self, path: str) -> Any:
        return _raw_at(self.raw, path)

    def tickets(self, ref: WorkItemRef) -> TicketProvider | None:
        """The ticketing provider the host has for ``ref``'s scheme, built with this config; None when none is
        installed."""
        cls = self.host.ticket_providers().get(ref.provider)
        return cls(self) if cls is not None else None  # type: ignore[arg-type]


def _raw_at(raw: Mapping[str, Any], path: str) -> Any:
    node: Any = raw
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _import(target: Any) -> Any:
    if not isinstance(target, str):
        return target
    import importlib

    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _location(prefix: str, loc: tuple[Any, ...], model: type[BaseModel]) -> str:
    """Turn a pydantic error location into the YAML key path (aliases, list indexes)."""
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts[-1] = f"{parts[-1]}[{item}]" if parts else f"[{item}]"
        else:
            parts.append(str(item))
    return ".".join(parts)


def validate_section(model: type[BaseModel], raw: Any, prefix: str, path: Path, root: Any = None) -> Any:
    """``raw`` validated by ``model``; the whole file's mapping is the validation context's ``root``, so a plugin's
    section can check what it depends on elsewhere (Jira: the arming labels must have a Jira-safe form)."""
    from pydantic import ValidationError

    try:
        return model.model_validate(raw if raw is not None else {}, context={"root": root})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = _location(prefix, tuple(first["loc"]), model) or prefix or "(top level)"
        message = first["msg"]
        if first["type"] == "missing":
            message = "is required"
        raise ConfigError(f"{path}: {key}: {message}") from None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold, through unions, lists and dicts."""
    from typing import get_args

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def unknown_keys(raw: Any, model: type[BaseModel] | None, prefix: str, claimed: Mapping[str, Any]) -> list[str]:
    """Every key path in ``raw`` that neither ``model`` nor a claimed plugin section accounts for."""
    from typing import get_origin

    found: list[str] = []
    if not isinstance(raw, Mapping):
        return found
    fields = {}
    if model is not None:
        for name, info in model.model_fields.items():
            fields[info.alias or name] = info.annotation
    for key, value in raw.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if path in claimed:
            found.extend(unknown_keys(value, claimed[path], path, claimed))  # a plugin's section, its own model
        elif key in fields:
            annotation = fields[key]
            models = _models_in(annotation)
            if not models:
                continue
            if isinstance(value, list):
                items: list[tuple[str, Any]] = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
            elif isinstance(value, Mapping) and get_origin(annotation) is dict:
                items = [(f"{path}.{name}", item) for name, item in value.items()]
            else:
                items = [(path, value)]
            for item_path, item in items:
                found.extend(unknown_keys(item, models[0], item_path, claimed))
        elif any(c.startswith(path + ".") for c in claimed):
            found.extend(unknown_keys(value, None, path, claimed))  # a namespace holding plugin sections
        else:
            found.append(path)
    return found


def load_env_file(path: Path) -> tuple[list[str], list[str]]:
    """Load ``NAME=value`` lines into the environment without overriding what is set. Refuses a file that
    others can read; reports bad lines by number, never by content. Returns the warnings and every name the file
    defines (whether or not it was already set: sessions never inherit them, see :func:`session_withheld_env`)."""
    from dotenv.parser import parse_stream

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"env.file: {path} does not exist") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"env.file: {path} is readable by others (mode {stat.S_IMODE(mode):04o}); run chmod 600 {path}"
        )
    warnings = []
    names = []
    with path.open(encoding="utf-8") as stream:
        for binding in parse_stream(stream):
            if binding.error:
                warnings.append(f"env.file: {path}: line {binding.original.line} is not NAME=value; skipped")
                continue
            if binding.key:
                names.append(binding.key)
                if binding.key not in os.environ:
                    os.environ[binding.key] = binding.value or ""
    return warnings, names


def read_raw(flag: str | os.PathLike[str] | None) -> tuple[ConfigRef, dict[str, Any]]:
    """The config file the-loop would read (:func:`resolve_config_path`) and its mapping, unvalidated."""
    ref = resolve_config_path(flag)
    if ref.source in ("flag", "env") and not ref.exists and ref.path.exists():
        raise ConfigError(f"{ref.path}: not a file")
    return ref, read_yaml(ref.path)


def refuse_retired(raw: Mapping[str, Any], path: Path) -> list[str]:
    """Refuse (:class:`ConfigError`, naming ``the-loop migrate-config``) a file older than this CLI reads or one
    using a retired key; the warning for a file newer than it knows. Keys that moved state (``polling.stateFile``)
    are among the retired ones, so even a command that reads only the state must ask this first."""
    from the_loop.config.migrations import (
        CURRENT_CONFIG_VERSION,
        OLDEST_CONFIG_VERSION,
        find_retired,
        version_too_old,
        version_tuple,
    )

    if version_too_old(raw):
        raise ConfigError(
            f"{path}: version: {raw['version']} is older than {OLDEST_CONFIG_VERSION}, the oldest this "
            f"CLI reads; run `the-loop migrate-config` (it rewrites it as {CURRENT_CONFIG_VERSION})"
        )
    retired = [change for change in find_retired(raw) if not change.key.startswith("version ")]
    if retired:
        first = retired[0]
        more = f" (and {len(retired) - 1} more)" if len(retired) > 1 else ""
        raise ConfigError(
            f"{path}: {first.key} is retired (replaced by {first.replacement}){more}; "
            "run `the-loop migrate-config` to rewrite it"
        )
    declared = raw.get("version")
    if declared and version_tuple(str(declared)) > version_tuple(CURRENT_CONFIG_VERSION):
        return [f"config: version {declared} is newer than {CURRENT_CONFIG_VERSION}, the newest this CLI knows"]
    return []


def load_config(
    flag: str | os.PathLike[str] | None, host: PluginHost, *, load_env: bool = True, leave_out: tuple[str, ...] = ()
) -> LoadedConfig:
    """Resolve, read, migrate-check and validate the config against ``host``'s plugin sections. Raises
    :class:`ConfigError`. ``leave_out`` names top-level sections read as absent: a command that never needs one
    (``standing stop``, which works from the records) is not refused for a mistake in it."""
    from the_loop.config.models import CoreConfig

    ref, raw = read_raw(flag)
    raw = {key: value for key, value in raw.items() if key not in leave_out}
    warnings = refuse_retired(raw, ref.path)

    state = raw.get("state")
    if isinstance(state, dict) and "root" in state and not isinstance(state["root"], str):
        warnings.append(f"config: state.root must be a string, not {type(state['root']).__name__}; using .the-loop")
        raw = {**raw, "state": {k: v for k, v in state.items() if k != "root"}}

    from the_loop.config.hooks import check_declaration

    raw = check_declaration(raw, ref.path)  # strict: one line naming a bad hooks[] entry
    core = validate_section(CoreConfig, raw, "", ref.path)
    _check_fleet(core, ref.path)
    if core.routing.runner != "tmux":
        warnings.append(f"config: routing.runner: {core.routing.runner!r} is ignored; sessions always run in tmux")

    claimed: dict[str, Any] = {}
    secrets: dict[str, tuple[str, ...]] = {}
    for _plugin, section in host.config_sections():
        claimed[section.path] = _import(section.model)
        secrets[section.path] = section.secrets
    sections = {
        path: validate_section(model, _raw_at(raw, path), path, ref.path, raw) for path, model in claimed.items()
    }
    unclaimed = unknown_keys(raw, CoreConfig, "", claimed)
    warnings.extend(f"config: unknown key {key}" for key in unclaimed)

    layout = StateLayout(
        root=state_root_for(ref.path, core.state.root),
        registry_dir=core.routing.registry_dir,
        event_log=core.event_log.path,
        gh_webhook_pidfile=core.webhooks.gh_webhook.pidfile,
    )
    loaded = LoadedConfig(
        ref=ref,
        raw=raw,
        core=core,
        state=layout,
        host=host,
        warnings=warnings,
        sections=sections,
        unknown_keys=unclaimed,
    )
    loaded.secrets = secrets
    env_path = env_file_path(loaded)
    if load_env and env_path is not None:
        file_warnings, loaded.env_file_names = load_env_file(env_path)
        warnings.extend(file_warnings)
    return loaded


def _check_fleet(core: Any, path: Path) -> None:
    """A fleet needs this machine's name; a gateway or worker role needs a fleet (one line naming the key)."""
    if core.fleet.enabled and not core.instance.name:
        raise ConfigError(f"{path}: instance.name: is required when fleet.nats.servers is set (each machine's own)")
    if not core.fleet.enabled and core.instance.role != "both":
        raise ConfigError(f"{path}: instance.role: {core.instance.role} needs a fleet (set fleet.nats.servers)")


def env_file_path(config: LoadedConfig) -> Path | None:
    """The ``env.file`` the config names (``~`` expanded, relative to the config file's folder), or None."""
    if not config.core.env.file:
        return None
    path = Path(config.core.env.file).expanduser()
    return path if path.is_absolute() else config.ref.path.parent / path


# Where each StateLayout field comes from in the file (the keys load_config validates), and its default there.
_LAYOUT_KEYS = {
    "root": (("state", "root"), DEFAULT_STATE_ROOT),
    "registry_dir": (("routing", "registryDir"), ""),
    "event_log": (("eventLog", "path"), ""),
    "gh_webhook_pidfile": (("webhooks", "ghWebhook", "pidfile"), ""),
}


def read_layout(flag: str | os.PathLike[str] | None) -> StateLayout | None:
    """Where the state lives, read from the config file without validating the rest: for a command that reads
    only state files (``events``), so it costs a YAML read instead of every config model and plugin.

    The file is refused as :func:`load_config` refuses it (too old, a retired key), and the four keys are read
    as it reads them. None when one is not plainly a string (a wrong
    type, or a key also given in its snake_case spelling, which the models accept too): the caller then loads the
    whole config, so the error or warning is the one the operator would see anyway. Raises :class:`ConfigError`
    for a file that cannot be read.
    """
    ref, raw = read_raw(flag)
    refuse_retired(raw, ref.path)  # its newer-version warning is the full load's to print
    values: dict[str, str] = {}
    for field_name, (keys, default) in _LAYOUT_KEYS.items():
        node: Any = raw
        for key in keys[:-1]:
            node = node.get(key, {}) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return None
        snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in keys[-1])
        value = node.get(keys[-1], default)
        if not isinstance(value, str) or (snake != keys[-1] and snake in node):
            return None
        values[field_name] = value
    root = values.pop("root")
    return StateLayout(root=state_root_for(ref.path, root), **values)


def harness_args(config: LoadedConfig, name: str) -> tuple[str, ...]:
    """The extra arguments ``routing.harnessArgs`` gives harness ``name`` (after core's, before the prompt)."""
    return tuple(config.core.routing.harness_args.get(name, ()))


def secret_env_names(config: LoadedConfig) -> list[str]:
    """Every environment variable the config names as holding a secret (never a value): the webhook secret, the
    web terminal's credential, the plugins' declared secret keys and the remote lifecycle hooks' bearer tokens."""
    names = [
        config.core.webhooks.gh_webhook.secret_env,
        config.core.routing.web_terminal.token_env,
        *(hook.token_env for hook in config.core.hooks),
    ]
    for path, fields in config.secrets.items():
        section = config.sections.get(path)
        for dotted in fields:
            value: Any = section
            for part in dotted.split("."):
                value = getattr(value, _snake(part), None)
            names.extend([value] if isinstance(value, str) else list(value or []))
    return [name for name in dict.fromkeys(names) if name]


def session_withheld_env(config: LoadedConfig) -> list[str]:
    """What agent sessions never inherit: every secret the config names and every variable ``env.file`` defines,
    less what ``env.sessionPassthrough`` lists (the built-in credential names are withheld regardless)."""
    passthrough = set(config.core.env.session_passthrough)
    names = dict.fromkeys([*secret_env_names(config), *config.env_file_names])
    return [name for name in names if name not in passthrough]


def _snake(name: str) -> str:
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def print_warnings(warnings: Iterable[str]) -> None:
    """Print each config warning once, on stderr."""
    for warning in dict.fromkeys(warnings):
        print(f"warning: {warning}", file=sys.stderr)
