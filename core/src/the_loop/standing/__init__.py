"""Standing sessions (issue-277): named, long-lived harness sessions in tmux that no work item owns.

Identity is the name alone: tmux ``loop-standing-<name>`` and the record ``<state.root>/local/standing/<name>.json``
are always derived from it (never read from the file, so a hand-edited record cannot aim a kill). Nothing that
routes events reads this package's directory: a standing session is reachable only by name.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop.config.models import STANDING_NAME
from the_loop.state import Corrupt, atomic_write_json, load_json, quarantine

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig

_NAME = re.compile(STANDING_NAME)
REF_PREFIX = "standing:"


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name))


def tmux_name(name: str) -> str:
    """The tmux session of standing session ``name``; raises ValueError for a name that is not one."""
    if not valid_name(name):
        raise ValueError(f"not a standing-session name: {name!r}")
    return f"loop-standing-{name}"


def parse_ref(ref: str) -> str | None:
    """The one recogniser of a ``standing:<name>`` channel ref: the name, or None."""
    if not ref.startswith(REF_PREFIX):
        return None
    name = ref[len(REF_PREFIX) :]
    return name if valid_name(name) else None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def standing_dir(config: LoadedConfig) -> Path:
    return config.state.root / "local" / "standing"


def record_path(config: LoadedConfig, name: str) -> Path:
    tmux_name(name)  # the name guards the path too
    return standing_dir(config) / f"{name}.json"


def load_record(config: LoadedConfig, name: str) -> dict[str, Any] | None:
    """The record of ``name``; None when absent. A corrupt one is reported and moved aside (never overwritten)."""
    path = record_path(config, name)
    data = load_json(path)
    if data is Corrupt:
        quarantine(path)
        return None
    return data  # type: ignore[return-value]


def save_record(config: LoadedConfig, record: dict[str, Any]) -> None:
    atomic_write_json(record_path(config, record["name"]), record)


def recorded_names(config: LoadedConfig) -> list[str]:
    """Names with a record file (unreadable or mis-named files are skipped)."""
    directory = standing_dir(config)
    if not directory.is_dir():
        return []
    return sorted(path.stem for path in directory.glob("*.json") if valid_name(path.stem))


@dataclass(frozen=True)
class Definition:
    """A standing session as it should run: from config, else from its created record."""

    name: str
    declared: bool
    harness: str
    harness_args: tuple[str, ...]
    cwd: str
    description: str = ""
    prompt: str = ""
    prompt_file: str = ""
    auto_start: bool = True
    slack_enabled: bool = False
    slack_channel: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return tmux_name(self.name)


def declared(config: LoadedConfig) -> list[Definition]:
    """The sessions ``standingSessions`` declares, inheritance applied (none when the section is disabled)."""
    section = config.core.standing_sessions
    if not section.enabled:
        return []
    return [
        inherit(
            config,
            entry.name,
            declared=True,
            harness=entry.harness,
            harness_args=entry.harness_args,
            cwd=entry.cwd,
            description=entry.description,
            prompt=entry.prompt,
            prompt_file=entry.prompt_file,
            auto_start=entry.auto_start,
            slack_enabled=entry.slack.enabled,
            slack_channel=entry.slack.channel,
        )
        for entry in section.sessions
    ]


def inherit(
    config: LoadedConfig,
    name: str,
    *,
    declared: bool,
    harness: str | None = None,
    harness_args: list[str] | tuple[str, ...] | None = None,
    cwd: str | None = None,
    **given: Any,
) -> Definition:
    """A definition with what it leaves out inherited (S2), for a declared session and a created one alike:
    ``harness`` from ``routing.defaultHarness`` (else claude), omitted ``harnessArgs`` from the harness's launch
    arguments (an explicit empty list is none), ``cwd`` from ``routing.spawnWorkdir`` (else ``.``)."""
    from the_loop.config import harness_args as launch_args

    routing = config.core.routing
    chosen = harness or routing.default_harness or "claude"
    return Definition(
        name=name,
        declared=declared,
        harness=chosen,
        harness_args=tuple(harness_args) if harness_args is not None else launch_args(config, chosen),
        cwd=cwd if cwd is not None else (routing.spawn_workdir or "."),
        **given,
    )


def resolve(config: LoadedConfig, name: str) -> Definition | None:
    """Config first, then a created record; None when neither knows ``name``."""
    for definition in declared(config):
        if definition.name == name:
            return definition
    if not valid_name(name):
        return None
    record = load_record(config, name)
    if record is None:
        return None
    return Definition(
        name=name,
        declared=False,
        harness=str(record.get("harness") or "claude"),
        harness_args=tuple(str(arg) for arg in record.get("harnessArgs") or ()),
        cwd=str(record.get("cwd") or "."),
        description=str(record.get("description") or ""),
        prompt=str(record.get("prompt") or ""),
        auto_start=record.get("autoStart", True) is not False,
        slack_enabled=bool(record.get("slackEnabled")),
        slack_channel=str(record.get("slackChannel") or ""),  # where its thread is (or is to be) posted
    )


def all_names(config: LoadedConfig) -> list[str]:
    names = [definition.name for definition in declared(config)]
    return names + [name for name in recorded_names(config) if name not in names]
