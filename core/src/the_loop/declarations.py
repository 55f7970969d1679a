"""What a plugin declares, as plain values: a command, a config section, a setup step, an event type, a generated
path, a record attribute, a service. Core wires each up lazily (a command by import string, a section by its
model). This module imports nothing of core, so the state layout and the event log declare their own entries
with it; plugins reach the same classes through :mod:`the_loop.interfaces`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "Attribute",
    "AttributeKind",
    "CommandSpec",
    "ConfigSection",
    "EventType",
    "Finding",
    "GeneratedPath",
    "Press",
    "ServiceSpec",
    "SetupRequest",
    "SetupResult",
    "SetupSpec",
]


@dataclass(frozen=True)
class CommandSpec:
    """A CLI command contributed by a plugin. ``target`` is ``"module:attr"`` of a click command, imported only
    when the command runs, so ``--help`` costs nothing. ``parent`` names an existing group (``"channels"``)."""

    name: str
    help: str
    target: str
    parent: str | None = None


@dataclass(frozen=True)
class ConfigSection:
    """A config section a plugin owns. ``path`` is dotted (``"channels.slack"``); ``model`` is a pydantic model
    class or its ``"module:attr"`` import string; ``secrets`` names fields that hold env-var *names*."""

    path: str
    model: Any
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class SetupSpec:
    """A plugin's part of ``the-loop init``: the option ``--<name> <metavar>`` (asked with ``prompt`` when init runs
    in a terminal with no option) and ``options``, the plugin's further ``init`` options as ``(name, metavar,
    help)`` (no metavar: a flag). ``run`` is ``"module:function"``, called with a
    :class:`~the_loop.interfaces.SetupRequest` only when the option is given, returning a
    :class:`~the_loop.interfaces.SetupResult`."""

    name: str
    metavar: str
    help: str
    run: str
    prompt: str = ""
    options: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class EventType:
    """One event type of the catalog (``events --types``)."""

    name: str
    description: str


@dataclass(frozen=True)
class GeneratedPath:
    """A path under ``state.root`` that the-loop writes. ``path`` may hold placeholders (``<slug>``, ``<name>``);
    a trailing ``/`` marks a directory. ``portable`` paths travel between machines and may be tracked in git."""

    path: str
    portable: bool
    holds: str
    why: str
    owner: str = "core"


AttributeKind = Literal[
    "pointer", "human-decision", "repository-entity", "workspace-entity", "operator-ledger", "machine-handle", "derived"
]


@dataclass(frozen=True)
class Attribute:
    """One top-level key of a per-work-item record. ``file`` is ``"repository"`` (``docs/specs/<id>/
    work-item-state.json`` in the work item's checkout, the one a reviewer sees), ``"portable"``
    (``portable/<slug>.json``, the operator's file) or ``"local"`` (``local/<slug>.json``, this machine's).
    ``fields`` names, where it is declared, every key the section's entries may carry (seed 004's field tables)."""

    file: Literal["repository", "portable", "local"]
    key: str
    kind: AttributeKind
    holds: str
    owner: str = "core"
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class Press:
    """A person's press on a control a channel posted (Slack: a button or a menu), in the platform's own ids.
    ``message_id`` is the message the control answers (a kickoff's ``ts``), ``control_id`` the posted control
    itself (where the outcome is written back), ``action`` what was pressed (``kickoff-repo``) and ``value`` the
    option chosen. Kept here with the plain values so :mod:`the_loop.interfaces` stays small."""

    channel_id: str
    message_id: str
    control_id: str
    author_id: str
    action: str
    value: str


# -------------------------------------------------------------------------------------------------- setup


@dataclass(frozen=True)
class Finding:
    """Something that stops the-loop from working as configured, and what to do about it."""

    problem: str
    remedy: str


@dataclass
class SetupRequest:
    """What a plugin's setup step (:class:`SetupSpec`) is asked with: the value of its ``init`` option, its further
    options that were given (a flag as ``"yes"``), the label that arms an item, and ``confirm``, which asks the
    operator a yes/no question when init runs in a terminal (and answers no otherwise)."""

    value: str
    options: Mapping[str, str] = field(default_factory=dict)
    arming_label: str = "the-loop: auto-execute"
    confirm: Callable[[str], bool] = field(default=lambda _question: False)


@dataclass
class SetupResult:
    """A setup step's answer: its part of the new config (merged into core's: mappings key by key, lists gaining
    the items they lack), its ``findings`` (each with its remedy), ``notes`` for the operator (``[ok] …`` lines),
    ``summary`` lines saying what the part does, and ``usable``: False when there is nothing to point the config at
    (a refused token), so init writes nothing."""

    config: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    usable: bool = True

    @classmethod
    def refused(cls, finding: Finding) -> SetupResult:
        """Nothing to write, for this one reason."""
        return cls(findings=[finding], notes=[f"[!] {finding.problem}", f"     fix: {finding.remedy}"], usable=False)


@dataclass(frozen=True)
class ServiceSpec:
    """A long-running process `the-loop start` manages. ``run`` is ``"module:function"``, called with a
    :class:`ServiceContext`; ``problems`` names each missing credential or contradictory setting (the service
    then refuses to start and ``status`` shows why)."""

    name: str
    enabled: bool
    enabled_by: str
    pidfile: Path
    logfile: Path
    run: str
    problems: tuple[str, ...] = ()
    owner: str = "core"
    ingress: bool = False  # takes events in: it runs the router, the web terminal and the tmux preflight
    url: str = ""  # where a served service answers (status shows it and asks ``url + health``)
    health: str = ""  # the path of its health route, asked only while it runs
