"""Every hook the-loop calls, one docstring each.

Hooks fall into six families. Provider families (ingress, ticketing, channel, harness) have one registration hook
each that returns provider objects (see :mod:`the_loop.interfaces`); core then calls those objects' methods by
name, so no provider ever has to answer ``None`` for work that is not its own. Lifecycle hooks are decisions or
notifications at the seven points where a work item turns. App hooks contribute commands, config sections,
event types, state paths and services.

Only :mod:`the_loop.plugins` calls these hooks. ``docs/plugins/hooks.md`` documents each one; a test keeps the
two in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

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
        Listener,
        PollSource,
        ServiceSpec,
        SetupSpec,
        TicketProvider,
        WebhookIngress,
    )
    from the_loop.lifecycle import Decision, LifecycleContext

hookspec = pluggy.HookspecMarker("the_loop")


class IngressSpecs:
    @hookspec
    def loop_register_ingresses(self, config: Config) -> list[WebhookIngress | PollSource | Listener] | None:
        """Return the ingresses this plugin provides for ``config``.

        Called when a service starts. A :class:`~the_loop.interfaces.WebhookIngress` becomes a route on core's
        HTTP server, a :class:`~the_loop.interfaces.PollSource` runs in the poller's cycle, and a
        :class:`~the_loop.interfaces.Listener` runs in its own service. Return only what ``config`` enables.
        """


class TicketingSpecs:
    @hookspec
    def loop_register_ticketing(self) -> list[type[TicketProvider]] | None:
        """Return ticket-provider classes, one per ref scheme (``github``, ``jira``).

        Called when core first needs a provider for a ref. Two providers claiming one scheme is a startup error.
        """


class ChannelSpecs:
    @hookspec
    def loop_register_channels(self) -> list[type[Channel]] | None:
        """Return channel classes (conversation surfaces such as Slack), looked up by their ``name``.

        Called when core opens, publishes to or reads from a work item's conversation.
        """


class HarnessSpecs:
    @hookspec
    def loop_register_harnesses(self) -> list[type[HarnessAdapter]] | None:
        """Return harness-adapter classes, looked up by ``name`` (``routing.defaultHarness``).

        Called when config is validated and before a spawn. Adapter names are validated against what is
        installed, never against a closed list, so a third-party adapter is as good as a built-in one.
        """


class LifecycleSpecs:
    """Decisions at the points where a work item turns.

    Each implementation is called on its own (one that raises cannot stop the others); a later hook sees earlier
    decisions and may reword a text, but once any hook refused no later one can undo it.
    """

    @hookspec
    def loop_work_item_start(self, ctx: LifecycleContext) -> Decision | None:
        """Called once per arming, before the first spawn of a work item. May refuse (``proceed=False``)."""

    @hookspec
    def loop_session_spawn(self, ctx: LifecycleContext) -> Decision | None:
        """Called before a session is spawned. May refuse, or replace the boot prompt (``prompt``)."""

    @hookspec
    def loop_session_spawned(self, ctx: LifecycleContext) -> Decision | None:
        """Called after a session is registered. May skip the announcement (``announce=False``)."""

    @hookspec
    def loop_waiting_for_input(self, ctx: LifecycleContext) -> Decision | None:
        """Called when the agent asks a question (``the-loop ask``). May reword the published ``question`` and add a
        ``summary``."""

    @hookspec
    def loop_input_received(self, ctx: LifecycleContext) -> Decision | None:
        """Called before input is delivered into a session. May reword it (``text``) or refuse it."""

    @hookspec
    def loop_phase_changed(self, ctx: LifecycleContext) -> Decision | None:
        """Called when a work item's phase changes (fired once a process graph exists). Notification only."""

    @hookspec
    def loop_work_item_complete(self, ctx: LifecycleContext) -> Decision | None:
        """Called when a work item ends (closed, merged, cleaned up). Notification only."""


class AppSpecs:
    @hookspec
    def loop_register_commands(self) -> list[CommandSpec] | None:
        """Return CLI commands this plugin adds.

        Called when the CLI builds its command list. Commands are declared by import string and loaded only when
        invoked, so ``--help`` never imports a plugin's client library. On a name clash core's command wins.
        """

    @hookspec
    def loop_config_sections(self) -> list[ConfigSection] | None:
        """Return the config sections this plugin owns (``"channels.slack"``), each with its pydantic model.

        Called when the config is loaded; keys no core or plugin section claims are warned about.
        """

    @hookspec
    def loop_register_setup(self) -> list[SetupSpec] | None:
        """Return this plugin's parts of ``the-loop init`` (``--github OWNER/REPO``).

        Called when ``init`` is parsed. Each step's ``run`` is imported only when its option is given; it checks
        what it can against its service and returns its part of the config, never a secret.
        """

    @hookspec
    def loop_event_types(self) -> list[EventType] | None:
        """Return the event types this plugin writes to ``events.jsonl``, for the catalog (``events --types``)."""

    @hookspec
    def loop_state_paths(self) -> list[GeneratedPath] | None:
        """Return every path under ``state.root`` this plugin writes, classified portable or local.

        The ``.gitignore`` block (``the-loop state gitignore``) and the state docs are generated from these.
        """

    @hookspec
    def loop_record_attributes(self) -> list[Attribute] | None:
        """Return the top-level keys this plugin writes into per-work-item records, with their kind.

        A test fails when a record grows a key nobody declared, or a machine handle lands in a portable file.
        """

    @hookspec
    def loop_register_services(self, config: Config) -> list[ServiceSpec] | None:
        """Return the long-running services this plugin adds (a Socket Mode listener).

        Called by ``start``, ``stop``, ``status`` and ``daemon run``. Return every service the plugin has, with
        ``enabled`` set from ``config``, so ``stop`` can stop one that was disabled while running.
        """


SPEC_CLASSES = (IngressSpecs, TicketingSpecs, ChannelSpecs, HarnessSpecs, LifecycleSpecs, AppSpecs)
