"""The ``the-loop`` command: a thin click group whose commands are imported only when they run.

Core commands are listed in :data:`CORE_COMMANDS` by import string; plugin commands come from
``loop_register_commands`` the same way. ``--help`` therefore imports click and the plugin modules' hook
declarations, never a command body or a client library. Nothing here reads the config: commands do, when they run.

Exit codes: 0 success · 1 ran, and the answer is negative · 2 could not run (bad arguments, config, ref, path).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from the_loop import __version__

# name → (import target, one-line help); nested dicts are groups of their own.
CORE_COMMANDS: dict[str, Any] = {
    "start": (
        "the_loop.cli.start:start",
        "Start every enabled service (receiver, poller, listeners) detached.",
    ),
    "stop": ("the_loop.cli.stop:stop", "Stop every running service."),
    "status": ("the_loop.cli.status:status", "Show which services run; exit 0 iff every enabled one does."),
    "restart": ("the_loop.cli.restart:restart", "Stop, then start, every service."),
    "events": ("the_loop.cli.events:events", "Query the decision log (events.jsonl)."),
    "plugins": ("the_loop.cli.plugins:plugins", "List installed plugins and what each provides."),
    "init": ("the_loop.cli.init:init", "Write a commented starter cli-config.yaml."),
    "comment": ("the_loop.cli.comment:comment", "Post a marked comment on a work item (the agent talking back)."),
    "ask": ("the_loop.cli.ask:ask", "Ask a question on a work item and record that its session waits for input."),
    "check": ("the_loop.cli.check:check", "Say where a work item stands, from the records alone."),
    "migrate-config": ("the_loop.cli.migrate_config:migrate_config", "Rewrite retired config keys in place."),
    "config": {
        "_help": "Check or show the configuration.",
        "validate": (
            "the_loop.cli.config:validate",
            "Check the config; exit 2 on an error, 1 on unknown keys.",
        ),
        "show": ("the_loop.cli.config:show", "Print the effective config (defaults filled in, no secrets)."),
    },
    "state": {
        "_help": "Inspect the state directory.",
        "gitignore": ("the_loop.cli.state:gitignore", "Print the .gitignore block for the state root."),
        "paths": ("the_loop.cli.state:paths", "List every generated path: portable or local, and why."),
    },
    "daemon": {
        "_help": "Run one service in the foreground (what `start` spawns; the systemd/cron form).",
        "run": ("the_loop.cli.daemon:run", "Run SERVICE in this process until SIGTERM/SIGINT."),
    },
    "sessions": {
        "_help": "Start, steer, watch, pause, stop, reset and clean up work items' sessions.",
        "start": ("the_loop.cli.sessions.start:start", "Arm a work item and start its session now."),
        "say": ("the_loop.cli.sessions.say:say", "Paste text into a work item's session (as an event would)."),
        "interrupt": (
            "the_loop.cli.sessions.interrupt:interrupt",
            "Stop a session's current turn (conversation kept), then deliver what comes next.",
        ),
        "answer": ("the_loop.cli.sessions.answer:answer", "Answer the decision prompt a session waits at."),
        "budget": ("the_loop.cli.sessions.budget:budget", "Raise a work item's budget (tokens, cost, wall time)."),
        "list": ("the_loop.cli.sessions.list:list_sessions", "List the sessions this machine holds."),
        "attach": ("the_loop.cli.sessions.attach:attach", "Attach this terminal to a work item's tmux session."),
        "register": ("the_loop.cli.sessions.register:register", "Record an existing conversation by hand."),
        "link-pr": ("the_loop.cli.sessions.link_pr:link_pr", "Record that a pull request delivers a work item."),
        "add-collaborator": (
            "the_loop.cli.sessions.add_collaborator:add_collaborator",
            "Let someone else's comments reach one work item (input only).",
        ),
        "remove-collaborator": (
            "the_loop.cli.sessions.remove_collaborator:remove_collaborator",
            "Take someone off a work item's collaborators.",
        ),
        "add-channel": (
            "the_loop.cli.sessions.add_channel:add_channel",
            "Make a Slack room a work item's conversation.",
        ),
        "remove-channel": (
            "the_loop.cli.sessions.remove_channel:remove_channel",
            "Undeclare a work item's room.",
        ),
        "pause": ("the_loop.cli.sessions.pause:pause", "Hold off deliveries to a work item's session."),
        "resume": ("the_loop.cli.sessions.resume:resume", "Deliver events to a paused work item again."),
        "stop": ("the_loop.cli.sessions.stop:stop", "Disarm a work item and close its session (tmux kept readable)."),
        "close": ("the_loop.cli.sessions.close:close", "Close a work item's session; keep or kill its tmux session."),
        "reset": ("the_loop.cli.sessions.reset:reset", "Wipe work items' session and control state to start over."),
        "cleanup": (
            "the_loop.cli.sessions.cleanup:cleanup",
            "Release a finished work item's tmux sessions, checkout and local record.",
        ),
    },
    "standing": {
        "_help": "Standing sessions: named harness sessions no work item owns (list, start, stop, say, attach).",
        "list": ("the_loop.cli.standing.list:list_standing", "List declared and created standing sessions."),
        "create": ("the_loop.cli.standing.create:create", "Make a standing session at run time and start it."),
        "delete": ("the_loop.cli.standing.delete:delete", "Stop a created standing session and remove its record."),
        "start": ("the_loop.cli.standing.start:start", "Start a standing session (or all), resuming its conversation."),
        "stop": ("the_loop.cli.standing.stop:stop", "Stop a standing session (or all recorded), keeping its record."),
        "restart": ("the_loop.cli.standing.restart:restart", "Stop a standing session, then start it again."),
        "say": ("the_loop.cli.standing.say:say", "Paste text into a running standing session."),
        "attach": ("the_loop.cli.standing.attach:attach", "Attach this terminal to a standing session's tmux session."),
    },
    "models": {
        "_help": "Which declared models and effort levels this machine's harnesses accept.",
        "list": (
            "the_loop.cli.models.list:list_models",
            "Show declared models and efforts with each harness's verdict.",
        ),
        "check": ("the_loop.cli.models.check:check", "Measure which declared models and efforts each harness accepts."),
    },
    "channels": {"_help": "Conversation channels (commands come from channel plugins)."},
    "doctor": {"_help": "Check whether an integration's configuration is usable (commands come from plugins)."},
    "hooks": ("the_loop.cli.hooks:hooks", "Show the declared lifecycle hooks and the points they run at."),
}


def _plugin_commands(parent: str | None) -> dict[str, tuple[str, str]]:
    from the_loop.cli.plugin_commands import plugin_commands

    found: dict[str, tuple[str, str]] = {}
    for command in plugin_commands():
        if command["parent"] != parent:
            continue
        core = CORE_COMMANDS if parent is None else CORE_COMMANDS.get(parent, {})
        if command["name"] in core or command["name"] in found:
            print(
                f"warning: plugin {command['plugin']} ({command['distribution']}) command {command['name']!r} "
                "clashes with an existing command (the-loop-core wins)",
                file=sys.stderr,
            )
            continue
        found[command["name"]] = (command["target"], command["help"])
    return found


class LazyGroup(click.Group):
    """A group whose subcommands are import strings, loaded on use."""

    def __init__(self, *args: Any, lazy: dict[str, Any], path: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = {name: value for name, value in lazy.items() if not name.startswith("_")}
        self.path = path

    def _entries(self, include_plugins: bool) -> dict[str, Any]:
        entries = dict(self.lazy)
        if include_plugins:
            entries.update(_plugin_commands(self.path))
        return entries

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self._entries(include_plugins=True))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # click turns EPIPE into exit 1; a reader that went away (`| head`) is not a failure.
            raise _PipeClosed() from None

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        entry = self.lazy.get(name)
        if entry is None:
            entry = _plugin_commands(self.path).get(name)
        if entry is None:
            return None
        if isinstance(entry, dict):
            return LazyGroup(name=name, help=entry.get("_help"), lazy=entry, path=name)
        import importlib

        module, _, attr = entry[0].partition(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name, entry in sorted(self._entries(include_plugins=True).items()):
            rows.append((name, entry.get("_help", "") if isinstance(entry, dict) else entry[1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class _PipeClosed(Exception):
    """stdout's reader went away."""


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"the-loop {__version__}")
        ctx.exit(0)


