"""``the-loop status``: which services run, from their locks alone; read-only and fast.

What status reads of the config and the plugins (:class:`~the_loop.daemon.services.StatusInputs`) takes every
config model and plugin to compute, most of what status would cost, and changes only when the config or the
installed code does. So it is kept in a cache file (:mod:`the_loop.cli.cache`) and used again while its key holds:

- the installed code (:func:`~the_loop.cli.cache.installed_code`) and the source file of every module of core and
  of the plugins that computed it (an edit to an editable install);
- the config file and the ``env.file`` it names (their mtime, size and mode), and ``HOME`` (``~`` in paths);
- the pidfiles in the state root (a plugin lists a service while its pidfile is there, so ``stop`` finds it).

The services' problems (a missing credential, say) come from the environment, so they are never kept: when an
enabled service is not running, status loads everything and asks the plugins again, as it would without a cache.
A process that already has its plugin host (a test's) uses no cache, and a host that reported a broken plugin
is not cached, so its warning is printed on every run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from the_loop.cli import cache
from the_loop.command import FORMAT_OPTION, AppContext, app, print_json

if TYPE_CHECKING:
    from the_loop.config import ConfigRef
    from the_loop.daemon.services import StatusInputs

CACHE_FORMAT = 3


@click.command()
@FORMAT_OPTION
@click.pass_context
def status(ctx: click.Context, output_format: str) -> None:
    """Show the config and state in use, then each service: running or not, enabled or not, and the poller's
    heartbeat. Writes nothing, starts nothing.

    Exit 0 iff every enabled service runs; 1 otherwise; 2 when the config cannot load."""
    from the_loop.daemon import services

    application = app(ctx)
    path = None if _host_given() else cache.cache_file("status")
    # One key, taken before anything is read: a file edited while status reads it is stored under its old stamp,
    # so the next run reads it again.
    key = _key(application.config_ref()) if path is not None else ""
    inputs = remembered(path, key) or computed(application, path, key)
    report = services.status_report(inputs)
    if output_format == "json":
        print_json(report)
    else:
        for line in services.format_status(report, inputs.config_path.is_file()):
            click.echo(line)
    sys.exit(0 if report["ok"] else 1)


def computed(application: AppContext, path: str | None, key: str) -> StatusInputs:
    """The inputs from the whole config and every plugin, kept in ``path`` under ``key`` for the next run when
    they may be."""
    from the_loop.daemon.services import StatusInputs

    config = application.config()  # prints the config's warnings
    inputs = StatusInputs.of(config)
    if path is not None and not any(info.error for info in config.host.infos.values()):
        from the_loop.config import env_file_path

        env_file = env_file_path(config)
        packages = {"the_loop", *(info.module.partition(".")[0] for info in config.host.infos.values())}
        payload = {
            "inputs": _dump(inputs),
            "envFile": str(env_file) if env_file is not None else "",
            "envFileStamp": cache.stamp(env_file) if env_file is not None else "",
            "pidfiles": _pidfiles(inputs.state.root),
            "sources": cache.module_sources(packages),
        }
        cache.write(path, key, payload)
    return inputs


def remembered(path: str | None, key: str) -> StatusInputs | None:
    """The inputs an earlier run kept in ``path`` under ``key`` when every enabled service is running (else their
    problems are wanted, which only the whole config can say); None otherwise."""
    if path is None:
        return None
    payload = cache.read(path, key)
    try:
        inputs = _load(payload["inputs"])
        fresh = (
            cache.stamp(payload["envFile"]) == payload["envFileStamp"]
            and _pidfiles(inputs.state.root) == payload["pidfiles"]
            and cache.unchanged(payload["sources"])
        )
    except (TypeError, KeyError, ValueError):  # no payload, or one this code did not write
        return None
    if not fresh:
        return None
    from the_loop.state import runlock

    if any(spec.enabled and not runlock.is_held(spec.pidfile) for spec in inputs.specs):
        return None
    from the_loop.config import print_warnings

    print_warnings(inputs.warnings)
    return inputs


def _host_given() -> bool:
    plugins = sys.modules.get("the_loop.plugins")
    return plugins is not None and plugins.built_host() is not None


def _key(ref: ConfigRef) -> str:
    parts = ["status", str(CACHE_FORMAT), *cache.installed_code()]
    parts += [f"config:{ref.path}:{cache.stamp(ref.path)}", f"home:{os.environ.get('HOME', '')}"]
    return "\n".join(parts)


def _pidfiles(root: Path) -> list[str]:
    try:
        return sorted(name for name in os.listdir(root) if name.endswith(".pid"))
    except OSError:
        return []


def _dump(inputs: StatusInputs) -> dict[str, Any]:
    state = inputs.state
    return {
        "configPath": str(inputs.config_path),
        "state": [str(state.root), state.registry_dir, state.event_log, state.gh_webhook_pidfile],
        "webTerminal": inputs.web_terminal,
        "warnings": list(inputs.warnings),
        "standing": list(inputs.standing),
        "tmuxSocket": inputs.tmux_socket,
        "specs": [  # never their problems (see remembered)
            [
                spec.name,
                spec.enabled,
                spec.enabled_by,
                str(spec.pidfile),
                str(spec.logfile),
                spec.run,
                spec.owner,
                spec.url,
                spec.health,
            ]
            for spec in inputs.specs
        ],
    }


def _load(data: dict[str, Any]) -> StatusInputs:
    from the_loop.daemon.services import StatusInputs
    from the_loop.interfaces import ServiceSpec
    from the_loop.state import StateLayout

    root, registry_dir, event_log, gh_webhook_pidfile = data["state"]
    specs = [
        ServiceSpec(
            name, bool(enabled), enabled_by, Path(pidfile), Path(logfile), run, owner=owner, url=url, health=health
        )
        for name, enabled, enabled_by, pidfile, logfile, run, owner, url, health in data["specs"]
    ]
    return StatusInputs(
        config_path=Path(data["configPath"]),
        state=StateLayout(Path(root), registry_dir, event_log, gh_webhook_pidfile),
        specs=specs,
        web_terminal=bool(data["webTerminal"]),
        warnings=[str(warning) for warning in data["warnings"]],
        standing=[str(name) for name in data["standing"]],
        tmux_socket=str(data["tmuxSocket"]),
    )
