"""What a plugin hands to core: declarations (plain dataclasses) and provider interfaces (abstract classes).

Declarations describe things core wires up lazily — a command by import string, a config section by its model,
an event type, a generated path, a service. Providers are small classes a plugin registers through a
``loop_register_*`` hook; core looks them up by ``name`` and calls their methods. Nothing here imports pydantic
or any client library, so the CLI can build ``--help`` from declarations alone.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from the_loop.declarations import (
    Attribute,
    CommandSpec,
    ConfigSection,
    EventType,
    Finding,
    GeneratedPath,
    Press,
    ServiceSpec,
    SetupRequest,
    SetupResult,
    SetupSpec,
)

if TYPE_CHECKING:
    from the_loop.refs import WorkItemRef

__all__ = [
    "Attribute",
    "BlockedPrompt",
    "Capabilities",
    "Channel",
    "ChannelError",
    "ChannelMessage",
    "ChoiceKind",
    "CommandSpec",
    "Config",
    "ConfigSection",
    "EventType",
    "Finding",
    "GeneratedPath",
    "HarnessAdapter",
    "InboundMessage",
    "Launch",
    "Listener",
    "PollSource",
    "Press",
    "PromptOption",
    "ReadingChannel",
    "ReadyCheck",
    "ServiceContext",
    "ServiceSpec",
    "SetupRequest",
    "SetupResult",
    "SetupSpec",
    "TicketProvider",
    "Usage",
    "UsageRead",
    "Verdict",
    "WebhookIngress",
    "WebhookResponse",
]


# The declarations (CommandSpec … Attribute) live in a module of their own, which imports nothing of core: the
# state layout and the event log declare their own with them. They are part of this module's API all the same.


class Config(Protocol):
    """A loaded config, as the plugin API sees it: what providers are built with and hooks are called with.

    :class:`the_loop.config.LoadedConfig` is the one there is. The root API imports no layer, so the layers' types
    are named here, not imported: ``ref`` is a :class:`~the_loop.config.ConfigRef`, ``core`` core's validated
    :class:`~the_loop.config.models.CoreConfig`, ``state`` the :class:`~the_loop.state.StateLayout`, ``host``
    the :class:`~the_loop.plugins.PluginHost` it was loaded with, ``store`` the portable records
    (:class:`~the_loop.state.store.WorkItemStore`) and ``registry`` the session records
    (:class:`~the_loop.state.registry.SessionRegistry`) under that state. A plugin that wants them typed annotates
    its own code with ``LoadedConfig``.
    """

    ref: Any
    raw: dict[str, Any]
    core: Any
    state: Any
    host: Any
    sections: dict[str, Any]
    store: Any
    registry: Any

    def section(self, path: str) -> Any:
        """A plugin's validated section model (defaults when the key is absent)."""

    def raw_at(self, path: str) -> Any:
        """The raw value at a dotted key path, None when absent."""

    def tickets(self, ref: WorkItemRef) -> TicketProvider | None:
        """The ticketing provider for ``ref``'s scheme, built with this config; None when none is installed."""


@dataclass
class ServiceContext:
    """What a running service gets: the loaded config (and the one in force now), a stop flag it must honour, and
    ``once`` for one cycle."""

    config: Config
    should_stop: Callable[[], bool]
    once: bool = False
    latest: Callable[[], Config] | None = None  # the daemon's ConfigWatcher.current

    def current_config(self) -> Config:
        """The config in force now: reloaded when the file's content changed (issue-222), else ``config``."""
        return self.latest() if self.latest is not None else self.config


# ------------------------------------------------------------------------------------------------ ingress


@dataclass(frozen=True)
class WebhookResponse:
    status: int
    body: Mapping[str, Any] = field(default_factory=dict)


# Set by core's HTTP server on every request a route handles: the client's address, for the route's own log lines
# (a value the client sent under this name is replaced, so it cannot be forged).
PEER_HEADER = "x-the-loop-peer"


