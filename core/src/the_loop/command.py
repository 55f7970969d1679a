"""What every command shares, core's and a plugin's: the run's :class:`AppContext` (the config, loaded once with
the plugin host), output helpers, option helpers and the mapping of known errors to one ``error:`` line.

This is the public helper for commands: a plugin's command imports it, never ``the_loop.cli``. Importing it costs
only click: the config and the host load when a command first asks for them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from the_loop.config import ConfigRef, LoadedConfig
    from the_loop.plugins import PluginHost
    from the_loop.state import StateLayout


@dataclass
class AppContext:
    """One CLI run: the ``--config`` and ``--debug`` given, and the config once it is loaded."""

    config_flag: str | None = None
    debug: bool = False
    _config: LoadedConfig | None = field(default=None, repr=False)

    @property
    def host(self) -> PluginHost:
        """The process's plugin host: built here, once, and carried by the config from then on."""
        from the_loop.plugins import get_host

        return get_host()

    def config_ref(self) -> ConfigRef:
        from the_loop.config import resolve_config_path

        return resolve_config_path(self.config_flag)

    def config(self, *, source: str = "cli", warn: bool = True, leave_out: tuple[str, ...] = ()) -> LoadedConfig:
        """Load (once) the config with every plugin section (but the top-level ones ``leave_out`` names), print
        its warnings, and point the event log."""
        if self._config is None:
            from the_loop import events
            from the_loop.config import load_config, print_warnings

            self._config = load_config(self.config_flag, self.host, leave_out=leave_out)
            if warn:
                print_warnings(self._config.warnings)
            core = self._config.core
            events.configure(self._config.state.events_path, source, enabled=core.event_log.enabled)
        return self._config

    def layout(self) -> StateLayout:
        """Where the state lives, for a command that reads only state files: the loaded config's when it is
        loaded, else the four keys read straight from the file (:func:`the_loop.config.read_layout`), else the
        whole config."""
        if self._config is None:
            from the_loop.config import read_layout

            found = read_layout(self.config_flag)
            if found is not None:
                return found
        return self.config().state


def app(ctx: click.Context) -> AppContext:
    """The run's :class:`AppContext`, from any command's click context."""
    obj = ctx.find_root().obj
    assert isinstance(obj, AppContext)
    return obj


def undelivered_note(config: LoadedConfig) -> str | None:
    """What a one-shot command that only queued work into the inbox should say: None when a running service will
    deliver it (each service that takes events in runs the router), else that nothing will until one runs."""
    from the_loop.state import runlock

    specs = [spec for spec in config.host.services(config) if spec.ingress]
    if any(spec.enabled and runlock.is_held(spec.pidfile) for spec in specs):
        return None
    return (
        "note: no the-loop service is running to deliver what was queued (the receiver or the poller routes it); "
        "it waits in the inbox until one does: the-loop start"
    )


def print_json(data: Any) -> None:
    """``--format json``: one indented document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def describe_error(exc: BaseException) -> str | None:
    """The one-line message for a known failure, or None for an unexpected one."""
    from the_loop.config import ConfigError
    from the_loop.refs import RefError
    from the_loop.state import StateError

    if isinstance(exc, (ConfigError, StateError, RefError)):
        return str(exc)
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename or exc}"
    return None


FORMAT_OPTION = click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format; json prints one document on stdout.",
)


def config_path_option(help_text: str) -> Any:
    """``--path``: a config file other than the one the-loop would read (``init``, ``migrate-config``)."""
    from pathlib import Path

    return click.option(
        "--path",
        "target",
        type=click.Path(dir_okay=False, path_type=Path),
        help=f"{help_text} (default: the config path the-loop would read).",
    )


def target_config_path(ctx: click.Context, target: Any) -> Any:
    """The ``--path`` given, made absolute, or the config path the-loop would read."""
    return target.expanduser().absolute() if target is not None else app(ctx).config_ref().path


def parse_work_item(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    """Click callback for ``--work-item``: a parsed ref, or a one-line error naming the expected shapes."""
    from the_loop.refs import RefError, parse_ref

    if value is None:
        return None
    try:
        return parse_ref(value)
    except RefError as exc:
        raise click.BadParameter(str(exc)) from None
