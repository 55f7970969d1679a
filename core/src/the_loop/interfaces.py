"""What a plugin hands to core: declarations (plain dataclasses) and provider interfaces (abstract classes).

Declarations describe things core wires up lazily — a command by import string, a config section by its model,
an event type, a generated path, a service. Providers are small classes a plugin registers through a
``loop_register_*`` hook; core looks them up by ``name`` and calls their methods. Nothing here imports pydantic
or any client library, so the CLI can build ``--help`` from declarations alone.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from the_loop.config import LoadedConfig
    from the_loop.refs import WorkItemRef

__all__ = [
    "Attribute",
    "Capabilities",
    "Channel",
    "CommandSpec",
    "ConfigSection",
    "EventType",
    "GeneratedPath",
    "HarnessAdapter",
    "Launch",
    "Listener",
    "PollSource",
    "ServiceContext",
    "ServiceSpec",
    "TicketProvider",
    "WebhookIngress",
    "WebhookResponse",
]


# --------------------------------------------------------------------------------------------- declarations


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


AttributeKind = Literal["workspace-entity", "operator-ledger", "machine-handle", "derived"]


@dataclass(frozen=True)
class Attribute:
    """One top-level key of a per-work-item record. ``file`` is ``"portable"`` (``portable/<slug>.json``, the
    operator's file) or ``"local"`` (``local/<slug>.json``, this machine's)."""

    file: Literal["portable", "local"]
    key: str
    kind: AttributeKind
    holds: str
    owner: str = "core"


@dataclass
class ServiceContext:
    """What a running service gets: the loaded config, a stop flag it must honour, and ``once`` for one cycle."""

    config: LoadedConfig
    should_stop: Callable[[], bool]
    once: bool = False


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


# ------------------------------------------------------------------------------------------------ ingress


@dataclass(frozen=True)
class WebhookResponse:
    status: int
    body: Mapping[str, Any] = field(default_factory=dict)


class WebhookIngress(abc.ABC):
    """A route on core's one HTTP server. ``handle`` verifies and normalizes a delivery and must have written
    it to the durable inbox before it answers 2xx; it never touches tmux."""

    name: ClassVar[str]
    path: str
    methods: tuple[str, ...] = ("POST",)

    @abc.abstractmethod
    def handle(self, headers: Mapping[str, str], body: bytes) -> WebhookResponse:
        """Answer one request. Called on a worker thread; must not raise for bad input (answer 4xx instead)."""


class PollSource(abc.ABC):
    """A poll ingress: one cycle over its scopes yields events, closures and scope health."""

    name: ClassVar[str]

    @abc.abstractmethod
    def poll_once(self, context: ServiceContext) -> Mapping[str, Any]:
        """Run one cycle and return its counters (``itemsSeen``, ``scopesPolled``, ``scopesFailed`` …)."""


class Listener(abc.ABC):
    """A long-running ingress loop (Socket Mode). ``run`` returns when ``context.should_stop()``."""

    name: ClassVar[str]

    @abc.abstractmethod
    def run(self, context: ServiceContext) -> None: ...


# ---------------------------------------------------------------------------------------------- ticketing


class TicketProvider(abc.ABC):
    """Everything core asks of a ticket tracker for the refs of one scheme (``github``, ``jira``).

    Core builds one per process with the loaded config; credentials are read from the environment at call time.
    """

    scheme: ClassVar[str]

    def __init__(self, config: LoadedConfig) -> None:
        self.config = config

    def url(self, ref: WorkItemRef) -> str | None:
        """The work item's page, or None when none can be derived safely."""
        return None

    @abc.abstractmethod
    def validate(self, ref: WorkItemRef) -> None:
        """Raise ``RefError`` when the ref is not one this tracker accepts."""

    @abc.abstractmethod
    def post_comment(self, ref: WorkItemRef, body: str) -> str:
        """Post ``body`` (already self-marked) and return the new comment's id."""

    @abc.abstractmethod
    def item_state(self, ref: WorkItemRef) -> Literal["open", "closed", "merged", "missing", "unknown"]: ...

    @abc.abstractmethod
    def labels(self, ref: WorkItemRef) -> list[str]: ...

    def react(self, ack: Mapping[str, str], reaction: str) -> None:
        """Put ``reaction`` (``eyes``, ``hooray``, …) on the object ``ack`` names (an event's ``ack``); best-effort,
        may raise. Trackers without reactions do nothing."""
        return None

    @abc.abstractmethod
    def is_self_authored(self, text: str) -> bool:
        """True when ``text`` carries the-loop's self marker."""

    @abc.abstractmethod
    def mark(self, text: str) -> str:
        """Return ``text`` with the self marker added."""


# ------------------------------------------------------------------------------------------------ channel


class Channel(abc.ABC):
    """A conversation surface (Slack). Core owns bindings, cursors, the outbox and authorization."""

    name: ClassVar[str]

    def __init__(self, config: LoadedConfig) -> None:
        self.config = config

    @classmethod
    def enabled(cls, config: LoadedConfig) -> bool:
        """Whether ``config`` turns this channel on (a channel that is installed is not necessarily used)."""
        return False

    @abc.abstractmethod
    def open_conversation(self, ref: WorkItemRef, title: str) -> Mapping[str, Any]:
        """Open the work item's conversation and return its binding (channel id, thread, permalink)."""

    @abc.abstractmethod
    def publish(self, binding: Mapping[str, Any], text: str) -> None:
        """Post ``text`` into a bound conversation; raise to leave it for the undelivered queue."""

    @abc.abstractmethod
    def health(self) -> str:
        """One line saying whether the channel is usable (never a secret)."""


# ---------------------------------------------------------------------------------------- harness adapter


@dataclass(frozen=True)
class Capabilities:
    """What a harness can do. Only a tmux-hostable harness with a pre-assignable id can be a default harness."""

    tmux_hostable: bool
    preassigned_session_id: bool
    can_resume: bool


@dataclass(frozen=True)
class Launch:
    """One spawn: the boot prompt, the conversation id (fresh or recorded), the directory and extra args."""

    prompt: str
    session_id: str
    cwd: Path
    args: tuple[str, ...] = ()


class HarnessAdapter(abc.ABC):
    """An agent CLI that core can host in tmux. Core owns argv order checks, tmux and file-write discipline;
    the adapter only answers questions."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def __init__(self, config: LoadedConfig) -> None:
        self.config = config

    @abc.abstractmethod
    def fresh_argv(self, launch: Launch) -> list[str]:
        """The full argv (binary first) of a fresh conversation with ``launch.session_id``."""

    @abc.abstractmethod
    def resume_argv(self, launch: Launch) -> list[str]:
        """The full argv that resumes conversation ``launch.session_id``."""

    def prepare(self, cwd: Path) -> list[str]:
        """Pre-spawn preparation of the harness's own config (trust, plugin enabling), called before every
        spawn and both halves of a respawn. Returns what it changed, for the event log."""
        return []