class WebhookIngress(abc.ABC):
    """A route on core's one HTTP server. ``handle`` verifies and normalizes a delivery and must have written
    it to the durable inbox before it answers 2xx; it never touches tmux."""

    name: ClassVar[str]
    path: str
    methods: tuple[str, ...] = ("POST",)

    @abc.abstractmethod
    def handle(self, headers: Mapping[str, str], body: bytes) -> WebhookResponse:
        """Answer one request. Called on a worker thread; must not raise for bad input (answer 4xx instead).
        ``headers`` are lower-cased and carry :data:`PEER_HEADER`."""

    def problems(self) -> list[str]:
        """What stops this route from serving (a missing secret): the receiver refuses to start on any, and
        ``status`` / ``config validate`` show them. Cheap and side-effect free; names env vars, never values."""
        return []


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

    def __init__(self, config: Config) -> None:
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

    def delivered_items(self, ref: WorkItemRef) -> list[WorkItemRef] | None:
        """The work items the pull request ``ref`` closes, as the tracker itself records them (GitHub's closing
        references); None when unknown or not applicable — the router then relies on the event's own linkage."""
        return None

    def close_keys(self, ref: WorkItemRef) -> list[str]:
        """The dedupe keys this tracker's ingresses give ``ref``'s close events. A reopen makes the inbox forget
        them, so closing the item again is a new event rather than a duplicate of the first close."""
        return []

    def code_repository(self, ref: WorkItemRef) -> str | None:
        """``[HOST/]OWNER/REPO`` where a key-form ref's code lives (Jira: the project's mapped repository), checked
        out for its session when workspaces are on; None when the tracker maps none (the session runs in
        ``routing.spawnWorkdir``). Repository-form refs name their own and are never asked."""
        return None

    def attachments(self, text: str) -> Sequence[Mapping[str, Any]]:
        """The files a comment's ``text`` links on this tracker (``id``, ``name``, ``url``); core fetches them with
        ``fetch_attachment(url, limit)`` when the tracker has it, once the comment goes into a live session."""
        return ()

    def react(self, ack: Mapping[str, str], reaction: str) -> None:
        """Put ``reaction`` (``eyes``, ``hooray``, …) on the object ``ack`` names (an event's ``ack``); best-effort,
        may raise. Trackers without reactions do nothing."""
        return None

    def create_issue(self, repository: str, title: str, body: str, labels: Sequence[str]) -> WorkItemRef:
        """Open a new work item in declared ``repository`` (a Slack kickoff); raise when the tracker cannot."""
        raise NotImplementedError(f"{type(self).__name__} cannot create work items")

    @abc.abstractmethod
    def is_self_authored(self, text: str) -> bool:
        """True when ``text`` carries the-loop's self marker."""

    @abc.abstractmethod
    def mark(self, text: str) -> str:
        """Return ``text`` with the self marker added."""


# ------------------------------------------------------------------------------------------------ channel


class ChannelError(Exception):
    """A channel call that failed. ``retry_after`` (seconds) is the platform's own wait (HTTP 429 ``Retry-After``),
    honoured by the undelivered queue."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class ChannelMessage:
    """One work-item event to post (``comment.agent``, ``session.awaiting_input``, ``work-item.closed`` …).
    ``max_chars`` is the channel's own limit, already resolved; the channel renders within it."""

    event_type: str
    work_item: str
    text: str = ""
    url: str = ""
    actor: str = ""
    max_chars: int = 1500


@dataclass(frozen=True)
class InboundMessage:
    """One message read from a conversation, in the platform's own ids. ``thread_id`` is the root's id (a bound
    conversation) or the message's own for a top-level one; ``subtype`` is empty for a plain message; ``files`` is
    the metadata (id, name, size, url, mimetype, permalink) of files attached to it, never their content."""

    channel_id: str
    thread_id: str
    message_id: str
    author_id: str
    text: str
    is_bot: bool = False
    subtype: str = ""
    files: tuple[Mapping[str, Any], ...] = ()


