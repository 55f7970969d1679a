"""Pydantic models of core's config sections, with the reference's key names and defaults.

Keys are camelCase in YAML (``routing.defaultHarness``) and snake_case in Python. Unknown keys are not an error
here: :mod:`the_loop.config` walks the raw document and warns once per unclaimed path, so an existing
``cli-config.yaml`` with keys outside this project's scope still loads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer
from pydantic.alias_generators import to_camel

from the_loop.state import DEFAULT_STATE_ROOT

_REPOSITORY = r"^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::\d+)?/)?[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# A declared model or effort name: one argv word a harness's option can take, never one that reads as an option.
_CHOICE = r"^[A-Za-z0-9._:\[\]][A-Za-z0-9._:\[\]-]*$"


class Section(BaseModel):
    """Base of every config model: camelCase keys, unknown keys ignored here (warned about by the loader)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class StateSection(Section):
    root: str = DEFAULT_STATE_ROOT


class EnvSection(Section):
    file: str = ""
    session_passthrough: list[str] = Field(default_factory=list)


class EventLogSection(Section):
    enabled: bool = True
    path: str = ""


class GhWebhookSection(Section):
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=1, le=65535)
    path: str = Field("/gh-webhook", pattern=r"^/[A-Za-z0-9._~/-]*$")
    secret_env: str = Field("THE_LOOP_GH_WEBHOOK_SECRET", pattern=_ENV_NAME)
    pidfile: str = ""
    events: list[str] = Field(default_factory=list)
    allow_unsigned: bool = False
    max_body_bytes: int = Field(25 * 1024 * 1024, ge=1024)
    max_concurrency: int = Field(64, ge=1)
    request_timeout_seconds: float = Field(30.0, gt=0)


class WebhooksSection(Section):
    gh_webhook: GhWebhookSection = GhWebhookSection()


class PollMonitor(Section):
    issues: bool = True
    pull_requests: bool = True


class PollSourceSection(Section):
    provider: str
    projects: list[str] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    monitor: PollMonitor = PollMonitor()


class PollCiSection(Section):
    enabled: bool = True
    interval_seconds: int = Field(300, ge=1)


class PollingSection(Section):
    enabled: bool = False
    interval_seconds: int = Field(60, ge=1)
    max_retries: int = Field(3, ge=0)
    ci: PollCiSection = PollCiSection()
    sources: list[PollSourceSection] = Field(default_factory=list)


class AuthorizedUser(Section):
    name: str = ""
    github: str = ""
    slack: str = ""
    jira: str = ""


class ControlSection(Section):
    enabled: bool = True
    require_start_command: bool = True
    keywords: dict[str, str] = Field(default_factory=dict)


class ReactionsSection(Section):
    enabled: bool = True
    started: str = "eyes"
    completed: str = "hooray"
    error: str = "confused"


class AnnounceSection(Section):
    enabled: bool = True


class RoutingCiSection(Section):
    autofix: bool = True
    max_attempts: int = Field(3, ge=0)


class WorkspaceSection(Section):
    root: str = ""
    strategy: Literal["worktree", "clone"] = "worktree"
    clone_protocol: Literal["https", "ssh"] = "https"
    default_host: str = "github.com"
    keep_checkout_on_close: bool = False
    git_binary: str = "git"
    # New key (not in the reference): a base URL standing in for https://<host> in clone URLs (a mirror, or a
    # file:// directory of bare repositories in tests); "" derives the URL from the host and cloneProtocol.
    clone_url_base: str = Field("", pattern=r"^$|^(https?|ssh|file)://\S+$|^git@[A-Za-z0-9.-]+:\S*$")


class TmuxSection(Section):
    keep_session_on_close: bool = True
    remain_on_exit: bool = True
    resume_on_respawn: bool = True
    kill_harness_on_close: bool = True
    harness_kill_grace_seconds: float = Field(5, ge=0)
    finish_grace_seconds: float = Field(300, ge=0)
    # Kept so existing files load; readiness (readyTimeoutSeconds) decides now, not a fixed wait.
    resume_probe_seconds: float = Field(2, ge=0)
    session_per_pr: Literal["never", "cross-repository", "always"] | bool = "cross-repository"
    # New keys (not in the reference): the tmux server to use (`-L`; "" = the default server) and the bound on
    # every tmux call, instead of the 30-minute dispatch timeout.
    socket_name: str = Field("", pattern=r"^[A-Za-z0-9._-]*$")
    command_timeout_seconds: float = Field(10, gt=0)
    # New: how long a started harness may take to be ready for input before the spawn counts as failed.
    ready_timeout_seconds: float = Field(60, gt=0)
    # New: how long an interrupt waits for the harness to stop its turn before the words that came with it go in.
    interrupt_timeout_seconds: float = Field(10, gt=0)