@click.group(cls=LazyGroup, lazy=CORE_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "-c",
    "--config",
    "config_path",
    metavar="PATH",
    help="Config file (default: $THE_LOOP_CLI_CONFIG, ./.the-loop/cli-config.yaml, ~/.the-loop/cli-config.yaml).",
)
@click.option("--debug", is_flag=True, help="Show a traceback when a command fails unexpectedly.")
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, debug: bool) -> None:
    """the-loop: ticket activity in, live AI coding-agent sessions in tmux out."""
    from the_loop.command import AppContext

    ctx.obj = AppContext(config_flag=config_path, debug=debug)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: runs the CLI, maps known failures to ``error:`` + exit 2, exits quietly on a
    closed pipe."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        code = cli.main(args=argv, prog_name="the-loop", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)  # ctx.exit(n) returns n when click is not in standalone mode
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.BadParameter as exc:
        # A bad value (a malformed ref, an invalid id) is one line, like every other known failure.
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if exc.exit_code == 1 else exc.exit_code)
    except (BrokenPipeError, _PipeClosed):
        _quiet_pipe()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        from the_loop.command import describe_error

        known = describe_error(exc)
        if debug:
            import traceback

            traceback.print_exc()
        click.echo(f"error: {known or f'unexpected {type(exc).__name__}: {exc}'}", err=True)
        sys.exit(2)
    sys.exit(0)


def _quiet_pipe() -> None:
    # The reader went away (`| head`): point stdout at /dev/null so the interpreter's final flush is silent.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)