class Channel(abc.ABC):
    """A conversation surface (Slack, Teams, Discord): one conversation per work item beside its ticket.

    The channel owns only its transport, rendering and the platform's identities. Core owns the rest: the binding
    (``channels.<name>`` of the portable record, decided under a lock so one work item never gets two roots), read
    cursors, the undelivered queue, authorization (``routing.authorizedUsers[].<name>``), the ticket mirror and
    delivery. This interface publishes; a channel whose replies steer the session implements
    :class:`ReadingChannel` as well. Credentials are read from the environment at call time, never stored.
    """

    name: ClassVar[str]

    def __init__(self, config: Config) -> None:
        self.config = config

    @classmethod
    def enabled(cls, config: Config) -> bool:
        """Whether ``config`` turns this channel on (a channel that is installed is not necessarily used)."""
        return False

    def subscribed(self) -> Collection[str]:
        """The event types this channel posts (its ``subscribe`` setting)."""
        return ()

    def max_chars(self) -> int:
        """The longest text one post may carry."""
        return 1500

    @abc.abstractmethod
    def open_conversation(self, ref: WorkItemRef, title: str) -> Mapping[str, Any]:
        """Post the work item's root message and return its binding: ``channel`` (id), ``thread`` (the root's
        id) and, when known, ``permalink``. Raise :class:`ChannelError` when no root was made. Core calls this
        under the binding lock and only for an unbound item."""

    def open_room(self, ref: WorkItemRef, room: str) -> Mapping[str, Any]:
        """Post a top-level intro in ``room`` (the id ``add-channel`` declared), now the item's conversation; return
        ``channel`` and, when known, ``permalink``. Raise :class:`ChannelError` when it cannot."""
        raise ChannelError(f"the {self.name} channel cannot carry a conversation in a room")

    def open_thread(self, room: str, title: str, text: str) -> Mapping[str, Any]:
        """Post a top-level message in ``room`` ("" = the central channel) that starts a thread no work item owns (a
        standing session's); return ``channel``, ``thread`` and, when known, ``permalink``. May raise."""
        raise ChannelError(f"the {self.name} channel cannot open a thread")

    @abc.abstractmethod
    def publish(self, binding: Mapping[str, Any], message: ChannelMessage) -> None:
        """Post ``message`` as a reply in the bound conversation; raise :class:`ChannelError` to leave it for the
        undelivered queue. Never opens a second root."""

    def health(self) -> str:
        """One line saying whether the channel is usable (never a secret)."""
        return "ok"


class ReadingChannel(Channel):
    """A channel people answer in: core reads the replies in each bound conversation, authorizes their writers
    and delivers them into the session (a :class:`Channel` that only publishes is never asked any of this)."""

    def read_mode(self) -> Literal["poll", "socket", "off"]:
        """How replies are read: ``poll`` (core's reader thread), ``socket`` (a listener service) or ``off``."""
        return "off"

    def read_interval(self) -> float:
        """Seconds between two poll reads."""
        return 30.0

    def catch_up_interval(self) -> float:
        """Seconds between a listener's catch-up reads (0: only when it connects)."""
        return 0.0

    def granted(self) -> Collection[str]:
        """What a reply may do (its ``publish`` grants): ``work-item.reply``, ``control.command`` …"""
        return ("work-item.reply",)

    def bot_identity(self) -> str:
        """The channel's own member id (its messages are dropped first), "" when unknown."""
        return ""

    def read_replies(self, binding: Mapping[str, Any], after: str) -> list[InboundMessage]:
        """Every reply in the bound conversation newer than message id ``after`` ("" = from the root), oldest
        first, following every page. Raise :class:`ChannelError` to skip the conversation this cycle."""
        return []

    def listen(
        self,
        sink: Callable[[InboundMessage], str],
        should_stop: Callable[[], bool],
        connected: Callable[[], None] = lambda: None,
        pressed: Callable[[Press], str] | None = None,
    ) -> None:
        """Receive messages as they are written until ``should_stop()``. Each goes to ``sink`` (core's claim)
        first, and the platform's delivery is acknowledged after it returned, or raised; it answers
        ``claim-failed`` when nothing was stored, and that delivery is then left unacknowledged for a retry.
        Call ``connected()`` each time a connection is (re)established: core then reads what was missed. A press
        on a control :meth:`ask` posted goes to ``pressed``."""
        raise ChannelError(f"{self.name} cannot listen")

    def acknowledge(self, message: InboundMessage, state: Literal["received", "completed", "error"]) -> None:
        """Show the writer how their message fared (a reaction); best-effort, may raise."""
        return None

    def tell(self, message: InboundMessage, text: str) -> None:
        """Answer the writer of ``message`` privately (Slack: an ephemeral message); best-effort, may raise."""
        return None

    def kickoff(self) -> Mapping[str, Any]:
        """{} when kickoff is off, else ``conversation`` (its id), ``repo`` (fallback) and ``labels``."""
        return {}

    def read_top_level(self, conversation: str, after: str) -> list[InboundMessage]:
        """Top-level messages newer than ``after``, oldest first ("" = the newest one only: a baseline)."""
        return []

    def reply(self, message: InboundMessage, text: str) -> None:
        """Answer in ``message``'s thread, for everyone; may raise."""
        return None

    def ask(self, message: InboundMessage, options: Sequence[str]) -> None:
        """Post a repository picker in ``message``'s thread (each answer comes back as a :class:`Press`); may raise."""
        raise ChannelError(f"the {self.name} channel cannot ask")

    def settle(self, press: Press, text: str) -> None:
        """Write ``text`` (how the press fared) over the pressed control; best-effort, may raise."""