class WebTerminalSection(Section):
    enabled: bool = False
    allow_remote: bool = False  # declared before host: host's check reads it
    host: str = "127.0.0.1"
    port: int = Field(7681, ge=1, le=65535)
    token_env: str = Field("", pattern=r"^$|^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("host")
    @classmethod
    def _loopback_unless_acknowledged(cls, value: str, info: ValidationInfo) -> str:
        """A writable shell for whoever holds the link: off this machine only when the operator says so."""
        if not info.data.get("allow_remote") and not _loopback(value):
            raise ValueError(
                f"{value!r} is not a loopback address: the web terminal is a writable shell on this machine; "
                "set routing.webTerminal.allowRemote: true to serve it beyond this host"
            )
        return value


def _loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HarnessTrustSection(Section):
    enabled: bool = True
    scope: Literal["workspace-root", "directory"] = "workspace-root"
    accept_bypass_permissions: Literal["auto", "always", "never"] = "auto"


class HarnessPluginsSection(Section):
    enabled: bool = True
    # OWNER/REPO, or "" to enable the plugin without adding a marketplace entry.
    marketplace_repo: str = Field("MadaraUchiha-314/the-loop", pattern=r"^$|^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$")


class CleanupSection(Section):
    # New key: `sessions cleanup` posts a marked comment on the ticket saying so only when asked. Cleanup releases
    # local resources; seed 004 has it touch nothing remote, and a comment is a write to the tracker.
    comment: bool = False


class StartGateSection(Section):
    # New key (the reference's start gate is the process graph's first node; only that gate is built): park an
    # armed work item before its first session until an authorized person chooses its model, effort, sessions per
    # pull request and repositories.
    enabled: bool = False


class GraphSection(Section):
    spec_dir: str = Field("docs/specs", pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")

    @field_validator("spec_dir")
    @classmethod
    def _inside_the_checkout(cls, value: str) -> str:
        if any(part == ".." for part in value.split("/")):
            raise ValueError(f"{value!r} leaves the checkout: give a path inside the repository")
        return value


class InteractionSection(Section):
    # Every mode but `cli` is unattended: the harness gets its unattended arguments (nobody answers its questions
    # in the terminal). An unknown value means `work-item`, as in the reference.
    mode: Literal["work-item", "cli"] = "work-item"

    @field_validator("mode", mode="before")
    @classmethod
    def _known_mode(cls, value: object) -> object:
        return value if value in ("work-item", "cli") else "work-item"


class Price(Section):
    """A model's price per million tokens, in ``routing.budgets.currency``."""

    input: float = Field(0, ge=0)
    output: float = Field(0, ge=0)
    cache_read: float = Field(0, ge=0)
    cache_write: float = Field(0, ge=0)


class BudgetsSection(Section):
    """Per work item: what its sessions may spend before they are paused (null: no limit of that measure)."""

    tokens: int | None = Field(None, ge=1)
    cost: float | None = Field(None, gt=0)
    wall_minutes: float | None = Field(None, gt=0)
    currency: str = Field("usd", pattern=r"^[A-Za-z]{3}$")
    warn_at_percent: int = Field(80, ge=1, le=99)
    # Model name (or the start of one, longest wins; "default" for the rest) → its price.
    prices: dict[str, Price] = Field(default_factory=dict)

    @field_validator("currency")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


class CapacitySection(Section):
    """Admission: a first spawn past either limit waits in line instead of starting (null: no limit)."""

    max_live_sessions: int | None = Field(None, ge=1)
    min_free_memory_mib: int | None = Field(None, ge=1, alias="minFreeMemoryMiB")
    recheck_seconds: float = Field(2.0, gt=0)


class StuckSection(Section):
    """Sessions that wait for a person: a decision prompt on screen (blocked) or nothing moving (idle)."""

    enabled: bool = True
    idle_minutes: float = Field(30, gt=0)
    check_seconds: float = Field(5.0, gt=0)


class RoutingSection(Section):
    enabled: bool = False
    runner: str = "tmux"
    registry_dir: str = ""
    default_harness: str = "claude"
    spawn_on_unmatched: Literal["never", "always", "labeled"] = "never"
    auto_execute_labels: list[str] = Field(default_factory=lambda: ["the-loop: auto-execute"])
    merge_on_approval: bool = True
    authorized_users: list[str | AuthorizedUser] = Field(default_factory=list)
    spawn_workdir: str = "."
    max_concurrent_dispatches: int = Field(4, ge=1)
    dedup_cache_size: int = Field(1024, ge=1)
    dispatch_timeout_seconds: float = Field(1800, gt=0)
    prompt_template: str = ""
    spawn_prompt_template: str = ""
    ci: RoutingCiSection = RoutingCiSection()
    control: ControlSection = ControlSection()
    workspace: WorkspaceSection = WorkspaceSection()
    tmux: TmuxSection = TmuxSection()
    web_terminal: WebTerminalSection = WebTerminalSection()
    harness_args: dict[str, list[str]] = Field(default_factory=dict)
    harness_trust: HarnessTrustSection = HarnessTrustSection()
    harness_plugins: HarnessPluginsSection = HarnessPluginsSection()
    interaction: InteractionSection = InteractionSection()
    reactions: ReactionsSection = ReactionsSection()
    announce: AnnounceSection = AnnounceSection()
    start_gate: StartGateSection = StartGateSection()
    graph: GraphSection = GraphSection()
    cleanup: CleanupSection = CleanupSection()
    budgets: BudgetsSection = BudgetsSection()
    capacity: CapacitySection = CapacitySection()
    stuck: StuckSection = StuckSection()


_LOCAL_ONLY = {"executor", "with", "with_"}  # HookEntry keys by alias and by name
_REMOTE_ONLY = {"tokenEnv", "token_env", "headers", "timeoutSeconds", "timeout_seconds"}


class HookEntry(Section):
    """One operator-declared lifecycle hook (top-level ``hooks:``). The strict rules — exactly one of
    module/path/url, kind-specific keys, a bare YAML ``on:`` — are checked on the raw document first, by
    :func:`the_loop.config.hooks.check_declaration`; this model holds the result."""

    name: str
    module: str = ""
    path: str = ""
    url: str = ""
    on: list[str] | None = None
    required: bool = False
    enabled: bool = True
    executor: str = ""
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    token_env: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(10, gt=0)

    @model_serializer(mode="wrap")
    def _only_its_kind(self, handler: Any) -> Any:
        """Dump only the keys this entry's kind may have, so ``config show`` prints a declaration that loads."""
        kind = "module" if self.module else "path" if self.path else "url"
        unused = ({"module", "path", "url"} - {kind}) | (_LOCAL_ONLY if kind == "url" else _REMOTE_ONLY)
        return {k: v for k, v in handler(self).items() if k not in unused and v not in (None, "")}  # unset: left out


class InstanceCapacity(Section):
    sessions: int = Field(10, ge=0)  # live sessions this worker takes; new work goes where the most are free


class InstanceScope(Section):
    # open: any armed, authorized start · addressed: only a start naming this instance (`instance:<name>`) ·
    # locked: nothing new (what it owns, it keeps)
    mode: Literal["open", "addressed", "locked"] = "open"


class InstanceSection(Section):
    """This machine in a fleet (issue 22): its name, what it runs, and what new work it takes."""

    name: str = Field("", pattern=r"^$|^[A-Za-z0-9_-]{1,64}$")
    role: Literal["gateway", "worker", "both"] = "both"
    host: str = Field("", pattern=r"^$|^[A-Za-z0-9._@:-]{1,255}$")  # what `ssh -t` dials for this machine
    capacity: InstanceCapacity = InstanceCapacity()
    scope: InstanceScope = InstanceScope()


class FleetTls(Section):
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


class FleetNats(Section):
    servers: list[str] = Field(default_factory=list)
    # Credentials are named by environment variable, never written here (and never passed on an argv).
    token_env: str = Field("", pattern=r"^$|" + _ENV_NAME)
    user_env: str = Field("", pattern=r"^$|" + _ENV_NAME)
    password_env: str = Field("", pattern=r"^$|" + _ENV_NAME)
    creds_file_env: str = Field("", pattern=r"^$|" + _ENV_NAME)
    tls: FleetTls = FleetTls()
    replicas: int = Field(1, ge=1, le=5)  # servers keeping each stream and bucket: 3 in a three-node cluster

    @field_validator("servers")
    @classmethod
    def _servers(cls, value: list[str]) -> list[str]:
        import re

        for entry in value:
            if not re.match(r"^(nats|tls|ws|wss)://[^\s/]+$", entry):
                raise ValueError(f"{entry!r} is not a NATS URL (nats://HOST:PORT or tls://HOST:PORT)")
        return value


class FleetSection(Section):
    """A fleet on NATS JetStream: none unless ``nats.servers`` names a server (the single machine is the default)."""

    nats: FleetNats = FleetNats()
    lease_seconds: float = Field(15, ge=2, le=3600)
    ask_timeout_seconds: float = Field(3, gt=0, le=60)

    @property
    def enabled(self) -> bool:
        return bool(self.nats.servers)


# A standing session's name guards tmux and file interpolation: never a leading '-', no '/', no '#'.
STANDING_NAME = r"^[a-z0-9][a-z0-9-]{0,39}$"


class StandingSlack(Section):
    enabled: bool = False
    channel: str = ""


class StandingSessionEntry(Section):
    """One declared standing session (issue-277): a named harness in tmux owned by no work item."""

    name: str
    description: str = ""
    # None = inherit (routing.defaultHarness, the launch-args resolver, routing.spawnWorkdir).
    # Any installed harness adapter's name (claude, codex, ...): checked when the session starts.
    harness: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    harness_args: list[str] | None = None
    cwd: str | None = None
    prompt: str = ""
    prompt_file: str = ""
    auto_start: bool = True
    slack: StandingSlack = StandingSlack()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        import re

        if not re.match(STANDING_NAME, value):
            raise ValueError(f"{value!r} is not a standing-session name ({STANDING_NAME})")
        return value

    @field_validator("prompt_file")
    @classmethod
    def _one_prompt(cls, value: str, info: ValidationInfo) -> str:
        if value and info.data.get("prompt"):
            raise ValueError("prompt and promptFile are exclusive: give one")
        return value


class StandingSessionsSection(Section):
    enabled: bool = False
    sessions: list[StandingSessionEntry] = Field(default_factory=list)

    @field_validator("sessions")
    @classmethod
    def _unique(cls, value: list[StandingSessionEntry]) -> list[StandingSessionEntry]:
        seen: dict[str, int] = {}
        for index, entry in enumerate(value):
            if entry.name in seen:
                raise ValueError(
                    f"{entry.name!r} is declared twice (sessions[{seen[entry.name]}] and sessions[{index}])"
                )
            seen[entry.name] = index
        return value


class CoreConfig(Section):
    """The core sections of ``cli-config.yaml``. Plugin sections are validated by their own models."""

    version: str = ""
    state: StateSection = StateSection()
    env: EnvSection = EnvSection()
    event_log: EventLogSection = EventLogSection()
    repositories: list[str] = Field(default_factory=list)
    webhooks: WebhooksSection = WebhooksSection()
    polling: PollingSection = PollingSection()
    routing: RoutingSection = RoutingSection()
    instance: InstanceSection = InstanceSection()
    fleet: FleetSection = FleetSection()
    standing_sessions: StandingSessionsSection = StandingSessionsSection()
    hooks: list[HookEntry] = Field(default_factory=list)
    # Provider-named models and effort levels a work item may choose (issue-358), with no harness attached: each
    # harness adapter maps a name to its own arguments, and `the-loop models check` measures which it accepts.
    models: list[str] = Field(default_factory=list)
    effort: list[str] = Field(default_factory=list)

    @field_validator("models", "effort")
    @classmethod
    def _choices(cls, value: list[str], info: ValidationInfo) -> list[str]:
        import re

        what = "model name" if info.field_name == "models" else "effort level"
        seen: set[str] = set()
        for entry in value:
            if not re.match(_CHOICE, entry):
                raise ValueError(
                    f"{entry!r} is not a valid {what}: letters, digits and . _ : [ ] -, not starting with '-'"
                )
            if entry in seen:
                raise ValueError(f"{entry!r} is declared twice")
            seen.add(entry)
        return value

    @field_validator("repositories")
    @classmethod
    def _repositories(cls, value: list[str]) -> list[str]:
        import re

        for entry in value:
            if not re.match(_REPOSITORY, entry):
                raise ValueError(f"{entry!r} is not [HOST/]OWNER/REPO")
        return value