# ---------------------------------------------------------------------------------------- harness adapter


@dataclass(frozen=True)
class Capabilities:
    """What a harness can do. Only a tmux-hostable harness with a pre-assignable id can be a default harness."""

    tmux_hostable: bool
    preassigned_session_id: bool
    can_resume: bool
    # Steering (each a no-op in core when false): the harness's own interrupt (``interrupt_keys``), usage it records
    # (``read_usage``, for budgets) and decision prompts it recognises on its own screen (``blocked_prompt``).
    can_interrupt: bool = False
    reports_usage: bool = False
    recognises_prompts: bool = False


# What a work item may choose (the top-level ``models`` and ``effort`` lists), and what a harness on this machine
# answers about one name: it takes it, it refuses it, or it could not be asked (offerable: nothing is withheld).
ChoiceKind = Literal["model", "effort"]
Verdict = Literal["ok", "refused", "unknown"]

# Given a way to read the pane's visible text (a tmux call, made only when asked): has the harness taken its boot
# prompt and is it reading input?
ReadyCheck = Callable[[Callable[[], str]], bool]


@dataclass(frozen=True)
class Usage:
    """What one model response spent: tokens by kind, and the model that spent them (its provider's name)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str = ""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True)
class UsageRead:
    """What a harness recorded since ``cursor``: one :class:`Usage` per model response, in order, and the cursor to
    read from next time (opaque to core; ``""`` reads from the start)."""

    usage: tuple[Usage, ...]
    cursor: str


@dataclass(frozen=True)
class PromptOption:
    """One choice of a decision prompt: ``key`` is what a person names (``the-loop answer 2``), ``label`` what the
    screen says, ``keys`` the tmux key names that pick it (``send-keys`` words, never a literal string)."""

    key: str
    label: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class BlockedPrompt:
    """A decision the harness waits for on its screen (a tool permission, a selection): the question and its
    options, as the screen shows them."""

    text: str
    options: tuple[PromptOption, ...]

    def option(self, answer: str) -> PromptOption | None:
        """The option ``answer`` names: its key (``2``) or, ignoring case, its label's first word (``yes``)."""
        wanted = answer.strip().lower()
        for option in self.options:
            if wanted == option.key.lower():
                return option
        for option in self.options:
            words = option.label.lower().split()
            if words and wanted == words[0].rstrip(",.:"):
                return option
        return None


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

    def __init__(self, config: Config) -> None:
        self.config = config

    @abc.abstractmethod
    def fresh_argv(self, launch: Launch) -> list[str]:
        """The full argv (binary first) of a fresh conversation with ``launch.session_id``."""

    @abc.abstractmethod
    def resume_argv(self, launch: Launch) -> list[str]:
        """The full argv that resumes conversation ``launch.session_id``."""

    def prepare(self, cwd: Path) -> list[str]:
        """Pre-spawn preparation of the harness's own config (trust, onboarding, plugin enabling), called before
        every spawn and both halves of a respawn. Returns what it changed, for the event log."""
        return []

    def accepts_session_id(self, session_id: str) -> bool:
        """Whether the harness can start or resume a conversation with this id (Claude Code: a UUID). Checked at
        ``sessions register`` and before every argv, beside core's own argv-safety check."""
        return True

    def conversation_exists(self, launch: Launch) -> bool:
        """Whether conversation ``launch.session_id`` can be resumed in ``launch.cwd``. A respawn asks first and
        starts a fresh conversation at once when the answer is no. The default cannot tell and says yes; a resume
        that dies before it is ready then counts as failed."""
        return True

    def ready_check(self, launch: Launch) -> ReadyCheck:
        """Called just before the harness is started; returns a test, given ``screen()`` (the pane's visible text,
        read only when called), that is true once the harness has taken its boot prompt and reads input. Until
        then nothing is delivered and the spawn does not count as started. The default is true once the pane shows
        any text; an adapter should say better (Claude Code: its transcript has the new prompt, no screen read)."""
        return lambda screen: bool(screen().strip())

    # ---------------------------------------------------------------------------------------- steering

    def interrupt_keys(self) -> tuple[str, ...]:
        """The tmux key names (``send-keys`` words) that stop the harness's current turn and keep its conversation
        (Claude Code: ``Escape``). Asked only when ``capabilities.can_interrupt``."""
        return ()

    def interrupted_check(self, launch: Launch) -> ReadyCheck:
        """Called just before the interrupt keys are sent; returns a test, given ``screen()``, that is true once the
        turn has stopped (or none was running) and the harness reads input again: only then is the interrupt's
        text delivered. The default is true at once."""
        return lambda screen: True

    def read_usage(self, session_id: str, cwd: Path, cursor: str) -> UsageRead | None:
        """What conversation ``session_id`` (in ``cwd``) spent since ``cursor``, read incrementally (never the whole
        record each time). None: nothing to read yet. Asked only when ``capabilities.reports_usage``."""
        return None

    def blocked_prompt(self, screen: str) -> BlockedPrompt | None:
        """The decision prompt ``screen`` (the pane's visible text) shows, if it is one of the harness's own
        (permission, selection), else None. Asked only when ``capabilities.recognises_prompts``."""
        return None

    def session_env(self) -> dict[str, str]:
        """Extra environment for the harness process (never a credential: names core strips are refused)."""
        return {}

    def problems(self) -> list[Finding]:
        """What stops the harness from running on this machine (its program missing or failing to start), each
        with its remedy. Asked by ``the-loop init``; none by default."""
        return []

    def model_args(self, model: str) -> list[str] | None:
        """This harness's own arguments that select ``model`` (a name from the top-level ``models`` list, in the
        provider's naming), placed after ``routing.harnessArgs`` and before the effort's. None: this harness takes
        no model choice, and a work item that chose one runs without it (``session.model_refused``, reason
        ``unsupported``). The default takes none."""
        return None

    def effort_args(self, effort: str) -> list[str] | None:
        """This harness's own arguments that select effort level ``effort`` (from the top-level ``effort`` list),
        placed after the model's. None: this harness takes no effort choice. The default takes none."""
        return None

    def check_choice(self, kind: ChoiceKind, name: str) -> Verdict:
        """Whether this machine's harness accepts model or effort ``name`` with the arguments the mapping gives:
        ``ok``, ``refused``, or ``unknown`` when it could not be asked (no binary, no credentials, unreachable).
        Asked by ``the-loop models check``, never at spawn; it must not spend tokens (list what the harness
        offers, read its help) and should answer within seconds. ``unknown`` withholds nothing, ``refused`` makes
        spawns leave the name out. The default: ``refused`` when the mapping is None, else ``unknown``."""
        args = self.model_args(name) if kind == "model" else self.effort_args(name)
        return "refused" if args is None else "unknown"
